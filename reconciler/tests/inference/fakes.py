"""A fake model server that speaks OpenAI's API, steered by the prompt, and a way to serve an ASGI app from a thread.

Who uses it: the gateway's tests (`test_gateway*.py`). The fake answers like nodus's model server and vLLM do:
usage in every answer (and in every stream chunk when asked `continuous_usage_stats`), `[DONE]` at the end of a
whole stream, an `error` event and no `[DONE]` for a stream it cuts. The last user text (or the prompt) steers it:
- `say N`: N output tokens ("w1 w2 ..."), finish_reason stop (`say N max` ends with length);
- `fail 503` / `fail 500` / `refuse`: that status (refuse: 400 Invalid);
- `cut N`: a stream of N tokens, then an error event; `drop N`: N tokens, then the connection breaks;
- `slow N`: N tokens, 50 ms apart (time for a client to hang up; the fake records who did in `hung_up`);
  a whole answer comes after N x 50 ms;
- `tools`: two tool calls (a stream interleaves their argument deltas);
- `nousage`: no usage anywhere.
Prompt tokens are the words of every message plus 3, so tests know the usage a request reports.
"""

from __future__ import annotations

import asyncio
import json
import tempfile
import threading
import time
from collections.abc import AsyncIterator, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import uvicorn
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, Response, StreamingResponse
from starlette.routing import Route

SERVED = "tiny"
CONTEXT = 4096


def _words(value: Any) -> int:
    if isinstance(value, str):
        return len(value.split())
    if isinstance(value, list):
        return sum(_words(item) for item in value)
    if isinstance(value, dict):
        return sum(_words(item) for key, item in value.items() if key in ("content", "text"))
    return 0


def _directive(body: dict[str, Any]) -> list[str]:
    if "prompt" in body:
        return str(body["prompt"]).split()
    for message in reversed(body.get("messages") or []):
        if message.get("role") in ("user", "tool"):
            content = message.get("content")
            text = content if isinstance(content, str) else " ".join(p.get("text", "") for p in content or [])
            return text.split()
    return []


def _error(status: int, code: str, message: str) -> JSONResponse:
    return JSONResponse({"error": {"message": message, "type": code, "code": code}}, status_code=status)


