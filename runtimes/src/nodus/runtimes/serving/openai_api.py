"""OpenAI's HTTP API as the model server speaks it: request bodies in, response and stream-chunk shapes out.

Who uses it: `server` (the Starlette app). Requests are checked here, before anything reaches the engine: a
malformed body is 400 `Invalid` naming the field, a feature this server does not serve is 400 `Unsupported`,
an unknown model 404 `NotFound`; errors have OpenAI's shape with the code in both `type` and `code`, as nodus's
gateway answers them. Fields OpenAI clients send that change nothing here (`user`, `metadata`, ...) are accepted
and ignored, as vLLM does. vLLM's extensions that the gateway or the tests use are served the same way:
`stream_options.continuous_usage_stats` (usage in every chunk), `ignore_eos`, `top_k`, `return_token_ids`,
`chat_template_kwargs`.
"""

from __future__ import annotations

import base64
import struct
from typing import Any, Literal, TypeVar

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from nodus.runtimes.serving.engine import SamplingParams

MAX_EMBEDDING_INPUTS = 2048
Payload = dict[str, Any]
BodyT = TypeVar("BodyT", bound=BaseModel)


class APIError(Exception):
    """An answer other than 200: status, nodus error code, one-line message."""

    def __init__(self, status: int, code: str, message: str) -> None:
        super().__init__(message)
        self.status = status
        self.code = code
        self.message = message

    def payload(self) -> Payload:
        return {"error": {"message": self.message, "type": self.code, "code": self.code}}


def invalid(message: str) -> APIError:
    return APIError(400, "Invalid", message)


def unsupported(message: str) -> APIError:
    return APIError(400, "Unsupported", message)


class Body(BaseModel):
    model_config = ConfigDict(extra="allow")


class StreamOptions(BaseModel):
    model_config = ConfigDict(extra="forbid")
    include_usage: bool = False
    continuous_usage_stats: bool = False


class ChatMessage(Body):
    role: Literal["system", "developer", "user", "assistant", "tool"]
    content: str | list[dict[str, Any]] | None = None
    name: str | None = None
    tool_calls: list[dict[str, Any]] | None = None
    tool_call_id: str | None = None

    def for_template(self, index: int) -> Payload:
        """The message as chat templates read it: content as one string (text parts joined)."""
        if isinstance(self.content, list):
            texts = []
            for part_index, part in enumerate(self.content):
                if part.get("type") != "text" or not isinstance(part.get("text"), str):
                    where = f"messages[{index}].content[{part_index}]"
                    raise unsupported(f"{where}: only text parts are served (got {part.get('type')!r})")
                texts.append(part["text"])
            content = "".join(texts)
        else:
            content = self.content or ""
        message: Payload = {"role": "system" if self.role == "developer" else self.role, "content": content}
        for key in ("name", "tool_calls", "tool_call_id"):
            if getattr(self, key) is not None:
                message[key] = getattr(self, key)
        return message


class SamplingBody(Body):
    model: str
    stream: bool = False
    stream_options: StreamOptions | None = None
    max_tokens: int | None = Field(default=None, ge=1)
    temperature: float | None = Field(default=None, ge=0, le=2)
    top_p: float | None = Field(default=None, gt=0, le=1)
    top_k: int | None = Field(default=None, ge=-1)
    seed: int | None = None
    stop: str | list[str] | None = None
    n: int = 1
    presence_penalty: float = 0.0
    frequency_penalty: float = 0.0
    ignore_eos: bool = False
    return_token_ids: bool = False

    def refuse_unserved(self) -> None:
        if self.n != 1:
            raise unsupported("n: only one choice per request is served (n=1)")
        if self.presence_penalty or self.frequency_penalty:
            raise unsupported("presence_penalty, frequency_penalty: penalties are not served")
        if self.stream_options is not None and not self.stream:
            raise invalid("stream_options: only allowed when stream is true")
        if isinstance(self.stop, list) and len(self.stop) > 4:
            raise invalid("stop: at most 4 stop strings")

    def requested_max_tokens(self) -> int | None:
        return self.max_tokens

    def sampling(self, prompt_tokens: int, max_model_len: int, defaults: dict[str, float | int]) -> SamplingParams:
        """SamplingParams, with max_tokens bounded by the context window as vLLM bounds it (left out: all the
        room the prompt leaves)."""
        if prompt_tokens == 0:
            raise invalid("the prompt is empty")
        room = max_model_len - prompt_tokens
        if room <= 0:
            raise invalid(f"the prompt has {prompt_tokens} tokens; the model's context is {max_model_len} tokens")
        max_tokens = self.requested_max_tokens()
        if max_tokens is None:
            max_tokens = room
        elif max_tokens > room:
            raise invalid(
                f"max_tokens: {max_tokens} with a prompt of {prompt_tokens} tokens is over the model's context of "
                f"{max_model_len} tokens"
            )
        temperature = self.temperature if self.temperature is not None else float(defaults.get("temperature", 1.0))
        top_p = self.top_p if self.top_p is not None else float(defaults.get("top_p", 1.0))
        top_k = self.top_k if self.top_k is not None else int(defaults.get("top_k", 0))
        stop = (self.stop,) if isinstance(self.stop, str) else tuple(self.stop or ())
        return SamplingParams(
            max_tokens=max_tokens,
            temperature=temperature,
            top_p=top_p,
            top_k=max(top_k, 0),
            seed=self.seed,
            stop=stop,
            ignore_eos=self.ignore_eos,
        )


