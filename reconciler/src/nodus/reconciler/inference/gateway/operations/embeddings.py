"""`POST /v1/embeddings`, where the endpoint's model serves them: input tokens only, no stream.

Who uses it: the gateway's app, through `operations.OPERATIONS`. Up to 2,048 inputs (the seeds' limit), each a
string or a list of token ids; the model server refuses what it does not serve (a model without embeddings: 400
Unsupported, passed on). The hold is the inputs' bound at the input rate, and no output.
"""

from __future__ import annotations

from typing import Any

from nodus.reconciler.inference.endpoints import Operation as OperationName
from nodus.reconciler.inference.errors import invalid, unsupported
from nodus.reconciler.inference.gateway import bounds
from nodus.reconciler.inference.gateway.operations.base import (
    Payload,
    Prepared,
    Translator,
    forwarded,
    model_name,
    refuse_unbilled,
)
from nodus.reconciler.inference.gateway.operations.passthrough import with_model

MAX_INPUTS = 2048


def inputs_of(value: Any) -> list[Any]:
    if isinstance(value, str):
        return [value]
    if isinstance(value, list) and value and all(isinstance(item, int) for item in value):
        return [value]  # one input given as token ids
    if isinstance(value, list) and value and all(isinstance(item, str | list) for item in value):
        return value
    raise invalid("input: a string, a list of strings, or token ids")


class Embeddings:
    name = OperationName.EMBEDDINGS
    route = "/v1/embeddings"

    def prepare(self, body: Payload) -> Prepared:
        refuse_unbilled(body)
        if body.get("stream"):
            raise unsupported("stream: embeddings are not streamed")
        inputs = inputs_of(body.get("input"))
        if len(inputs) > MAX_INPUTS:
            raise invalid(f"input: at most {MAX_INPUTS} inputs per request (got {len(inputs)})")
        return Prepared(
            operation=self.name,
            upstream_path=self.route,
            upstream_body=forwarded(body),
            stream=False,
            input_bound=bounds.embedding_input_bound(inputs),
            max_output=0,
            client_model=model_name(body),
            prompts=len(inputs),
        )

    def answer(self, upstream: Payload, prepared: Prepared, request_id: str) -> Payload:
        return with_model(upstream, prepared.client_model)

    def translator(self, prepared: Prepared, request_id: str) -> Translator:
        raise unsupported("stream: embeddings are not streamed")
