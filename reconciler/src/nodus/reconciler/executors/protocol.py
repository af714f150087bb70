"""The Executor protocol: the one seam between the controllers (who decide) and an executor (who acts).

Who uses it: the TrainingJob and Job controllers, `nodus.reconciler.refresh`, the CLI's `nodus logs` and
`nodus cp`, the SDK's run handle (`nodus.recipes.runs`) and host timing (`nodus.reconciler.pricing.host_timing`)
talk to a job only through these methods. Implementations: `LocalExecutor` (`executors/local/executor.py`, processes on
this machine) and `nodus.testing.fake_executor.FakeExecutor` (in memory, driven by a test). Which one a project
uses is `executor:` in its nodus.yaml (`executors/choose.py`).

A job is named by (project, name). Its runs are generations (a replacement of the resource is a new one) and
attempts (restarts of one generation after a lost session). A lost session is reported, never acted on, by the
executor: `observe` says `lost`, and the controller decides from the resource's `spec.recovery.maxAttempts`
whether to `restart` the job or `abandon` it (`controllers/runs.py`). Each method says what it does when there
is no such job, so that a caller never has to look behind the seam:

- reads of a job that does not exist (`observe`, `spec_of`, `logs`, `outputs`, `events`, `gradings`,
  `is_alive`) raise ConfigError naming the job; `exists` is the one that never raises;
- acts on a job that is over (`cancel`, `suspend` of a Succeeded, Failed or Cancelled job) do nothing, and so
  do `restart` and `abandon` of a job that is not lost;
- `launch` of a (generation, attempt) already launched, or an earlier one, starts nothing.

Everything returned is a snapshot: a later call sees what changed since.
"""

from __future__ import annotations

import time
from collections.abc import Collection, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, BinaryIO, Protocol, runtime_checkable

from nodus.errors import TemporaryError
from nodus.specs.status_names import Phase

from .workload import Resources, Workload

ENDED_PHASES = frozenset({Phase.SUCCEEDED, Phase.FAILED, Phase.CANCELLED})
WAIT_PHASES = frozenset({*ENDED_PHASES, Phase.SUSPENDED})
"""What `wait` waits for by default: a phase the job stays in until someone acts."""


@dataclass(frozen=True)
class HostGpus:
    """The GPUs of the one host an executor places work on (the local executor's machine): one type name per
    device (`h100-sxm-80g`, the price table's names), and how they were found (`nvidia-smi`, `nvidia-smi not
    found`, `$NODUS_LOCAL_GPUS`). Admission refuses a GPU request this host cannot meet (`unschedulable`)."""

    devices: tuple[str, ...] = ()
    found_by: str = ""

    def describe(self) -> str:
        """`no GPU (nvidia-smi not found)`, `2 GPUs of rtx4090-24g`, `1 GPU of h200-141g and 1 GPU of l4-24g`."""
        if not self.devices:
            return f"no GPU ({self.found_by})" if self.found_by else "no GPU"
        counts = {kind: self.devices.count(kind) for kind in sorted(set(self.devices))}
        return " and ".join(f"{count} GPU{'s' if count != 1 else ''} of {kind}" for kind, count in counts.items())

    def unschedulable(self, resources: Resources | None) -> str | None:
        """Why `resources` (a workload's) can never run on this host: the GPU types it allows are not here, or not
        as many per node as it asks; None when they are, or when it asks for no GPU."""
        gpu = resources.gpu if resources is not None else None
        if gpu is None or not gpu.types:
            return None
        if any(self.devices.count(kind) >= gpu.count for kind in gpu.types):
            return None
        asked = " or ".join(gpu.types)
        return f"asks for {gpu.count} GPU{'s' if gpu.count != 1 else ''} of {asked}; this host has {self.describe()}"


@dataclass(frozen=True)
class Capabilities:
    """What an executor can run, for a controller to check before it asks (a gang on an executor without
    gangs is refused at admission, not half launched)."""

    gangs: bool = False
    """Several nodes started together (a placement group), all or none."""
    gpu_types: tuple[str, ...] = ()
    """The GPU types it can place a workload on; () for none."""
    services: bool = False
    """Long-running workloads it keeps up (inference endpoints)."""
    host_gpus: HostGpus | None = None
    """The GPUs of the one host it places work on (the local executor), which admission checks a GPU request
    against; None where a cluster places work at launch (Ray: Pending, Unschedulable, until a node fits)."""


