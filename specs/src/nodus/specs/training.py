"""Training kinds (`nodus.dev/v1beta1`): TrainingJob (what to train) and TrainingRuntime (how).

Who uses it: `nodus.specs.parse` validates these documents; the reconciler admits a TrainingJob against its
runtime (parameters merged over the runtime's defaults and checked against its JSON Schema), prices it, and
compiles it into a Job. Rules from the Training guide: Hugging Face models are pinned to a 40-character
commit, money is a decimal string, environments are `[project/]name@version`, the cap can only be raised.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from typing import Annotated, Any, Literal, Self

from pydantic import Field, field_validator, model_validator
from pydantic_core import PydanticCustomError

from nodus.specs.base import Loc, Resource, SpecModel
from nodus.specs.compute import Launcher, Placement, Recovery, Resources
from nodus.specs.types import (
    USD,
    DnsLabel,
    Duration,
    EnvironmentRef,
    EnvVars,
    HfModelUri,
    ImageRef,
    NameRef,
    Url,
    check_gpu_type,
    image_is_pinned,
)

Task = Literal["SFT", "Pretrain", "DPO", "ORPO", "KTO", "RewardModel", "GRPO", "Distill", "Evaluate"]
Mode = Literal["Train", "Evaluate"]
TRAIN_ONLY: tuple[Mode, ...] = ("Train",)
Method = Literal["Full", "LoRA", "QLoRA"]
PARAM_COUNT_RE = re.compile(r"^\d+(\.\d+)?[KMBT]$")


class VolumeRef(SpecModel):
    """A Volume, at a pinned revision or at its latest committed one when the job is created."""

    name: DnsLabel
    """The Volume's name."""
    revision: Annotated[int, Field(ge=1)] | None = None
    """The revision to use; fixed to the latest committed revision at creation when left out."""


class ModelSource(SpecModel):
    """A model: a Hugging Face repository at a pinned commit, or a Volume at a revision."""

    uri: HfModelUri | None = None
    """hf://org/name@<40-character commit>; imported once into a read-only Volume and reused."""
    volume: VolumeRef | None = None
    """A Volume holding a model, e.g. the output of an earlier run."""
    secret: DnsLabel | None = None
    """A Secret with HF_TOKEN, only for gated repositories."""

    @model_validator(mode="after")
    def _one_source(self) -> Self:
        self.require_exactly_one("uri", "volume")
        if self.secret is not None and self.uri is None:
            raise ValueError("secret is only used with uri")
        return self


class DataSource(SpecModel):
    """A data set in a Volume, and how its columns map onto the names the runtime expects."""

    volume: DnsLabel
    """The Volume that holds the data."""
    revision: Annotated[int, Field(ge=1)] | None = None
    """The Volume revision; the latest committed one at creation when left out."""
    path: str | None = None
    """A file or folder inside the Volume; the whole Volume when left out."""
    format: Literal["JSONL", "Parquet", "CSV", "Text"] = "JSONL"
    """The file format."""
    columns: dict[str, str] = Field(default_factory=dict)
    """Runtime name -> column in your data, e.g. {prompt: question, completion: answer}."""


class EnvironmentTasks(SpecModel):
    """The Environment to train or evaluate on, and how many tasks of each split."""

    name: EnvironmentRef
    """[project/]name@version, e.g. nodus/graph-coloring@1.0.0 (no prefix: your project)."""
    train_tasks: Annotated[int, Field(ge=1, le=1_000_000)] | None = None
    """Tasks from the train split (default 256, or the split's size when smaller)."""
    held_out_tasks: Annotated[int, Field(ge=1, le=100_000)] | None = None
    """Tasks from the test split, never trained on (default 64, or the split's size when smaller)."""
    seed: Annotated[int, Field(ge=0, le=2**32 - 1)] = 0
    """Same name, version and seed give the same tasks in the same order."""
    task_filter: dict[str, str] = Field(default_factory=dict)
    """Only tasks whose metadata has these values."""


class EvaluationEndpoint(SpecModel):
    """An InferenceEndpoint of the project the held-out tasks are answered through: the path users call."""

    name: DnsLabel
    """The endpoint (Running): its model, adapter and limits are what gets measured, and its requests are charged."""
    key_secret: DnsLabel
    """A Secret holding an API key the endpoint takes (its NODUS_API_KEY key, or its only key)."""


