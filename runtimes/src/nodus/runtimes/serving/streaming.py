"""Server-Sent Events for `stream: true`, and the response that stops generation when its client goes away.

Who uses it: `server`'s chat and completions routes. The chunks are OpenAI's (`chat.completion.chunk` with a role
chunk first, or `text_completion`), as vLLM sends them:
- `stream_options.include_usage`: one more chunk after the last choice chunk, with `choices: []` and `usage`;
- `stream_options.continuous_usage_stats`: `usage` (prompt, completion so far, total) in every chunk, so a
  gateway relaying the stream knows the tokens produced so far even when the stream is cut;
- a completed stream ends `data: [DONE]`; a stream the server cut (shutdown, a model failure) ends with an
  `error` event and no [DONE], so nobody takes it for a whole answer.
`CancellingStreamingResponse` cancels the request's ticket however the response ends (the client closed the
connection, the server's shutdown cancelled the task): the scheduler drops the request at its next step.
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass
from typing import Any, Literal

from starlette.responses import StreamingResponse
from starlette.types import Receive, Scope, Send

from nodus.runtimes.serving.engine import Delta, Ticket
from nodus.runtimes.serving.openai_api import APIError, Payload, usage


@dataclass(frozen=True)
class StreamSpec:
    kind: Literal["chat", "text"]
    response_id: str
    created: int
    model: str
    prompt_ids: tuple[int, ...]
    include_usage: bool
    continuous_usage: bool
    return_token_ids: bool


def event(data: Payload | str) -> str:
    return f"data: {data if isinstance(data, str) else json.dumps(data, ensure_ascii=False)}\n\n"


def chunk(
    spec: StreamSpec,
    text: str | None,
    completion_tokens: int,
    *,
    finish_reason: str | None = None,
    token_ids: tuple[int, ...] = (),
    role: bool = False,
    first: bool = False,
) -> Payload:
    """One chunk; `text` None is an empty chat delta. With return_token_ids, each chunk carries its own tokens and
    the first one the prompt's (vLLM's way)."""
    choice: Payload
    if spec.kind == "chat":
        delta: Payload = {"role": "assistant", "content": ""} if role else ({} if text is None else {"content": text})
        choice = {"index": 0, "delta": delta, "logprobs": None, "finish_reason": finish_reason}
        obj = "chat.completion.chunk"
    else:
        choice = {"index": 0, "text": text or "", "logprobs": None, "finish_reason": finish_reason}
        obj = "text_completion"
    body: Payload = {
        "id": spec.response_id,
        "object": obj,
        "created": spec.created,
        "model": spec.model,
        "choices": [choice],
    }
    if spec.return_token_ids:
        choice["token_ids"] = list(token_ids)
        if first:
            body["prompt_token_ids"] = list(spec.prompt_ids)
    if spec.continuous_usage:
        body["usage"] = usage(len(spec.prompt_ids), completion_tokens)
    return body


async def sse(ticket: Ticket, spec: StreamSpec) -> AsyncIterator[str]:
    """The stream of one request, from its first chunk to [DONE] (or to the error event of a cut stream)."""
    first = True
    if spec.kind == "chat":
        yield event(chunk(spec, None, 0, role=True, first=True))
        first = False
    tokens_sent = 0
    async for item in ticket.events():
        if isinstance(item, Delta):
            yield event(chunk(spec, item.text, item.completion_tokens, token_ids=item.token_ids, first=first))
            tokens_sent += len(item.token_ids)
            first = False
            continue
        if item.reason not in ("stop", "length"):
            yield event(APIError(503, "Unavailable", item.error or f"the request ended: {item.reason}").payload())
            return
        text = item.tail if item.tail or spec.kind == "text" else None
        yield event(
            chunk(
                spec,
                text,
                item.completion_tokens,
                finish_reason=item.reason,
                token_ids=item.token_ids[tokens_sent:],
                first=first,
            )
        )
        if spec.include_usage:
            yield event(
                {
                    "id": spec.response_id,
                    "object": "chat.completion.chunk" if spec.kind == "chat" else "text_completion",
                    "created": spec.created,
                    "model": spec.model,
                    "choices": [],
                    "usage": usage(len(spec.prompt_ids), item.completion_tokens),
                }
            )
        yield event("[DONE]")


class CancellingStreamingResponse(StreamingResponse):
    """A StreamingResponse that calls `on_close` however it ends (done, client gone, task cancelled)."""

    def __init__(self, content: AsyncIterator[str], on_close: Callable[[], None], **kwargs: Any) -> None:
        super().__init__(content, media_type="text/event-stream", **kwargs)
        self.on_close = on_close

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        try:
            await super().__call__(scope, receive, send)
        finally:
            self.on_close()