@dataclass(frozen=True)
class Observation:
    """A job as its executor sees it now (typed), with `raw`, the executor's whole record, for the fields not
    typed yet (sessions, finishedAt, pricePerHourUSD, ...)."""

    phase: str
    reason: str | None = None
    message: str | None = None
    generation: int | None = None
    attempt: int | None = None
    heartbeat_age_s: float | None = None
    """Seconds since the job's session last said it was alive; None before its first heartbeat."""
    cost_usd: str | None = None
    """What the job has cost so far, in US dollars as a decimal string."""
    max_cost_usd: str | None = None
    stage: str | None = None
    step: int | None = None
    total_steps: int | None = None
    metrics: Mapping[str, Any] = field(default_factory=dict)
    summary: Mapping[str, Any] | None = None
    diagnostics: Any = None
    events: tuple[Mapping[str, Any], ...] = ()
    """The job's recent events, oldest first."""
    raw: Mapping[str, Any] = field(default_factory=dict)
    lost: bool = False
    """The job's session is gone while its phase says it runs (Pending or Running, as last recorded): nothing
    will move it on until the controller calls `restart` or `abandon`. Always False for an earlier generation."""

    @property
    def ended(self) -> bool:
        return self.phase in ENDED_PHASES

    @classmethod
    def of(cls, status: Mapping[str, Any], *, now: float | None = None, lost: bool = False) -> Observation:
        """The observation of a status record as the local session writes it (status.json's camelCase); `lost`:
        the executor found no live session for a job recorded as running."""
        heartbeat = status.get("heartbeatAt")
        age = None
        if isinstance(heartbeat, int | float) and heartbeat > 0:
            age = max(0.0, (time.time() if now is None else now) - float(heartbeat))
        cost = status.get("costUSD")
        cap = status.get("maxCostUSD")
        return cls(
            phase=str(status.get("phase") or "Pending"),
            reason=_text(status.get("reason")),
            message=_text(status.get("message")),
            generation=_whole(status.get("generation")),
            attempt=_whole(status.get("attempt")),
            heartbeat_age_s=age,
            cost_usd=None if cost is None else str(cost),
            max_cost_usd=None if cap is None else str(cap),
            stage=_text(status.get("stage")),
            step=_whole(status.get("step")),
            total_steps=_whole(status.get("totalSteps")),
            metrics=dict(status.get("metrics") or {}),
            summary=status.get("summary") if isinstance(status.get("summary"), Mapping) else None,
            diagnostics=status.get("diagnostics"),
            events=tuple(event for event in status.get("events") or () if isinstance(event, Mapping)),
            raw=dict(status),
            lost=lost,
        )


@dataclass(frozen=True)
class OutputFile:
    """One output as recorded when the job succeeded."""

    path: str
    size: int
    sha256: str

    def to_json(self) -> dict[str, Any]:
        return {"sha256": self.sha256, "size": self.size}


@dataclass(frozen=True)
class OutputManifest:
    """Every output of one generation, recorded when it succeeded: `files` by path (inside outputs/), and
    `skipped`, what was there and is not an output (symbolic links, special files: never followed)."""

    files: Mapping[str, OutputFile]
    skipped: tuple[str, ...] = ()

    def to_json(self) -> dict[str, dict[str, Any]]:
        """`path -> {"sha256", "size"}`, as outputs.json records them."""
        return {path: entry.to_json() for path, entry in self.files.items()}

    @property
    def size(self) -> int:
        return sum(entry.size for entry in self.files.values())


@dataclass(frozen=True)
class Gradings:
    """The gradings records of one generation (every verdict with its phase and evidence), oldest first, and
    where their evidence is kept (shown to a user who wants to look at it)."""

    records: tuple[Mapping[str, Any], ...]
    where: str


@runtime_checkable
class LogReader(Protocol):
    """The trainer log of one generation, read on from where the last read ended (`nodus logs -f`)."""

    def read(self) -> bytes:
        """What was written since the last read (b"" when nothing was, or there is no log yet)."""
        ...

    def ended(self) -> bool:
        """The generation is over: once a read after this returns b"", nothing more will be written."""
        ...