class Evaluation(SpecModel):
    """Held-out evaluation around training."""

    baseline: bool = True
    """Score the held-out tasks before training."""
    final: bool = True
    """Score the same held-out tasks after training."""
    min_comparison_tasks: Annotated[int, Field(ge=1, le=100_000)] = 16
    """Scored tasks needed on both sides for a comparison (else reason TooFewTasks)."""
    tasks: list[str] = Field(default_factory=list)
    """Benchmark task names (e.g. arc_easy) for mode Evaluate without an Environment."""
    endpoint: EvaluationEndpoint | None = None
    """Mode Evaluate: answer the held-out tasks through this InferenceEndpoint instead of loading a model."""


class MlflowTracking(SpecModel):
    """Send metrics to your MLflow server as well."""

    uri: Url
    """The tracking server (becomes MLFLOW_TRACKING_URI)."""
    secret: DnsLabel | None = None
    """A Secret with MLFLOW_TRACKING_TOKEN, or MLFLOW_TRACKING_USERNAME and MLFLOW_TRACKING_PASSWORD."""
    experiment: str | None = None
    """The experiment name."""


class WandbTracking(SpecModel):
    """Send metrics to Weights & Biases as well."""

    connection: DnsLabel
    """The W&B Connection whose Secret holds WANDB_API_KEY."""
    project: str | None = None
    """The W&B project."""


class Tracking(SpecModel):
    """External experiment tracking; nodus shows its own stages and metrics either way."""

    mlflow: MlflowTracking | None = None
    """MLflow settings."""
    wandb: WandbTracking | None = None
    """Weights & Biases settings."""


class ExportTo(SpecModel):
    """Where the complete result is copied when the run succeeds."""

    volume: DnsLabel
    """A Ready ReadWriteOnce Volume in the same project."""


def finite(value: Any, path: str = "") -> Any:
    """Free-form parameters as JSON can carry them: `.inf` and `.nan` from YAML are refused (JSON has no
    such numbers; they would be written as null and the run would get something else than the file says)."""
    if isinstance(value, float) and (value != value or value in (float("inf"), float("-inf"))):
        raise PydanticCustomError(
            "finite", "{where}must be a finite number (got {value})", {"where": path, "value": value}
        )
    if isinstance(value, dict):
        return {key: finite(item, f"{path}{key}: ") for key, item in value.items()}
    if isinstance(value, list):
        return [finite(item, f"{path}[{index}]: ") for index, item in enumerate(value)]
    return value


class TrainingJobSpec(SpecModel):
    """What to train: runtime, model, data or environment, parameters, resources and the cost cap."""

    runtime: NameRef
    """The TrainingRuntime, [project/]name, e.g. nodus/grpo-lora."""
    task: Task | None = None
    """What the runtime does (SFT, Pretrain, DPO, GRPO, ...); the runtime's default when left out."""
    mode: Mode = "Train"
    """Train, or Evaluate only."""
    model: ModelSource | None = None
    """The base model; the runtime's defaultModel when left out."""
    teacher: ModelSource | None = None
    """The teacher model, for distillation."""
    data: DataSource | None = None
    """A data set, for supervised, preference and pretraining runtimes."""
    environment: EnvironmentTasks | None = None
    """An Environment, for reinforcement learning and evaluation."""
    evaluation: Evaluation | None = None
    """Baseline and final evaluation on the held-out tasks."""
    parameters: dict[str, Any] = Field(default_factory=dict)
    """Runtime parameters (camelCase), merged over the runtime's defaults and checked against its schema."""
    resources: Resources | None = None
    """GPUs and nodes; the first matching runtime preset when left out."""
    distributed: Placement | None = None
    """Placement of a multi-node run (resources.nodes above 1)."""
    recovery: Recovery = Field(default_factory=Recovery)
    """Restarts from the latest checkpoint."""
    export_to: ExportTo | None = None
    """Also copy the result into a Volume."""
    tracking: Tracking | None = None
    """MLflow or W&B."""
    max_cost_usd: USD | None = Field(default=None, alias="maxCostUSD")
    """The cap for the whole run (job, grading, export, retries); reached -> Suspended. Only raised."""
    expected_duration: Duration | None = None
    """Your own duration estimate, used instead of the runtime's measured step times."""
    state: Literal["Running", "Suspended"] = "Running"
    """Suspended pauses the run; Running resumes it from its checkpoint."""
    env: EnvVars = Field(default_factory=dict)
    """Extra environment variables for the trainer (NODUS_*, PET_*, MASTER_*, NODE_RANK, NNODES refused)."""

    @model_validator(mode="after")
    def _inputs(self) -> Self:
        if self.mode == "Evaluate" and self.environment is None and not (self.evaluation and self.evaluation.tasks):
            raise ValueError("mode Evaluate needs an environment or evaluation.tasks")
        if self.task == "Pretrain" and self.data is None:
            raise ValueError("task Pretrain needs data")
        return self

    @field_validator("parameters")
    @classmethod
    def _finite_parameters(cls, value: dict[str, Any]) -> dict[str, Any]:
        finite(value)
        return value


