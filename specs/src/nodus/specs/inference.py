"""The InferenceEndpoint kind (`nodus.dev/v1`): a model behind its own base URL with limits and a cost cap.

Who uses it: `nodus.specs.parse` validates it; the reconciler's endpoint controller serves it. Limits and
the cap may change in place (the cap only upwards); a different model replaces the endpoint.
"""

from __future__ import annotations

import re
from typing import Annotated, Literal, Self

from pydantic import Field, field_validator, model_validator

from nodus.specs.base import Resource, SpecModel
from nodus.specs.training import VolumeRef
from nodus.specs.types import USD, DnsLabel, HfModelUri

MODEL_ID_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]*/[A-Za-z0-9][A-Za-z0-9._:-]*$")


class EndpointModel(SpecModel):
    """A model that is not a catalog id: a pinned revision, a Volume revision, or a TrainingJob's trained adapter."""

    uri: HfModelUri | None = None
    """hf://org/name@<40-character commit>; imported once into a read-only folder, as for training."""
    volume: VolumeRef | None = None
    """A Volume holding a model, or a LoRA adapter (adapter_config.json) exported from a TrainingJob, served over
    the base model its provenance.json names."""
    training_job: DnsLabel | None = None
    """A Succeeded TrainingJob of this project: its output adapter, served over the model it trained."""

    @model_validator(mode="after")
    def _one_source(self) -> Self:
        self.require_exactly_one("uri", "volume", "training_job")
        return self


class InferenceEndpointSpec(SpecModel):
    """The model an endpoint serves and the limits it enforces."""

    model: str | EndpointModel
    """A catalog model id such as nodus/gpt-oss-120b or openai/gpt-oss-20b (the model table maps it to weights and
    prices), or `{uri}`, `{volume: {name, revision}}` or `{trainingJob: NAME}`."""
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
    def _model_id(cls, value: str | EndpointModel) -> str | EndpointModel:
        if isinstance(value, str) and not MODEL_ID_RE.match(value):
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
