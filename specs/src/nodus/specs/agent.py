"""Agents (`nodus.dev/v1`): Agent definitions, AgentRuns (one conversation) and AgentGroups (many at once).

Who uses it: `nodus.specs.parse` validates these documents; the agent controllers in the reconciler run
them. The rules come from the Agents guide: a run in a group is named `<group>-<taskKey>`, `maxActive` is
1 to 1000, an evaluation batch is at most 100 cases including repetitions, its timeout 1 minute to 24 hours.
"""

from __future__ import annotations

from datetime import timedelta
from decimal import Decimal
from typing import Annotated, Any, Literal, Self

from pydantic import Field, model_validator
from pydantic_core import PydanticCustomError

from nodus.specs.base import Resource, SpecModel
from nodus.specs.types import USD, DnsLabel, Duration, DurationRange, EnvironmentRef, NameRef

MAX_INPUT_BYTES = 256 * 1024
Family = Literal["haiku", "sonnet", "opus", "fable"]


def name_in_group(spec: Any) -> str | None:
    """`<group>-<taskKey>` for a run's raw spec in a group, else None: the name such a run always has."""
    if isinstance(spec, dict) and isinstance(spec.get("group"), str) and isinstance(spec.get("taskKey"), str):
        return f"{spec['group']}-{spec['taskKey']}"
    return None


class AgentModel(SpecModel):
    """Which Claude the agent runs on and who pays for it."""

    access: Literal["Nodus", "BYOK"] = "Nodus"
    """Nodus: nodus's router picks a model per prompt; BYOK: your own Anthropic key pays."""
    families: Annotated[list[Family], Field(min_length=1)] | None = None
    """Restrict the router to these model families, e.g. [haiku, sonnet]."""
    name: str | None = None
    """With BYOK: the Anthropic model to call, e.g. claude-sonnet-5-5."""
    api_key_secret: DnsLabel | None = None
    """With BYOK: the Secret whose key ANTHROPIC_API_KEY holds your key."""

    @model_validator(mode="after")
    def _byok_needs_key(self) -> Self:
        if self.access == "BYOK" and (self.api_key_secret is None or self.name is None):
            raise ValueError("access BYOK needs name (the model) and apiKeySecret (the Secret with the key)")
        if self.access == "Nodus" and self.api_key_secret is not None:
            raise ValueError("apiKeySecret is only used with access: BYOK")
        return self


class AgentSpec(SpecModel):
    """An agent definition: system prompt, model access and cost cap."""

    system: str
    """The system prompt."""
    model: AgentModel = Field(default_factory=AgentModel)
    """Model access (default: nodus's Claude with routing)."""
    max_tokens: Annotated[int, Field(ge=1, le=128_000)] = 4096
    """Largest output of one model call."""
    per_run_max_cost_usd: USD = Field(default=Decimal("1.00"), alias="perRunMaxCostUSD")
    """What one run may spend on the model (default $1.00); copied into each run when it starts."""
    max_tool_calls: Annotated[int, Field(ge=1, le=1000)] = 50
    """Commands per turn at most."""
    state: Literal["Running", "Stopped"] = "Running"
    """A Stopped agent refuses new runs with AgentStopped."""


class Agent(Resource):
    """A durable agent definition."""

    API_VERSION = "nodus.dev/v1"
    KIND = "Agent"
    SHORT_NAMES = ("agent", "agents")
    UPDATABLE_IN_PLACE = ("system", "model", "maxTokens", "perRunMaxCostUSD", "maxToolCalls", "state")

    api_version: Literal["nodus.dev/v1"]
    """Always nodus.dev/v1."""
    kind: Literal["Agent"]
    """Always Agent."""
    spec: AgentSpec
    """The desired state."""


class AgentRunSpec(SpecModel):
    """One conversation with an agent."""

    agent: NameRef
    """The Agent to run ([project/]name; `nodus/claude-assistant` is the ready-made template)."""
    input: str
    """The first prompt, at most 256 KiB."""
    group: DnsLabel | None = None
    """The AgentGroup this run is a task of."""
    task_key: DnsLabel | None = None
    """The task's key in its group (unique there); the run is then named <group>-<taskKey>."""
    depends_on: list[DnsLabel] = Field(default_factory=list)
    """Task keys in the same group that must succeed before this run starts."""
    keep_alive: bool = False
    """Wait for follow-up messages after each turn instead of finishing."""
    deadline: Duration | None = None
    """Bound on the run's lifetime, waiting included; past it the run fails with DeadlineExceeded."""

    @model_validator(mode="after")
    def _group_rules(self) -> Self:
        if len(self.input.encode()) > MAX_INPUT_BYTES:
            raise PydanticCustomError("input_too_large", "input is larger than 256 KiB", {})
        if (self.group is None) != (self.task_key is None):
            raise ValueError("group and taskKey go together: a run in a group is one of its tasks")
        if self.depends_on and self.group is None:
            raise ValueError("dependsOn names task keys of a group: set group and taskKey")
        if self.task_key is not None and self.task_key in self.depends_on:
            raise ValueError("a run cannot depend on itself")
        if len(set(self.depends_on)) != len(self.depends_on):
            raise ValueError("dependsOn lists a task key twice")
        return self