class TrainingJob(Resource):
    """One training or evaluation run on a runtime."""

    API_VERSION = "nodus.dev/v1beta1"
    KIND = "TrainingJob"
    SHORT_NAMES = ("tj", "trainingjob", "trainingjobs")
    UPDATABLE_IN_PLACE = ("maxCostUSD", "state", "expectedDuration", "tracking")
    RAISE_ONLY = ("maxCostUSD",)

    api_version: Literal["nodus.dev/v1beta1"]
    """Always nodus.dev/v1beta1."""
    kind: Literal["TrainingJob"]
    """Always TrainingJob."""
    spec: TrainingJobSpec
    """The desired state."""

    def lint(self) -> Iterator[tuple[Loc, str]]:
        nodes = self.spec.resources.nodes if self.spec.resources else 1
        if self.spec.distributed is not None and nodes < 2:
            yield (("spec", "distributed"), "only applies to multi-node runs (resources.nodes above 1)")


class PresetMatch(SpecModel):
    """Which runs a preset fits: model size, training method and quantisation."""

    max_model_parameters: str | None = None
    """The largest model it fits, as a parameter count such as 600M, 8B or 70B."""
    method: Method | None = None
    """Full, LoRA or QLoRA (read from the run's parameters)."""
    quantization: Literal["None", "8bit", "4bit"] | None = None
    """Weight quantisation the preset assumes."""

    @field_validator("max_model_parameters")
    @classmethod
    def _count(cls, value: str | None) -> str | None:
        if value is not None and not PARAM_COUNT_RE.match(value):
            raise ValueError(f"must be a parameter count such as 600M, 8B or 70B (got {value!r})")
        return value


class Preset(SpecModel):
    """Resources for runs that match; the first matching preset wins."""

    name: DnsLabel
    """The preset's name."""
    match: PresetMatch = Field(default_factory=PresetMatch)
    """Which runs it fits; matches everything when empty."""
    resources: Resources
    """What such a run gets."""
    parameters: dict[str, Any] = Field(default_factory=dict)
    """Parameter defaults for such runs (e.g. a smaller batch on smaller GPUs)."""


class StepTimes(SpecModel):
    """Measured speed, used by the estimator."""

    step_seconds: dict[str, Annotated[float, Field(gt=0)]] = Field(default_factory=dict)
    """Seconds per training step by GPU type (`cpu` for the local CPU executor)."""
    evaluation_task_seconds: dict[str, Annotated[float, Field(gt=0)]] = Field(default_factory=dict)
    """Seconds per evaluation task by GPU type."""
    model_caching_seconds: Annotated[float, Field(ge=0)] = 0
    """Seconds to import the model into a Volume the first time."""
    startup_seconds: Annotated[float, Field(ge=0)] = 0
    """Seconds the trainer process takes to start (import its libraries, load the model) before its first step."""
    measured_on: str | None = None
    """When and where these were measured."""

    @field_validator("step_seconds", "evaluation_task_seconds")
    @classmethod
    def _gpu_keys(cls, value: dict[str, float]) -> dict[str, float]:
        for key in value:
            if key != "cpu":
                check_gpu_type(key)
        return value