class FakeUpstream:
    def __init__(self) -> None:
        self.requests: list[dict[str, Any]] = []
        self.headers: list[dict[str, str]] = []
        self.hung_up: list[str] = []

    def app(self) -> Starlette:
        return Starlette(
            routes=[
                Route("/v1/models", self.models, methods=["GET"]),
                Route("/v1/chat/completions", self.chat, methods=["POST"]),
                Route("/v1/completions", self.completions, methods=["POST"]),
                Route("/v1/embeddings", self.embeddings, methods=["POST"]),
            ]
        )

    async def models(self, request: Request) -> Response:
        return JSONResponse({"object": "list", "data": [{"id": SERVED, "object": "model", "max_model_len": CONTEXT}]})

    async def _body(self, request: Request) -> dict[str, Any]:
        body: dict[str, Any] = await request.json()
        self.requests.append(body)
        self.headers.append(dict(request.headers))
        return body

    async def chat(self, request: Request) -> Response:
        return await self.generate(request, await self._body(request), "chat")

    async def completions(self, request: Request) -> Response:
        return await self.generate(request, await self._body(request), "text")

    async def embeddings(self, request: Request) -> Response:
        body = await self._body(request)
        if body.get("model") != SERVED:
            return _error(404, "NotFound", f"model {body.get('model')!r} is not served here")
        inputs = body["input"] if isinstance(body["input"], list) else [body["input"]]
        data = [{"object": "embedding", "index": i, "embedding": [0.5, 0.5]} for i in range(len(inputs))]
        tokens = sum(len(str(item).split()) + 2 for item in inputs)
        usage = {"prompt_tokens": tokens, "total_tokens": tokens}
        return JSONResponse({"object": "list", "data": data, "model": SERVED, "usage": usage})

    async def generate(self, request: Request, body: dict[str, Any], kind: str) -> Response:
        if body.get("model") != SERVED:
            return _error(404, "NotFound", f"model {body.get('model')!r} is not served here")
        words = _directive(body)
        command = words[0] if words else "say"
        count = int(words[1]) if len(words) > 1 and words[1].isdigit() else 3
        if command == "fail":
            return _error(count, "Unavailable", "the model failed")
        if command == "refuse":
            return _error(400, "Invalid", "max_tokens: too many for this model")
        prompt = _words(body.get("messages") if kind == "chat" else body.get("prompt")) + 3
        usage = "nousage" not in words
        rid = request.headers.get("x-request-id", "")
        if body.get("stream"):
            options = body.get("stream_options") or {}
            continuous = bool(options.get("continuous_usage_stats")) and usage
            final_usage = bool(options.get("include_usage")) and usage
            chunks = self.chunks(kind, command, count, prompt, continuous, final_usage, words, rid)
            return StreamingResponse(chunks, media_type="text/event-stream")
        if command == "slow":
            await asyncio.sleep(0.05 * count)
        finish = "length" if "max" in words else ("tool_calls" if command == "tools" else "stop")
        text = " ".join(f"w{i}" for i in range(1, count + 1))
        answer: dict[str, Any] = {"id": f"chatcmpl-{rid}", "created": int(time.time()), "model": SERVED}
        if kind == "chat":
            message: dict[str, Any] = {"role": "assistant", "content": text if command != "tools" else None}
            if command == "tools":
                message["tool_calls"] = [
                    {"id": "call_a", "type": "function", "function": {"name": "lookup", "arguments": '{"q": "a"}'}},
                    {"id": "call_b", "type": "function", "function": {"name": "lookup", "arguments": '{"q": "b"}'}},
                ]
            answer |= {
                "object": "chat.completion",
                "choices": [{"index": 0, "message": message, "finish_reason": finish}],
            }
        else:
            answer |= {"object": "text_completion", "choices": [{"index": 0, "text": text, "finish_reason": finish}]}
        if usage:
            answer["usage"] = {"prompt_tokens": prompt, "completion_tokens": count, "total_tokens": prompt + count}
        return JSONResponse(answer)

    async def chunks(
        self,
        kind: str,
        command: str,
        count: int,
        prompt: int,
        continuous: bool,
        final_usage: bool,
        words: list[str],
        rid: str,
    ) -> AsyncIterator[bytes]:
        def event(choice: dict[str, Any] | None, produced: int, *, usage_only: bool = False) -> bytes:
            chunk: dict[str, Any] = {
                "id": f"chatcmpl-{rid}",
                "object": "chat.completion.chunk" if kind == "chat" else "text_completion",
                "model": SERVED,
                "choices": [] if usage_only else [choice],
            }
            if continuous or usage_only:
                chunk["usage"] = {
                    "prompt_tokens": prompt,
                    "completion_tokens": produced,
                    "total_tokens": prompt + produced,
                }
            return f"data: {json.dumps(chunk)}\n\n".encode()

        def delta(text: str | None = None, finish: str | None = None, **extra: Any) -> dict[str, Any]:
            if kind == "text":
                return {"index": 0, "text": text or "", "finish_reason": finish}
            content: dict[str, Any] = {"content": text} if text is not None else {}
            return {"index": 0, "delta": {**content, **extra}, "finish_reason": finish}

        try:
            if kind == "chat":
                yield event(delta(role="assistant", text=""), 0)
            if command == "tools":
                pieces = [(0, '{"q": '), (1, '{"q": '), (0, '"a"}'), (1, '"b"}')]
                for produced, (index, arguments) in enumerate(pieces, start=1):
                    call: dict[str, Any] = {"index": index, "function": {"arguments": arguments}}
                    if produced <= 2:
                        call |= {"id": f"call_{'ab'[index]}", "type": "function"}
                        call["function"]["name"] = "lookup"
                    yield event(delta(tool_calls=[call]), produced)
                yield event(delta(finish="tool_calls"), len(pieces))
                count = len(pieces)
            else:
                for produced in range(1, count + 1):
                    if command == "slow":
                        await asyncio.sleep(0.05)
                    yield event(delta(f"w{produced} "), produced)
                if command == "cut":
                    error = {
                        "error": {
                            "message": "the model failed mid-stream",
                            "type": "Unavailable",
                            "code": "Unavailable",
                        }
                    }
                    yield f"data: {json.dumps(error)}\n\n".encode()
                    return
                if command == "drop":
                    # A moment after its last token (so the gateway has read it), the connection breaks.
                    await asyncio.sleep(0.2)
                    raise RuntimeError("the fake model server breaks the connection")
                yield event(delta(finish="length" if "max" in words else "stop"), count)
            if final_usage:
                yield event(None, count, usage_only=True)
            yield b"data: [DONE]\n\n"
        except asyncio.CancelledError:
            self.hung_up.append(rid)
            raise


@contextmanager
def serve_in_thread(app: Any) -> Iterator[Path]:
    """Serve `app` on a Unix socket in a fresh short folder (socket paths are limited to 108 bytes) from a
    thread of this process; yields the socket's path, stops the server afterwards."""
    folder = Path(tempfile.mkdtemp(prefix="nodus-gw-"))
    socket_path = folder / "s.sock"
    server = uvicorn.Server(uvicorn.Config(app, uds=str(socket_path), log_level="error", lifespan="on"))
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    deadline = time.monotonic() + 10
    while not server.started and thread.is_alive() and time.monotonic() < deadline:
        time.sleep(0.01)
    assert server.started, "the test server did not start"
    try:
        yield socket_path
    finally:
        server.should_exit = True
        thread.join(timeout=10)
        socket_path.unlink(missing_ok=True)
        folder.rmdir()