class AgentRun(Resource):
    """One agent conversation; in a group, one task of it."""

    API_VERSION = "nodus.dev/v1"
    KIND = "AgentRun"
    SHORT_NAMES = ("ar", "agentrun", "agentruns")
    UPDATABLE_IN_PLACE = ("keepAlive", "deadline")

    api_version: Literal["nodus.dev/v1"]
    """Always nodus.dev/v1."""
    kind: Literal["AgentRun"]
    """Always AgentRun."""
    spec: AgentRunSpec
    """The desired state."""

    @classmethod
    def patch_json_schema(cls, schema: dict[str, Any]) -> dict[str, Any]:
        """metadata.name may be left out of a run in a group (it is <group>-<taskKey>)."""
        defs = schema["$defs"]
        defs["RunMetadata"] = {**defs["Metadata"], "required": []}
        schema["properties"]["metadata"] = {
            "$ref": "#/$defs/RunMetadata",
            "description": "Name (optional in a group: <group>-<taskKey>), project and labels.",
        }
        return schema

    @model_validator(mode="before")
    @classmethod
    def _name_from_group(cls, data: Any) -> Any:
        """A run in a group may leave metadata.name out: it is `<group>-<taskKey>`."""
        if not isinstance(data, dict):
            return data
        name = name_in_group(data.get("spec"))
        meta = data.get("metadata")
        meta = {} if meta is None else meta
        if name is not None and isinstance(meta, dict) and "name" not in meta:
            return {**data, "metadata": {**meta, "name": name}}
        return data

    @model_validator(mode="after")
    def _name_matches_task(self) -> Self:
        if self.spec.group is not None:
            expected = f"{self.spec.group}-{self.spec.task_key}"
            if self.metadata.name != expected:
                raise PydanticCustomError(
                    "run_name",
                    "a run in group {group} is named {expected}; leave metadata.name out or set exactly that",
                    {"group": self.spec.group, "expected": expected},
                )
        return self


class GroupLimits(SpecModel):
    """How many runs go at once and how many the group takes in."""

    max_active: Annotated[int, Field(ge=1, le=1000)] = 10
    """Runs at the same time, 1 to 1000 (default 10); may change on a live group."""
    max_pending: Annotated[int, Field(ge=1, le=10000)] = 10000
    """Unfinished runs the group takes in (default 10000); a run beyond it is refused."""
    max_cost_usd: USD | None = Field(default=None, alias="maxCostUSD")
    """The group's cost cap (also accepted as spec.maxCostUSD); it can be raised, never lowered."""


class GroupEvaluation(SpecModel):
    """An evaluation batch: fixed tasks of an Environment run through the group and graded."""

    environment: EnvironmentRef
    """The Environment at an explicit version, [project/]name@version."""
    split: Literal["train", "test"] = "test"
    """Which split the tasks come from."""
    tasks: Annotated[int, Field(ge=1, le=100)]
    """How many tasks."""
    repetitions: Annotated[int, Field(ge=1, le=100)] = 1
    """Runs per task; tasks times repetitions is at most 100 cases."""
    seed: Annotated[int, Field(ge=0)] = 0
    """Seed of the task selection."""
    timeout: Annotated[Duration, DurationRange("1m", "24h")] = timedelta(minutes=30)
    """Absolute deadline from group creation, 1m to 24h (default 30m); grading stops there too."""

    @model_validator(mode="after")
    def _batch_size(self) -> Self:
        if self.tasks * self.repetitions > 100:
            raise PydanticCustomError(
                "batch_too_large",
                "an evaluation batch is at most 100 cases including repetitions (got {cases})",
                {"cases": self.tasks * self.repetitions},
            )
        return self


class AgentGroupSpec(SpecModel):
    """Many runs of one agent with a shared concurrency limit and cost cap."""

    agent: NameRef
    """The Agent every run of the group uses."""
    limits: GroupLimits = Field(default_factory=GroupLimits)
    """Concurrency and intake limits."""
    max_cost_usd: USD | None = Field(default=None, alias="maxCostUSD")
    """One cap for the whole group: a run starts only while its own cap fits under what is left."""
    sealed: bool = False
    """No more runs are coming; a group finishes only once sealed. Cannot be undone."""
    evaluation: GroupEvaluation | None = None
    """Make this an evaluation group: nodus creates and grades the runs."""

    @model_validator(mode="after")
    def _one_cap(self) -> Self:
        if self.max_cost_usd is not None and self.limits.max_cost_usd is not None:
            raise ValueError("set the group cost cap once: spec.maxCostUSD or spec.limits.maxCostUSD")
        return self

    @property
    def cost_cap(self) -> Decimal | None:
        """The group's cap wherever it was written."""
        return self.max_cost_usd if self.max_cost_usd is not None else self.limits.max_cost_usd


class AgentGroup(Resource):
    """Runs of one agent in parallel under one cap."""

    API_VERSION = "nodus.dev/v1"
    KIND = "AgentGroup"
    SHORT_NAMES = ("ag", "agentgroup", "agentgroups")
    UPDATABLE_IN_PLACE = (
        "limits.maxActive",
        "limits.maxPending",
        "limits.maxCostUSD",
        "maxCostUSD",
        "sealed",
    )

    api_version: Literal["nodus.dev/v1"]
    """Always nodus.dev/v1."""
    kind: Literal["AgentGroup"]
    """Always AgentGroup."""
    spec: AgentGroupSpec
    """The desired state."""