@runtime_checkable
class Executor(Protocol):
    """Runs jobs somewhere and tells what they do. See the module docstring for the rules all methods keep."""

    @property
    def capabilities(self) -> Capabilities:
        """What this executor can run (constant for an executor)."""
        ...

    def launch(self, workload: Workload) -> None:
        """Start `workload` unless its (generation, attempt), or a later one, was launched: idempotent by workload
        key (project, name), generation and attempt, so a repeated or interrupted apply starts nothing twice.
        The executor resolves what the workload names (image, manifests and model by digest, the command) on its
        own host; ConfigError naming the artifact when that host does not have one.
        A later attempt resumes the generation's state; a later generation starts over and keeps the earlier
        one's outputs and logs readable (`generation=` of the reads). TemporaryError while an earlier
        generation still runs (cancel it first)."""
        ...

    def exists(self, project: str, name: str) -> bool:
        """Whether a job of that name was ever launched (and not pruned). Never raises for a missing job."""
        ...

    def observe(self, project: str, name: str, generation: int | None = None) -> Observation:
        """The job's state now: of the generation launched last (None), or how an earlier one ended; `lost` when
        the last one's session is gone while it is recorded Pending or Running. ConfigError when there is no such
        job or generation."""
        ...

    def is_alive(self, project: str, name: str) -> bool:
        """Whether the job's session is running and heartbeating (or just starting). False for a job whose
        session is lost (`observe` says so: `restart` or `abandon` it). ConfigError when there is no such job."""
        ...

    def spec_of(self, project: str, name: str) -> Workload:
        """The workload of the generation launched last as it runs now (a raised cap and the attempt included):
        what `launch` was given, equal to it otherwise. ConfigError when there is no such job."""
        ...

    def cancel(self, project: str, name: str) -> None:
        """Stop the job for good; its outputs and logs so far stay. Nothing for a job that is over;
        ConfigError when there is no such job."""
        ...

    def suspend(self, project: str, name: str) -> None:
        """Stop the job and keep its state, for `resume`. Nothing for a job that is over or suspended;
        ConfigError when there is no such job."""
        ...

    def resume(self, project: str, name: str, max_cost_usd: str | None = None) -> None:
        """Raise the cap (it only goes up) and, if the job is Suspended, go on from its state. A running job only
        takes the new cap. ConfigError for a job that is over, a lower cap, a cap that leaves no room, or no
        such job."""
        ...

    def restart(self, project: str, name: str) -> None:
        """For a job observed `lost`: end what is left of its session and start it again as attempt + 1 of the
        same generation, from the same state (checkpoints, cost so far); the job is Pending with reason
        SupervisorLost. Nothing for a job that is not lost (alive, over or Suspended): a second call, or one
        racing another process, starts nothing twice. ConfigError when there is no such job."""
        ...

    def abandon(self, project: str, name: str, reason: str, message: str) -> None:
        """For a job observed `lost` that is not to be restarted: end what is left of its session and record it
        Failed with `reason` and `message` (the controller's words: SupervisorLost, attempts used). Nothing for a
        job that is not lost. ConfigError when there is no such job."""
        ...

    def logs(self, project: str, name: str, generation: int | None = None) -> LogReader:
        """A reader of the trainer log of a generation (None: the one launched last), from its start.
        ConfigError when there is no such job or generation (naming the generations there are)."""
        ...

    def outputs(self, project: str, name: str, generation: int | None = None) -> OutputManifest | None:
        """The outputs a generation recorded when it succeeded (names, sizes, sha256); None when it has not
        recorded any (it has not succeeded). ConfigError when there is no such job or generation."""
        ...

    def open_output(self, project: str, name: str, path: str, generation: int | None = None) -> BinaryIO:
        """One recorded output, opened for reading (binary). ConfigError when the generation recorded no such
        output, or there is no such job or generation."""
        ...

    def copy_outputs(
        self,
        project: str,
        name: str,
        copies: Sequence[tuple[str, Path]],
        *,
        label: str,
        root: Path | None = None,
        generation: int | None = None,
    ) -> list[Path]:
        """Copy each (output path, final path) on this machine, every copy checked against its recorded sha256
        before any is renamed into place; all or nothing (no partial file, no folder this copy made is left on
        a failure). `root`: the destination given, under which no existing folder may be a link. `label` names
        the job in messages. ConfigError on any failure, when the generation recorded no outputs, or there is
        no such job or generation. The final paths, in order."""
        ...

    def earlier_generations(self, project: str, name: str) -> list[int]:
        """The generations before the one launched last whose outputs and logs are still kept, oldest first;
        [] for a job with none, or no such job."""
        ...

    def events(self, project: str, name: str, generation: int | None = None) -> Iterator[dict[str, Any]]:
        """The job's own events log (launches, trainer starts, stage and step reports), oldest first, read
        when iterated. Empty for a job that has none yet; ConfigError when there is no such job."""
        ...

    def gradings(self, project: str, name: str, generation: int | None = None) -> Gradings:
        """The gradings records of a generation (the last one by default). Empty records for a job that has
        graded nothing; ConfigError when there is no such job or generation."""
        ...


def wait_for(
    executor: Executor,
    project: str,
    name: str,
    *,
    phases: Collection[str] = WAIT_PHASES,
    timeout_s: float = 600.0,
    poll_s: float = 0.05,
) -> Observation:
    """Observe the job until it is in one of `phases`; the observation then. TemporaryError naming the phase it
    is in when that takes longer than `timeout_s`; ConfigError when there is no such job."""
    deadline = time.monotonic() + timeout_s
    while True:
        seen = executor.observe(project, name)
        if seen.phase in phases:
            return seen
        if time.monotonic() >= deadline:
            wanted = "/".join(sorted(phases))
            raise TemporaryError(f"job {project}/{name} is {seen.phase} after {timeout_s:g}s, not {wanted}")
        time.sleep(poll_s)


def _text(value: object) -> str | None:
    return None if value is None or value == "" else str(value)


def _whole(value: object) -> int | None:
    if isinstance(value, bool) or value is None:
        return None
    if isinstance(value, int):
        return value
    if isinstance(value, float) and value.is_integer():
        return int(value)
    return None
