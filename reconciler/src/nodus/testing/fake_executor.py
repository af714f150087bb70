"""An Executor that keeps jobs in memory and lets a test drive them: the controllers' unit tests need no process.

Who uses it: tests of the controllers, refresh, export, the CLI and the SDK (anything written against
`nodus.reconciler.executors.Executor`). It keeps the protocol's contracts (idempotent launch by generation and
attempt, ConfigError for a missing job or generation, nothing done to a job that is over) and records every call:

    fake = FakeExecutor()
    fake.launch(workload)                                        # Pending, attempt 1 (the Workload kept as given)
    fake.set_phase("default", "run", "Running", stage="Training", step=3)
    fake.finish("default", "run", outputs={"results.json": b"{}"})   # Succeeded, outputs recorded
    assert fake.calls[0] == ("launch", "default", "run", 1, 1)
    fake.lose("default", "run")                                  # its session is lost: observe(...).lost
    fake.restart("default", "run")                               # attempt 2, Pending (SupervisorLost)
"""

from __future__ import annotations

import hashlib
import io
import time
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from decimal import Decimal
from pathlib import Path
from typing import Any, BinaryIO

from nodus.errors import ConfigError, TemporaryError
from nodus.reconciler.executors import (
    Capabilities,
    Executor,
    Gradings,
    Observation,
    OutputFile,
    OutputManifest,
    Workload,
)
from nodus.specs.status_names import Phase, Reason

ENDED = frozenset({Phase.SUCCEEDED, Phase.FAILED, Phase.CANCELLED})
LIVE = frozenset({"Pending", "Running"})
"""Phases whose job should have a live session: one without is lost."""


@dataclass
class FakeRun:
    """One generation of a job as the fake keeps it."""

    spec: Workload
    """The workload as launched (its attempt and cap kept up to date, as `spec_of` returns it)."""
    status: dict[str, Any]
    log: bytearray = field(default_factory=bytearray)
    events: list[dict[str, Any]] = field(default_factory=list)
    gradings: list[dict[str, Any]] = field(default_factory=list)
    outputs: dict[str, bytes] | None = None
    skipped: tuple[str, ...] = ()
    alive: bool = True


class FakeLog:
    """The fake's trainer log of one generation, read on from where the last read ended."""

    def __init__(self, run: FakeRun) -> None:
        self._run = run
        self.offset = 0

    def read(self) -> bytes:
        chunk = bytes(self._run.log[self.offset :])
        self.offset += len(chunk)
        return chunk

    def ended(self) -> bool:
        return self._run.status.get("phase") in ENDED


