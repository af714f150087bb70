"""Every kind nodus knows, by `apiVersion` and `kind`, and the names the CLI accepts for each.

Who uses it: `nodus.specs.parse` dispatches each YAML document to its model here (the discriminated union
on apiVersion+kind); `nodus schema KIND` and the schema export list kinds from it; the CLI resolves short
names (`tj`, `ag`, `ep`) with `kind_for_name`.
"""

from __future__ import annotations

from typing import Annotated, Any

from pydantic import Discriminator, Tag, TypeAdapter

from nodus.specs.agent import Agent, AgentGroup, AgentRun
from nodus.specs.base import Resource
from nodus.specs.budget import Budget
from nodus.specs.environment import Environment
from nodus.specs.inference import InferenceEndpoint
from nodus.specs.job import Job
from nodus.specs.secret import Secret
from nodus.specs.training import TrainingJob, TrainingRuntime
from nodus.specs.volume import Volume

KINDS: tuple[type[Resource], ...] = (
    Environment,
    Agent,
    AgentRun,
    AgentGroup,
    InferenceEndpoint,
    Volume,
    Budget,
    Secret,
    TrainingJob,
    TrainingRuntime,
    Job,
)
BY_KIND: dict[str, type[Resource]] = {cls.KIND: cls for cls in KINDS}
API_GROUP = "nodus.dev"
API_VERSIONS = tuple(sorted({cls.API_VERSION for cls in KINDS}))


def kind_for_name(name: str) -> type[Resource] | None:
    """The kind a user means by `TrainingJob`, `trainingjob`, `tj` or `trainingjobs`; None if unknown."""
    lowered = name.lower()
    for cls in KINDS:
        if lowered == cls.KIND.lower() or lowered in cls.SHORT_NAMES:
            return cls
    return None


def _discriminate(value: Any) -> str | None:
    if isinstance(value, dict):
        kind = value.get("kind")
        return kind if isinstance(kind, str) else None
    kind = getattr(value, "KIND", None)
    return kind if isinstance(kind, str) else None


# A discriminated union of every kind, for JSON Schema and for Python callers validating a dict.
AnyResource = Annotated[
    Annotated[Environment, Tag("Environment")]
    | Annotated[Agent, Tag("Agent")]
    | Annotated[AgentRun, Tag("AgentRun")]
    | Annotated[AgentGroup, Tag("AgentGroup")]
    | Annotated[InferenceEndpoint, Tag("InferenceEndpoint")]
    | Annotated[Volume, Tag("Volume")]
    | Annotated[Budget, Tag("Budget")]
    | Annotated[Secret, Tag("Secret")]
    | Annotated[TrainingJob, Tag("TrainingJob")]
    | Annotated[TrainingRuntime, Tag("TrainingRuntime")]
    | Annotated[Job, Tag("Job")],
    Discriminator(_discriminate),
]
RESOURCE_ADAPTER: TypeAdapter[Any] = TypeAdapter(AnyResource)
