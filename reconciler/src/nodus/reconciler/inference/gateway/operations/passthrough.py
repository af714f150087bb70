"""The stream of an OpenAI route relayed as the model server sends it (chat and text completions).

Who uses it: `chat` and `completions`. The gateway always asks the model server for usage in every chunk
(`stream_options: {include_usage, continuous_usage_stats}`, as vLLM and nodus's server serve them), so it knows the
tokens produced when a stream is cut; the client gets only what it asked for: per-chunk usage only with its own
`continuous_usage_stats`, the final usage chunk only with its own `include_usage`. `model` is the one the client
sent (the seeds' receipts and answers name the model submitted).
"""

from __future__ import annotations

from nodus.reconciler.inference.gateway.operations.base import DONE, Payload, Prepared, data_event
from nodus.reconciler.inference.ledger import Usage

UPSTREAM_STREAM_OPTIONS = {"include_usage": True, "continuous_usage_stats": True}


def client_stream_options(body: Payload) -> tuple[bool, bool]:
    """(include_usage, continuous_usage_stats) the client asked for."""
    options = body.get("stream_options")
    if not isinstance(options, dict):
        return False, False
    include = bool(options.get("include_usage"))
    return include, include and bool(options.get("continuous_usage_stats"))


class PassthroughTranslator:
    def __init__(self, prepared: Prepared) -> None:
        self.model = prepared.client_model
        self.include_usage = bool(prepared.options.get("include_usage"))
        self.continuous = bool(prepared.options.get("continuous_usage"))

    def chunk(self, chunk: Payload) -> list[bytes]:
        if chunk.get("choices") == [] and "usage" in chunk:
            if not self.include_usage:
                return []
        elif not self.continuous:
            chunk.pop("usage", None)
        chunk["model"] = self.model
        return [data_event(chunk)]

    def finished(self, usage: Usage) -> list[bytes]:
        return [DONE]

    def failed(self, error: Payload) -> list[bytes]:
        return [data_event(error)]


def with_model(upstream: Payload, model: str) -> Payload:
    upstream["model"] = model
    return upstream
