"""The workload: what a controller asks an executor to run, naming artifacts by content, never by host path.

Who uses it: the TrainingJob controller (`controllers/trainingjob.py::compile_workload`) and the Job controller
build one; `Executor.launch` takes it and `Executor.spec_of` gives it back; `nodus apply --dry-run` prints it. Each
executor resolves it on its own host at launch: the local one into the job folder's JobSpec
(`executors/local/resolve.py`); a Ray executor would resolve the same document on a GPU node.

What it names, and how:
- the command as the runtime or Job wrote it (`python` stays `python`: which interpreter is the host's business);
- the Environment by its grader image and the image digests, its task manifests by sha256 in the project's
  content store (`split/seed -> sha256`, as nodus-build froze them), and its package by the source digest
  nodus-build recorded. The one host path it may hold is `package.hostHint`, a `file://` URI of a path
  package's folder for process-mode graders on the host that applied it: a hint, marked as one;
- the model (and a distillation's teacher) by its pinned URI, or by Volume name and revision;
- the data set by Volume name and revision, with the file or folder in it (`spec.data`, fixed at launch).

It is serialised once, `model_dump_json(by_alias=True)`, camelCase, with `apiVersion` for the day it changes.
"""

from __future__ import annotations

from decimal import Decimal
from typing import Any, Final, Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator
from pydantic.alias_generators import to_camel

from nodus.errors import ConfigError

from ..session.cost import parse_usd

API_VERSION: Final = "nodus.dev/workload/v1"
WorkloadKind = Literal["TrainingJob", "Job"]
HOST_HINT_SCHEME: Final = "file://"


class WorkloadModel(BaseModel):
    """Frozen, camelCase on the wire, and no field nodus does not know (a typo is an error, not ignored)."""

    model_config = ConfigDict(frozen=True, extra="forbid", alias_generator=to_camel, populate_by_name=True)


class WorkloadKey(WorkloadModel):
    """Which resource the workload runs: a launch is idempotent by this key, the generation and the attempt."""

    project: str
    name: str
    kind: WorkloadKind = "TrainingJob"


class GpuResources(WorkloadModel):
    types: tuple[str, ...]
    """Any of these GPU types will do."""
    count: int = Field(default=1, ge=1)
    """GPUs per node."""


class Resources(WorkloadModel):
    """What one run needs, from the resource's `spec.resources` (none: whatever the executor gives, CPU here)."""

    gpu: GpuResources | None = None
    nodes: int = Field(default=1, ge=1)
    cpu: int | None = Field(default=None, ge=1)
    """CPU cores per node (`resources.cpu`); None: one, for the session and its trainer."""
    memory_bytes: int | None = Field(default=None, ge=1, alias="memoryBytes")
    """Memory per node in bytes (`resources.memory`); None: whatever the node has."""
    launcher: str = "Plain"
    """How each member of a gang runs the command (`Plain`, `Torchrun`, ...): the seeds' launchers."""
    startup_timeout_s: float = Field(default=900.0, gt=0, alias="startupTimeoutS")
    """How long a gang's assembly waits for every member to be placed (`distributed.startupTimeout`)."""
    max_assembly_retries: int = Field(default=2, ge=0, alias="maxAssemblyRetries")
    """Assemblies tried again after one timed out, before the gang fails (`distributed.maxAssemblyRetries`)."""
    max_restarts: int = Field(default=3, ge=0, alias="maxRestarts")
    """Restarts of a gang at its next epoch after a lost member (`recovery.maxAttempts`)."""


class Intervals(WorkloadModel):
    """Seconds between cost accounting steps and heartbeats, and the grace between SIGTERM and SIGKILL."""

    accounting_s: float = Field(default=10.0, gt=0, alias="accountingS")
    heartbeat_s: float = Field(default=5.0, gt=0, alias="heartbeatS")
    stop_grace_s: float = Field(default=10.0, ge=0, alias="stopGraceS")


class PackageSource(WorkloadModel):
    """The Environment's package: by the source digest nodus-build recorded (None for pip and image packages,
    and for a lock written before nodus-build recorded it), and, for process-mode graders only, where a path
    package's folder is on the host that applied it (`file://` URI: a hint, not an artifact)."""

    source_digest: str | None = None
    host_hint: str | None = None

    @model_validator(mode="after")
    def _hint_is_a_file_uri(self) -> PackageSource:
        if self.host_hint is not None and not self.host_hint.startswith(HOST_HINT_SCHEME + "/"):
            raise ConfigError(f"workload: package.hostHint must be a file:// URI, got {self.host_hint!r}")
        return self


class EnvironmentArtifact(WorkloadModel):
    """The Environment the job serves tasks and gradings from, by content."""

    project: str
    name: str
    version: str
    grader_image: str | None = None
    """The image graders run in (container mode); None: process mode, from the package."""
    grader_image_digest: str | None = None
    """The grader image's id (its config digest), with `graderImage`."""
    image_digest: str | None = None
    """The built image's manifest digest (nodus.lock), whichever mode the graders run in."""
    manifests: dict[str, str] = Field(default_factory=dict)
    """`split/seed` -> the sha256 of the task manifest in the project's content store."""
    package: PackageSource = Field(default_factory=PackageSource)
    loader: str | None = None
    train_tasks: int = Field(default=256, ge=0)
    held_out_tasks: int = Field(default=64, ge=0)
    seed: int = Field(default=0, ge=0)