class ChatRequest(SamplingBody):
    messages: list[ChatMessage] = Field(min_length=1)
    max_completion_tokens: int | None = Field(default=None, ge=1)
    tools: list[dict[str, Any]] | None = None
    tool_choice: str | dict[str, Any] | None = None
    chat_template_kwargs: dict[str, Any] | None = None
    logprobs: bool | None = None
    top_logprobs: int | None = None
    response_format: dict[str, Any] | None = None

    def refuse_unserved(self) -> None:
        super().refuse_unserved()
        if self.logprobs or self.top_logprobs:
            raise unsupported("logprobs: not served")
        if self.response_format is not None and self.response_format.get("type", "text") != "text":
            raise unsupported("response_format: only text replies are served")
        if self.tool_choice not in (None, "none", "auto"):
            raise unsupported("tool_choice: only none or auto (tools are offered to the model's chat template)")

    def requested_max_tokens(self) -> int | None:
        return self.max_completion_tokens if self.max_completion_tokens is not None else self.max_tokens

    def template_messages(self) -> list[Payload]:
        return [message.for_template(index) for index, message in enumerate(self.messages)]


class CompletionRequest(SamplingBody):
    prompt: str | list[Any]
    echo: bool = False
    suffix: str | None = None
    logprobs: int | None = None
    best_of: int | None = None

    def refuse_unserved(self) -> None:
        super().refuse_unserved()
        if not isinstance(self.prompt, str):
            raise unsupported("prompt: one string prompt per request")
        if self.echo or self.suffix is not None or self.logprobs is not None or self.best_of not in (None, 1):
            raise unsupported("echo, suffix, logprobs, best_of: not served")


class EmbeddingRequest(Body):
    model: str
    input: str | list[str]
    encoding_format: Literal["float", "base64"] = "float"
    dimensions: int | None = None

    def texts(self) -> list[str]:
        if self.dimensions is not None:
            raise unsupported("dimensions: the model's own size only")
        texts = [self.input] if isinstance(self.input, str) else self.input
        if not texts:
            raise invalid("input: at least one input")
        if len(texts) > MAX_EMBEDDING_INPUTS:
            raise invalid(f"input: at most {MAX_EMBEDDING_INPUTS} inputs, got {len(texts)}")
        return texts


def parse(kind: type[BodyT], body: Any) -> BodyT:
    """The body as `kind`, or 400 Invalid naming the first wrong field."""
    if not isinstance(body, dict):
        raise invalid("the request body must be a JSON object")
    try:
        return kind.model_validate(body)
    except ValidationError as error:
        first = error.errors()[0]
        where = "".join(f"[{part}]" if isinstance(part, int) else f".{part}" for part in first["loc"]).lstrip(".")
        raise invalid(f"{where or 'body'}: {first['msg']}") from None


# --- responses --------------------------------------------------------------------------------------------------


def usage(prompt_tokens: int, completion_tokens: int) -> Payload:
    return {
        "prompt_tokens": prompt_tokens,
        "completion_tokens": completion_tokens,
        "total_tokens": prompt_tokens + completion_tokens,
    }


def chat_completion(
    response_id: str,
    created: int,
    model: str,
    text: str,
    finish_reason: str,
    prompt_ids: tuple[int, ...],
    token_ids: tuple[int, ...],
    *,
    return_token_ids: bool,
) -> Payload:
    choice: Payload = {
        "index": 0,
        "message": {"role": "assistant", "content": text},
        "logprobs": None,
        "finish_reason": finish_reason,
    }
    body: Payload = {
        "id": response_id,
        "object": "chat.completion",
        "created": created,
        "model": model,
        "choices": [choice],
        "usage": usage(len(prompt_ids), len(token_ids)),
    }
    if return_token_ids:
        choice["token_ids"] = list(token_ids)
        body["prompt_token_ids"] = list(prompt_ids)
    return body


def text_completion(
    response_id: str,
    created: int,
    model: str,
    text: str,
    finish_reason: str,
    prompt_ids: tuple[int, ...],
    token_ids: tuple[int, ...],
    *,
    return_token_ids: bool,
) -> Payload:
    choice: Payload = {"index": 0, "text": text, "logprobs": None, "finish_reason": finish_reason}
    if return_token_ids:
        choice["prompt_token_ids"] = list(prompt_ids)
        choice["token_ids"] = list(token_ids)
    return {
        "id": response_id,
        "object": "text_completion",
        "created": created,
        "model": model,
        "choices": [choice],
        "usage": usage(len(prompt_ids), len(token_ids)),
    }


def embedding_list(model: str, vectors: list[list[float]], prompt_tokens: int, encoding: str) -> Payload:
    def encode(vector: list[float]) -> list[float] | str:
        if encoding == "base64":  # little-endian float32, as OpenAI's clients decode it
            return base64.b64encode(struct.pack(f"<{len(vector)}f", *vector)).decode()
        return vector

    return {
        "object": "list",
        "data": [{"object": "embedding", "index": i, "embedding": encode(v)} for i, v in enumerate(vectors)],
        "model": model,
        "usage": {"prompt_tokens": prompt_tokens, "total_tokens": prompt_tokens},
    }
