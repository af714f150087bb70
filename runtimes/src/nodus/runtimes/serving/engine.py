"""What the HTTP layer asks of a generation engine, and the types that cross between them.

Who uses it: `server` (the Starlette app) calls an `Engine`; `transformers_backend.TransformersEngine` is the one
in-process engine (vLLM is its own server, `vllm_backend`). A request goes in as a `GenerationRequest` (prompt
token ids, already rendered by the engine's chat template, and `SamplingParams`) and comes back as a `Ticket`:
`Delta` events while tokens are produced, then one `Finished`. The engine's scheduler runs on its own thread;
the ticket hands events to the server's event loop and carries the cancellation flag the other way (a client that
went away is dropped from the batch at the next step, and its produced token count is kept).
"""

from __future__ import annotations

import asyncio
import contextlib
import threading
from collections.abc import AsyncIterator, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal, Protocol

RecordState = Literal["waiting", "running", "finished", "cancelled", "aborted", "error"]
FinishReason = Literal["stop", "length", "cancelled", "aborted", "error"]
"""`stop` (EOS, a stop token or a stop string), `length` (max_tokens), `cancelled` (the client went away),
`aborted` (the server is shutting down), `error` (the model failed)."""


class EngineError(Exception):
    """A request the engine refuses; `kind` says how the server answers it."""

    def __init__(self, kind: Literal["invalid", "unsupported", "not_found", "unavailable"], message: str) -> None:
        super().__init__(message)
        self.kind = kind
        self.message = message


@dataclass(frozen=True)
class SamplingParams:
    """How one request samples. temperature 0 is greedy; top_k 0 is off; the same seed gives the same answer."""

    max_tokens: int
    temperature: float = 1.0
    top_p: float = 1.0
    top_k: int = 0
    seed: int | None = None
    stop: tuple[str, ...] = ()
    ignore_eos: bool = False


@dataclass(frozen=True)
class GenerationRequest:
    request_id: str
    model: str
    """A served name: the base model's or one adapter's."""
    prompt_ids: tuple[int, ...]
    sampling: SamplingParams


@dataclass(frozen=True)
class Delta:
    """New text (never empty), the tokens it came from, and the count of tokens produced so far."""

    text: str
    token_ids: tuple[int, ...]
    completion_tokens: int


@dataclass(frozen=True)
class Finished:
    reason: FinishReason
    text: str
    """The whole completion's text (stop strings cut off)."""
    token_ids: tuple[int, ...]
    completion_tokens: int
    tail: str = ""
    """Text not yet sent in a Delta (held back while it could have begun a stop string)."""
    error: str | None = None


Event = Delta | Finished


@dataclass(frozen=True)
class ModelCard:
    """One entry of /v1/models."""

    name: str
    root: str
    parent: str | None
    max_model_len: int


class Ticket:
    """The server's handle on one submitted request. The engine thread publishes events (thread-safe, onto the
    loop the request was submitted from); `cancel()` may be called from any thread and is seen at the next step."""

    def __init__(self, request: GenerationRequest, loop: asyncio.AbstractEventLoop) -> None:
        self.request = request
        self._loop = loop
        self._events: asyncio.Queue[Event] = asyncio.Queue()
        self._cancelled = threading.Event()
        self.finished: Finished | None = None

    @property
    def cancelled(self) -> bool:
        return self._cancelled.is_set()

    def cancel(self) -> None:
        self._cancelled.set()

    def publish(self, event: Event) -> None:
        if isinstance(event, Finished):
            self.finished = event
        # RuntimeError: the server's loop has closed, so nobody is listening any more.
        with contextlib.suppress(RuntimeError):
            self._loop.call_soon_threadsafe(self._events.put_nowait, event)

    async def events(self) -> AsyncIterator[Event]:
        while True:
            event = await self._events.get()
            yield event
            if isinstance(event, Finished):
                return


@dataclass
class RequestRecord:
    """What the engine remembers of a request (GET /stats/requests/{id}): for receipts of cut streams and tests."""

    request_id: str
    model: str
    prompt_tokens: int
    state: RecordState = "waiting"
    completion_tokens: int = 0
    finish_reason: str | None = None
    forward_passes: int = 0
    shared_with: set[str] = field(default_factory=set)
    """Other requests that were in one of this request's forward passes (capped): the proof of batching."""

    def as_json(self) -> dict[str, Any]:
        return {
            "id": self.request_id,
            "model": self.model,
            "state": self.state,
            "prompt_tokens": self.prompt_tokens,
            "completion_tokens": self.completion_tokens,
            "finish_reason": self.finish_reason,
            "forward_passes": self.forward_passes,
            "shared_with": sorted(self.shared_with),
        }


class Engine(Protocol):
    """A generation engine behind the HTTP layer."""

    backend: str
    served_name: str
    max_model_len: int
    embeddings: bool

    def models(self) -> list[ModelCard]: ...

    def chat_prompt(
        self, messages: list[dict[str, Any]], tools: list[dict[str, Any]] | None, template_kwargs: dict[str, Any]
    ) -> list[int]:
        """The prompt token ids of a chat, rendered by the model's chat template (EngineError "invalid")."""
        ...

    def text_prompt(self, prompt: str) -> list[int]: ...

    def default_sampling(self) -> dict[str, float | int]:
        """Sampling defaults for fields a request leaves out (the model's generation_config, as vLLM reads it)."""
        ...

    def submit(self, request: GenerationRequest, loop: asyncio.AbstractEventLoop) -> Ticket:
        """Queue a request (EngineError "unavailable" once shutting down)."""
        ...

    def embed(self, model: str, texts: Sequence[str]) -> tuple[list[list[float]], int]:
        """(one L2-normalised vector per text, prompt tokens in all); blocking: the server runs it in a thread."""
        ...

    def stats(self) -> dict[str, Any]: ...

    def request_record(self, request_id: str) -> dict[str, Any] | None: ...

    def shutdown(self) -> None:
        """Cut every request in flight (Finished "aborted") and stop taking new ones; returns at once."""
        ...

    def close(self) -> None:
        """Wait for the engine's thread to end (after shutdown)."""
        ...