class FakeExecutor:
    """Jobs in memory. `calls` lists every act as (method, project, name, ...)."""

    def __init__(self, *, capabilities: Capabilities | None = None) -> None:
        self._capabilities = capabilities or Capabilities()
        self.jobs: dict[tuple[str, str], list[FakeRun]] = {}
        """Every generation of each job, oldest first; the last is the one launched last."""
        self.calls: list[tuple[Any, ...]] = []

    @property
    def capabilities(self) -> Capabilities:
        return self._capabilities

    # --- the protocol: acts ----------------------------------------------------------------------

    def launch(self, spec: Workload) -> None:
        self.calls.append(("launch", spec.project, spec.name, spec.generation, spec.attempt))
        runs = self.jobs.setdefault((spec.project, spec.name), [])
        if runs:
            old = runs[-1].spec
            if (spec.generation, spec.attempt) <= (old.generation, old.attempt):
                return
            if runs[-1].status.get("phase") not in (*ENDED, Phase.SUSPENDED):
                raise TemporaryError(f"job {spec.project}/{spec.name} still runs generation {old.generation}", delay=5)
            if spec.generation == old.generation:
                runs[-1].spec = spec
                runs[-1].status.update(phase=Phase.PENDING, reason=Reason.LAUNCHED, attempt=spec.attempt)
                runs[-1].alive = True
                return
        status = {
            "phase": Phase.PENDING,
            "reason": Reason.LAUNCHED,
            "generation": spec.generation,
            "attempt": spec.attempt,
            "costUSD": "0.000000",
            "maxCostUSD": spec.max_cost_usd,
            "pricePerHourUSD": spec.price_per_hour_usd,
            "heartbeatAt": time.time(),
            "events": [],
        }
        runs.append(FakeRun(spec, status))
        self._event(runs[-1], "Launched", phase=Phase.PENDING)

    def cancel(self, project: str, name: str) -> None:
        self.calls.append(("cancel", project, name))
        run = self._run(project, name)
        if run.status.get("phase") not in ENDED:
            self._set(run, "Cancelled", reason=Reason.CANCEL_REQUESTED, message="cancelled")

    def suspend(self, project: str, name: str) -> None:
        self.calls.append(("suspend", project, name))
        run = self._run(project, name)
        if run.status.get("phase") not in (*ENDED, Phase.SUSPENDED):
            self._set(run, "Suspended", reason=Reason.SUSPEND_REQUESTED, message="suspended (spec.state: Suspended)")

    def resume(self, project: str, name: str, max_cost_usd: str | None = None) -> None:
        self.calls.append(("resume", project, name, max_cost_usd))
        run = self._run(project, name)
        if max_cost_usd is not None:
            old = run.spec.max_cost
            if old is not None and Decimal(max_cost_usd) < old:
                raise ConfigError(
                    f"maxCostUSD can only be raised: job {project}/{name} has ${old}, not ${max_cost_usd}"
                )
            run.spec = run.spec.with_changes(max_cost_usd=max_cost_usd)
            run.status["maxCostUSD"] = max_cost_usd
        phase = run.status.get("phase")
        if phase in ENDED:
            raise ConfigError(f"job {project}/{name} is {phase}; only a Suspended job can be resumed")
        cap, cost = run.spec.max_cost, Decimal(str(run.status.get("costUSD") or "0"))
        if phase == "Suspended":
            if cap is not None and cost >= cap:
                raise ConfigError(
                    f"job {project}/{name} has cost ${cost}, which leaves no room under maxCostUSD ${cap}"
                )
            self._set(run, "Pending", reason=Reason.RESUMED)
            run.alive = True

    def restart(self, project: str, name: str) -> None:
        self.calls.append(("restart", project, name))
        run = self._run(project, name)
        if not self._lost(run):
            return
        run.spec = run.spec.with_changes(attempt=run.spec.attempt + 1)
        run.alive = True
        self._set(run, "Pending", reason=Reason.SUPERVISOR_LOST, message=None, attempt=run.spec.attempt)

    def abandon(self, project: str, name: str, reason: str, message: str) -> None:
        self.calls.append(("abandon", project, name, reason))
        run = self._run(project, name)
        if self._lost(run):
            self._set(run, "Failed", reason=reason, message=message, finishedAt=time.time())

    # --- the protocol: reads ---------------------------------------------------------------------

    def exists(self, project: str, name: str) -> bool:
        return bool(self.jobs.get((project, name)))

    def observe(self, project: str, name: str, generation: int | None = None) -> Observation:
        run = self._run(project, name, generation)
        return Observation.of(run.status, lost=generation is None and self._lost(run))

    def is_alive(self, project: str, name: str) -> bool:
        run = self._run(project, name)
        return run.alive and run.status.get("phase") not in ENDED

    def spec_of(self, project: str, name: str) -> Workload:
        return self._run(project, name).spec

    def logs(self, project: str, name: str, generation: int | None = None) -> FakeLog:
        return FakeLog(self._run(project, name, generation))

    def outputs(self, project: str, name: str, generation: int | None = None) -> OutputManifest | None:
        run = self._run(project, name, generation)
        if run.outputs is None:
            return None
        files = {
            path: OutputFile(path, len(data), hashlib.sha256(data).hexdigest())
            for path, data in sorted(run.outputs.items())
        }
        return OutputManifest(files, run.skipped)

    def open_output(self, project: str, name: str, path: str, generation: int | None = None) -> BinaryIO:
        run = self._run(project, name, generation)
        if run.outputs is None or path not in run.outputs:
            raise ConfigError(f"job {project}/{name} has no output {('outputs/' + path)!r}")
        return io.BytesIO(run.outputs[path])

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
        self.calls.append(("copy_outputs", project, name, tuple(relative for relative, _ in copies)))
        run = self._run(project, name, generation)
        if run.outputs is None:
            raise ConfigError(f"{label} has no outputs yet", hint="outputs are collected when the run succeeds")
        for relative, _ in copies:
            if relative not in run.outputs:
                raise ConfigError(f"{label} has no output {('outputs/' + relative)!r}", hint="nothing was copied")
        for relative, final in copies:
            final.parent.mkdir(parents=True, exist_ok=True)
            final.write_bytes(run.outputs[relative])
        return [final for _, final in copies]

    def earlier_generations(self, project: str, name: str) -> list[int]:
        return [run.spec.generation for run in self.jobs.get((project, name), [])[:-1]]

    def events(self, project: str, name: str, generation: int | None = None) -> Iterator[dict[str, Any]]:
        return iter([dict(event) for event in self._run(project, name, generation).events])

    def gradings(self, project: str, name: str, generation: int | None = None) -> Gradings:
        run = self._run(project, name, generation)
        return Gradings(tuple(run.gradings), f"fake://{project}/{name}/gradings")

    # --- driving a job (tests only) ----------------------------------------------------------------

    def set_phase(self, project: str, name: str, phase: str, **fields: Any) -> None:
        """Move the job launched last to `phase`, with status fields in snake_case or camelCase
        (`stage="Training", step=3, total_steps=10, cost_usd="0.5"`): what its session would report."""
        self._set(self._run(project, name), phase, **fields)

    def finish(
        self,
        project: str,
        name: str,
        phase: str = "Succeeded",
        *,
        outputs: Mapping[str, bytes] | None = None,
        skipped: Sequence[str] = (),
        **fields: Any,
    ) -> None:
        """End the job launched last in `phase`; a Succeeded job records `outputs` (path -> bytes, {} if None)."""
        run = self._run(project, name)
        if phase == "Succeeded":
            run.outputs = dict(outputs or {})
            run.skipped = tuple(skipped)
        reason = fields.pop("reason", "TrainerSucceeded" if phase == "Succeeded" else "TrainerFailed")
        self._set(run, phase, reason=reason, finishedAt=time.time(), **fields)

    def lose(self, project: str, name: str) -> None:
        """The job's session is gone (a killed supervisor): `is_alive` is False, and while the job is Pending or
        Running `observe` says `lost`, until `restart` (or `abandon`)."""
        run = self._run(project, name)
        run.alive = False
        run.status["heartbeatAt"] = time.time() - 3600.0

    def write_log(self, project: str, name: str, text: str) -> None:
        self._run(project, name).log += text.encode()

    def add_grading(self, project: str, name: str, record: Mapping[str, Any]) -> None:
        self._run(project, name).gradings.append(dict(record))

    def add_event(self, project: str, name: str, record: Mapping[str, Any]) -> None:
        self._run(project, name).events.append({"at": time.time(), **record})

    # --- internals ---------------------------------------------------------------------------------

    def _run(self, project: str, name: str, generation: int | None = None) -> FakeRun:
        runs = self.jobs.get((project, name))
        if not runs:
            raise ConfigError(f"there is no job {project}/{name} in the fake executor")
        if generation is None:
            return runs[-1]
        for run in runs:
            if run.spec.generation == generation:
                return run
        known = ", ".join(str(run.spec.generation) for run in runs)
        raise ConfigError(f"job {project}/{name} has no generation {generation} (generations: {known})")

    def _lost(self, run: FakeRun) -> bool:
        return not run.alive and run.status.get("phase") in LIVE

    def _set(self, run: FakeRun, phase: str, **fields: Any) -> None:
        update = {_camel(key): value for key, value in fields.items()}
        run.status.update(phase=phase, heartbeatAt=time.time(), **update)
        self._event(run, str(update.get("reason") or phase), phase=phase)

    def _event(self, run: FakeRun, kind: str, **details: Any) -> None:
        event = {"at": time.time(), "type": kind, **details}
        run.events.append(event)
        run.status["events"] = [*run.status.get("events", []), event][-100:]


def _camel(name: str) -> str:
    if name == "cost_usd":
        return "costUSD"
    head, *rest = name.split("_")
    return head + "".join(part[:1].upper() + part[1:] for part in rest)


def _satisfies_the_protocol(fake: FakeExecutor) -> Executor:
    return fake  # mypy checks here that FakeExecutor implements every method of Executor with its types