class RuntimeOutput(SpecModel):
    """A folder the runtime writes results to."""

    name: DnsLabel
    """The output's name, e.g. outputs."""
    path: str
    """Absolute path inside the runtime, e.g. /nodus/outputs."""

    @field_validator("path")
    @classmethod
    def _absolute(cls, value: str) -> str:
        if not value.startswith("/"):
            raise ValueError(f"must be an absolute path (got {value!r})")
        return value


class TrainingRuntimeSpec(SpecModel):
    """A pinned trainer: image, launcher, parameter schema and defaults, presets and measured step times."""

    image: ImageRef | None = None
    """The trainer image by digest; the local executor runs the entrypoint on the host when left out."""
    command: Annotated[list[str], Field(min_length=1)]
    """What each rank runs, e.g. [python, -m, nodus.runtimes.grpo_lora]."""
    launcher: Launcher = "Plain"
    """How the command starts on each node."""
    tasks: Annotated[list[Task], Field(min_length=1)]
    """What it can train; the first is the default task."""
    modes: Annotated[list[Mode], Field(min_length=1)] = Field(default_factory=lambda: list(TRAIN_ONLY))
    """Train, Evaluate or both."""
    environment_tasks: Literal["AttemptAPI"] | None = None
    """AttemptAPI: the runtime fetches Environment tasks through the attempt API (required for RL)."""
    parameter_schema: dict[str, Any] = Field(default_factory=lambda: {"type": "object"})
    """JSON Schema (2020-12) of `spec.parameters`."""
    defaults: dict[str, Any] = Field(default_factory=dict)
    """Parameter defaults, merged under each run's parameters."""
    presets: list[Preset] = Field(default_factory=list)
    """Resources by model size and method, first match wins."""
    measured: StepTimes = Field(default_factory=StepTimes)
    """Measured seconds per step and per evaluation task."""
    outputs: list[RuntimeOutput] = Field(default_factory=list)
    """Folders the runtime writes results to (needed for exportTo)."""
    default_model: ModelSource | None = None
    """The model a TrainingJob gets when it names none."""
    managed: bool = False
    """True for nodus's own catalog runtimes."""
    env: EnvVars = Field(default_factory=dict)
    """Environment variables for every run."""

    @field_validator("parameter_schema")
    @classmethod
    def _schema_is_valid(cls, value: dict[str, Any]) -> dict[str, Any]:
        import jsonschema  # here, not at the top: it costs a fifth of a second of every CLI start

        try:
            jsonschema.Draft202012Validator.check_schema(value)
        except jsonschema.SchemaError as exc:
            raise PydanticCustomError(
                "json_schema", "is not a valid JSON Schema: {error}", {"error": exc.message}
            ) from None
        return value

    @model_validator(mode="after")
    def _defaults_fit_schema(self) -> Self:
        import jsonschema

        error = jsonschema.exceptions.best_match(
            jsonschema.Draft202012Validator(self.parameter_schema).iter_errors(self.defaults)
        )
        if error is not None:
            where = ".".join(str(p) for p in error.absolute_path) or "defaults"
            raise PydanticCustomError(
                "defaults_schema",
                "defaults do not fit parameterSchema at {where}: {error}",
                {"where": where, "error": error.message},
            )
        return self


class TrainingRuntime(Resource):
    """A trainer image with its contract."""

    API_VERSION = "nodus.dev/v1beta1"
    KIND = "TrainingRuntime"
    SHORT_NAMES = ("trainingruntime", "trainingruntimes", "tr", "runtime", "runtimes")
    UPDATABLE_IN_PLACE = ("presets", "measured")

    api_version: Literal["nodus.dev/v1beta1"]
    """Always nodus.dev/v1beta1."""
    kind: Literal["TrainingRuntime"]
    """Always TrainingRuntime."""
    spec: TrainingRuntimeSpec
    """The desired state."""

    def lint(self) -> Iterator[tuple[Loc, str]]:
        if self.spec.image is not None and not image_is_pinned(self.spec.image):
            yield (("spec", "image"), "not pinned by a sha256 digest: runs would not be reproducible")
