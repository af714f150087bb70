"""The `Operation` seam and what every operation shares: refusals of what per-token billing cannot count, the
usage of an OpenAI answer, and Server-Sent Events.

Who uses it: the operation modules beside it, and the gateway's app and stream relay (`Prepared`, `Translator`,
`usage_of`).
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any, Protocol

from nodus.reconciler.inference.errors import invalid, unsupported
from nodus.reconciler.inference.ledger import Usage

Payload = dict[str, Any]
DEFAULT_SERVICE_TIERS = (None, "auto", "default", "standard_only")


@dataclass
class Prepared:
    """A request as the gateway will forward it."""

    operation: str
    upstream_path: str
    upstream_body: Payload
    """`model` is set by the gateway to the endpoint's served model."""
    stream: bool
    input_bound: int
    """The most input tokens the prompt can have (`bounds`), before the context window caps it."""
    max_output: int | None
    """The output limit the client set; None: the model's default (the rest of the context window)."""
    client_model: str
    options: Payload = field(default_factory=dict)
    prompts: int = 1
    """Separate prompts the model reads (embedding inputs): each is at most the context window long."""
    """What the operation's answer and stream need from the request (the client's stream_options, tools...)."""


class Translator(Protocol):
    """Turns the model server's chat or completion stream into the client's events (bytes ready to send)."""

    def chunk(self, chunk: Payload) -> list[bytes]:
        """One upstream chunk (a JSON object)."""
        ...

    def finished(self, usage: Usage) -> list[bytes]:
        """The upstream stream ended whole ([DONE]): the closing events, with the client's completion marker."""
        ...

    def failed(self, error: Payload) -> list[bytes]:
        """The stream was cut (an error event from upstream, or the gateway's): an error event, no marker."""
        ...


class Operation(Protocol):
    @property
    def name(self) -> str:
        """As receipts and `status.operations` name it: ChatCompletions, Completions, Responses, Messages,
        Embeddings (`endpoints.Operation`)."""
        ...

    @property
    def route(self) -> str:
        """The client's path after the base URL: /v1/chat/completions."""
        ...

    def prepare(self, body: Payload) -> Prepared:
        """The request to forward; 400 Invalid or Unsupported for what cannot be forwarded or billed."""
        ...

    def answer(self, upstream: Payload, prepared: Prepared, request_id: str) -> Payload:
        """The client's answer from the model server's (a 200 JSON body)."""
        ...

    def translator(self, prepared: Prepared, request_id: str) -> Translator: ...


def refuse_unbilled(body: Payload) -> None:
    """What the seeds refuse on every route: a non-default service_tier, `store`, `background`, several choices
    (n, best_of: the model would generate more than one answer's tokens, which the hold does not count)."""
    if body.get("service_tier") not in DEFAULT_SERVICE_TIERS:
        raise unsupported(f"service_tier: {body['service_tier']!r} is not served (only the default tier)")
    if body.get("store"):
        raise unsupported("store: stored requests are not served (send store: false, or leave it out)")
    if body.get("background"):
        raise unsupported("background: background requests are not served")
    if body.get("n") not in (None, 1):
        raise unsupported("n: one choice per request")
    if body.get("best_of") not in (None, 1):
        raise unsupported("best_of: best-of sampling is not served (one choice per request)")


def optional_positive(body: Payload, name: str) -> int | None:
    value = body.get(name)
    if value is None:
        return None
    if not isinstance(value, int) or isinstance(value, bool) or value < 1:
        raise invalid(f"{name}: must be a positive integer (got {value!r})")
    return value


def stream_flag(body: Payload) -> bool:
    value = body.get("stream", False)
    if value is None:
        return False
    if not isinstance(value, bool):
        raise invalid(f"stream: must be true or false (got {value!r})")
    return value


def model_name(body: Payload) -> str:
    model = body.get("model")
    return model if isinstance(model, str) else ""


def forwarded(body: Payload, *dropped: str) -> Payload:
    """The client's body without the fields only the gateway reads."""
    return {key: value for key, value in body.items() if key not in ("store", "service_tier", "background", *dropped)}


def usage_of(payload: Any) -> Usage | None:
    """The usage of an OpenAI answer or chunk (`prompt_tokens`, `completion_tokens`, cached prompt tokens)."""
    usage = payload.get("usage") if isinstance(payload, dict) else None
    if not isinstance(usage, dict):
        return None
    details = usage.get("prompt_tokens_details")
    cached = details.get("cached_tokens") if isinstance(details, dict) else None
    return Usage(
        input_tokens=_count(usage.get("prompt_tokens")),
        cached_input_tokens=_count(cached),
        output_tokens=_count(usage.get("completion_tokens")),
    )


def _count(value: Any) -> int:
    return value if isinstance(value, int) and not isinstance(value, bool) and value > 0 else 0


def data_event(payload: Payload | str) -> bytes:
    text = payload if isinstance(payload, str) else json.dumps(payload, ensure_ascii=False, separators=(",", ":"))
    return f"data: {text}\n\n".encode()


def named_event(name: str, payload: Payload) -> bytes:
    return f"event: {name}\ndata: {json.dumps(payload, ensure_ascii=False, separators=(',', ':'))}\n\n".encode()


DONE = data_event("[DONE]")


def obj(value: Any) -> Payload:
    """`value` when it is a JSON object, else an empty one (a field a model server left out or sent wrong)."""
    return value if isinstance(value, dict) else {}


def first_choice(payload: Payload) -> Payload:
    choices = payload.get("choices")
    if isinstance(choices, list) and choices and isinstance(choices[0], dict):
        return choices[0]
    return {}


class ToolCalls:
    """Tool calls of a chat stream, assembled from deltas that may interleave (`index` says whose they are)."""

    def __init__(self) -> None:
        self.calls: dict[int, Payload] = {}

    def add(self, delta: Payload) -> tuple[int, bool, str]:
        """Take one delta: (its index, whether it began a new call, the argument text it added)."""
        index = delta.get("index", 0) if isinstance(delta.get("index"), int) else 0
        new = index not in self.calls
        call = self.calls.setdefault(index, {"id": "", "name": "", "arguments": ""})
        if delta.get("id"):
            call["id"] = delta["id"]
        function = obj(delta.get("function"))
        if function.get("name"):
            call["name"] += function["name"]
        added = function.get("arguments") or ""
        call["arguments"] += added
        return index, new, added

    def ordered(self) -> list[Payload]:
        return [self.calls[index] for index in sorted(self.calls)]
