"""The Job kind (`nodus.dev/v1beta1`): a command on one machine or a gang of machines.

Who uses it: `nodus.specs.parse` validates it; a TrainingJob compiles into a Job of the same name; the
executors (local, Ray) run it. Rules from the multi-node guide: exactly one of `distributed.nodes` or
`distributed.totalGPUs`, 2 to 8 nodes, 1/2/4/8 GPUs per node, reserved rank variables refused in `env`.
"""

from __future__ import annotations

import shlex
from collections.abc import Iterator
from typing import Annotated, Any, Literal, Self

from pydantic import Field, field_validator, model_validator

from nodus.specs import topology
from nodus.specs.base import Loc, Resource, SpecModel
from nodus.specs.compute import Distributed, Launcher, Recovery, Resources
from nodus.specs.types import USD, Duration, EnvVars, ImageRef, NameRef, image_is_pinned


class JobOutput(SpecModel):
    """A folder whose files become the Job's outputs, each with its sha256."""

    name: str
    """The output's name."""
    path: str
    """Absolute path where the command writes it."""


class JobSpec(SpecModel):
    """What to run, where, and under which cap."""

    command: Annotated[list[str], Field(min_length=1)]
    """The command and its arguments; a string is split like a shell would."""
    image: ImageRef | None = None
    """The image to run in; on the local executor the host's environment when left out."""
    working_dir: str | None = None
    """The directory to start in."""
    launcher: Launcher = "Plain"
    """Plain, Torchrun, Ray, Verl, Accelerate or Deepspeed."""
    env: EnvVars = Field(default_factory=dict)
    """Environment variables (NODUS_*, PET_*, MASTER_*, NODE_RANK and NNODES are set by nodus)."""
    secrets: list[NameRef] = Field(default_factory=list)
    """Secrets whose keys become environment variables."""
    resources: Resources | None = None
    """GPUs per node; CPU only when left out."""
    distributed: Distributed | None = None
    """The gang for a multi-node Job."""
    recovery: Recovery = Field(default_factory=Recovery)
    """Restarts of a lost or failed attempt."""
    max_cost_usd: USD | None = Field(default=None, alias="maxCostUSD")
    """The spending cap; reached -> Suspended."""
    timeout: Duration | None = None
    """Wall-clock limit of one attempt."""
    outputs: list[JobOutput] = Field(default_factory=list)
    """Folders collected as outputs when the Job succeeds."""
    owner: str | None = None
    """Kind/name of the resource that created this Job (a TrainingJob); set by nodus."""
    state: Literal["Running", "Suspended"] = "Running"
    """Suspended stops the current attempt and keeps its state; Running resumes."""

    @field_validator("command", mode="before")
    @classmethod
    def _split(cls, value: Any) -> Any:
        if isinstance(value, str):
            try:
                return shlex.split(value)
            except ValueError as exc:
                raise ValueError(f"cannot split the command: {exc}") from None
        return value

    @model_validator(mode="after")
    def _gang_has_a_shape(self) -> Self:
        """A gang nodus could not give a shape (16 GPUs as 3 per node, 24 nodes of 1) is refused here, not at
        launch: `nodus.specs.topology` is the one place the shape is decided."""
        gang = self.distributed
        if gang is None:
            return self
        gpu = self.resources.gpu if self.resources is not None else None
        if gang.total_gpus is not None and gpu is None:
            raise ValueError("distributed.totalGPUs needs resources.gpu: the GPU type the total counts")
        try:
            topology.resolve(
                nodes=gang.nodes,
                total_gpus=gang.total_gpus,
                gpus_per_node=gang.gpus_per_node,
                gpu_count=gpu.count if gpu is not None else 1,
            )
        except ValueError as exc:
            raise ValueError(f"distributed: {exc}") from None
        return self


class Job(Resource):
    """A command run once or as a gang."""

    API_VERSION = "nodus.dev/v1beta1"
    KIND = "Job"
    SHORT_NAMES = ("job", "jobs")
    UPDATABLE_IN_PLACE = ("maxCostUSD", "state")

    api_version: Literal["nodus.dev/v1beta1"]
    """Always nodus.dev/v1beta1."""
    kind: Literal["Job"]
    """Always Job."""
    spec: JobSpec
    """The desired state."""

    def lint(self) -> Iterator[tuple[Loc, str]]:
        if self.spec.image is not None and not image_is_pinned(self.spec.image):
            yield (("spec", "image"), "not pinned by a sha256 digest: the run would not be reproducible")
