"""The InferenceEndpoint kind (`nodus.dev/v1`): a model behind its own base URL with limits and a cost cap.

Who uses it: `nodus.specs.parse` validates it; the reconciler's endpoint controller serves it. Limits and
the cap may change in place (the cap only upwards); a different model replaces the endpoint.
"""

from __future__ import annotations

import re
from typing import Annotated, Literal

from pydantic import Field, field_validator

from nodus.specs.base import Resource, SpecModel
from nodus.specs.types import USD

MODEL_ID_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]*/[A-Za-z0-9][A-Za-z0-9._:-]*$")


class InferenceEndpointSpec(SpecModel):
    """The model an endpoint serves and the limits it enforces."""

    model: str
    """A catalog model id such as nodus/gpt-oss-120b or openai/gpt-oss-20b."""
    rpm: Annotated[int, Field(ge=1, le=1_000_000)] | None = None
    """Requests per minute the endpoint admits."""
    tpm: Annotated[int, Field(ge=1, le=1_000_000_000)] | None = None
    """Tokens per minute the endpoint admits."""
    max_concurrent: Annotated[int, Field(ge=1, le=10_000)] | None = None
    """Requests in flight at once."""
    allowed_keys: list[str] = Field(default_factory=list)
    """Names of the API keys that may call it; any key of the project when empty."""
    max_cost_usd: USD | None = Field(default=None, alias="maxCostUSD")
    """Spend cap; past it requests get 402 BudgetExceeded. It can only be raised."""
    state: Literal["Running", "Stopped"] = "Running"
    """A Stopped endpoint answers 503 until started again."""

    @field_validator("model")
    @classmethod
    def _model_id(cls, value: str) -> str:
        if not MODEL_ID_RE.match(value):
            raise ValueError(f"must be a model id such as nodus/gpt-oss-120b (got {value!r})")
        return value


class InferenceEndpoint(Resource):
    """A named endpoint for one model."""

    API_VERSION = "nodus.dev/v1"
    KIND = "InferenceEndpoint"
    SHORT_NAMES = ("ep", "endpoint", "endpoints", "inferenceendpoint", "inferenceendpoints")
    UPDATABLE_IN_PLACE = ("rpm", "tpm", "maxConcurrent", "allowedKeys", "maxCostUSD", "state")

    api_version: Literal["nodus.dev/v1"]
    """Always nodus.dev/v1."""
    kind: Literal["InferenceEndpoint"]
    """Always InferenceEndpoint."""
    spec: InferenceEndpointSpec
    """The desired state."""
