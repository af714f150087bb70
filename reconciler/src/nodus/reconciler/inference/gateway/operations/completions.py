"""`POST /v1/completions`: one string prompt and one choice, forwarded as it is.

Who uses it: the gateway's app, through `operations.OPERATIONS`. The seeds' Text Completions: one string prompt
and one choice, without echo, suffix, logprobs or best-of sampling (each refused with 400 Unsupported). The input
bound is the prompt's bytes (`bounds.prompt_input_bound`); the output limit is `max_tokens`.
"""

from __future__ import annotations

from nodus.reconciler.inference.endpoints import Operation as OperationName
from nodus.reconciler.inference.errors import invalid, unsupported
from nodus.reconciler.inference.gateway import bounds
from nodus.reconciler.inference.gateway.operations.base import (
    Payload,
    Prepared,
    Translator,
    forwarded,
    model_name,
    optional_positive,
    refuse_unbilled,
    stream_flag,
)
from nodus.reconciler.inference.gateway.operations.passthrough import (
    UPSTREAM_STREAM_OPTIONS,
    PassthroughTranslator,
    client_stream_options,
    with_model,
)


class Completions:
    name = OperationName.COMPLETIONS
    route = "/v1/completions"

    def prepare(self, body: Payload) -> Prepared:
        refuse_unbilled(body)
        prompt = body.get("prompt")
        if not isinstance(prompt, str):
            raise (
                unsupported("prompt: one string prompt per request")
                if prompt is not None
                else invalid("prompt: required (one string)")
            )
        if body.get("echo"):
            raise unsupported("echo: not served")
        if body.get("suffix") is not None:
            raise unsupported("suffix: not served")
        if body.get("logprobs") is not None:
            raise unsupported("logprobs: not served")
        if body.get("best_of") not in (None, 1):
            raise unsupported("best_of: not served (one choice per request)")
        stream = stream_flag(body)
        upstream = forwarded(body)
        include_usage, continuous = client_stream_options(body)
        if stream:
            upstream["stream_options"] = dict(UPSTREAM_STREAM_OPTIONS)
        elif body.get("stream_options") is not None:
            raise invalid("stream_options: only with stream: true")
        return Prepared(
            operation=self.name,
            upstream_path=self.route,
            upstream_body=upstream,
            stream=stream,
            input_bound=bounds.prompt_input_bound(prompt),
            max_output=optional_positive(body, "max_tokens"),
            client_model=model_name(body),
            options={"include_usage": include_usage, "continuous_usage": continuous},
        )

    def answer(self, upstream: Payload, prepared: Prepared, request_id: str) -> Payload:
        return with_model(upstream, prepared.client_model)

    def translator(self, prepared: Prepared, request_id: str) -> Translator:
        return PassthroughTranslator(prepared)