class VolumeRevision(WorkloadModel):
    name: str
    revision: int = Field(ge=0)


class AdapterArtifact(WorkloadModel):
    """A LoRA adapter in a Volume's revision: `path` is its folder inside the revision (`adapter` for a run's
    exported outputs, empty for an adapter uploaded at the top)."""

    volume: VolumeRevision
    path: str = ""


class ModelArtifact(WorkloadModel):
    """The model the trainer starts from: a pinned URI (`hf://org/name@commit`) or a Volume's revision, with the
    LoRA adapters (`adapters`, in the order they were trained) the trainer merges into it before training (a Volume
    revision holding an exported adapter, `nodus.reconciler.volume_models`)."""

    uri: str | None = None
    volume: VolumeRevision | None = None
    adapters: tuple[AdapterArtifact, ...] = ()

    @model_validator(mode="after")
    def _one_source(self) -> ModelArtifact:
        if (self.uri is None) == (self.volume is None):
            raise ConfigError("workload: model names exactly one of uri or volume")
        return self


class DataArtifact(WorkloadModel):
    """A data set: a file or folder of a Volume's revision, its format and the column mapping (`spec.data`)."""

    volume: VolumeRevision
    path: str | None = None
    """A file or folder inside the revision; None: all of it."""
    format: str = "JSONL"
    columns: dict[str, str] = Field(default_factory=dict)


class SecretRef(WorkloadModel):
    """Where one variable of the trainer's environment comes from: a key of a Secret, read where the Secret says
    (`source`: the Secret's spec, which holds no value: the variable or dotenv file that has it) by the process that
    starts the trainer, never stored. `field` is what asked for it (`spec.model.secret`), for messages."""

    env: str
    secret: str
    key: str
    source: dict[str, Any]
    field: str


class Workload(WorkloadModel):
    """One launch of a TrainingJob or Job: see the module docstring."""

    api_version: Literal["nodus.dev/workload/v1"] = Field(default=API_VERSION, alias="apiVersion")
    key: WorkloadKey
    generation: int = Field(default=1, ge=1)
    attempt: int = Field(default=1, ge=1)
    command: tuple[str, ...] = Field(min_length=1)
    image: str | None = None
    """The image the command runs in; None: on the host."""
    env: dict[str, str] = Field(default_factory=dict)
    resources: Resources | None = None
    price_per_hour_usd: str = Field(default="0", alias="pricePerHourUSD")
    max_cost_usd: str | None = Field(default=None, alias="maxCostUSD")
    intervals: Intervals = Field(default_factory=Intervals)
    params: dict[str, Any] = Field(default_factory=dict)
    """The trainer's parameters (params.json)."""
    environment: EnvironmentArtifact | None = None
    model: ModelArtifact | None = None
    secrets: tuple[SecretRef, ...] = ()
    """Variables the trainer gets from Secrets (HF_TOKEN, MLFLOW_TRACKING_TOKEN, WANDB_API_KEY): by reference."""
    teacher: ModelArtifact | None = None
    """The teacher of a distillation run (`spec.teacher`), by pinned URI or Volume revision."""
    data: DataArtifact | None = None

    @model_validator(mode="after")
    def _money_and_command(self) -> Workload:
        for what, value in (("pricePerHourUSD", self.price_per_hour_usd), ("maxCostUSD", self.max_cost_usd)):
            if value is not None:
                parse_usd(value, f"workload {self.key.name}: {what}")
        if not all(part for part in self.command):
            raise ConfigError(f"workload {self.key.name}: command must be a list of non-empty strings")
        return self

    @property
    def project(self) -> str:
        return self.key.project

    @property
    def name(self) -> str:
        return self.key.name

    @property
    def max_cost(self) -> Decimal | None:
        return None if self.max_cost_usd is None else parse_usd(self.max_cost_usd, "maxCostUSD")

    @property
    def price_per_hour(self) -> Decimal:
        return parse_usd(self.price_per_hour_usd, "pricePerHourUSD")

    def interval_cost(self) -> Decimal:
        """What one accounting interval costs: the most a run may go over its cap."""
        return self.price_per_hour * Decimal(str(self.intervals.accounting_s)) / Decimal(3600)

    def with_changes(self, **fields: Any) -> Workload:
        """A copy with `fields` changed (Python names), validated as a new workload is."""
        return Workload.model_validate({**self.model_dump(), **fields})

    def to_json(self) -> str:
        """The one serialisation: camelCase, as launched, printed and stored."""
        return self.model_dump_json(by_alias=True)

    @classmethod
    def from_json(cls, text: str | bytes) -> Workload:
        return cls.model_validate_json(text)
