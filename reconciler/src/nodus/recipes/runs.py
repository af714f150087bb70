"""The handle of a run a recipe started: its status, its progress, its graded tasks and its outputs.

Who calls it: users, through what `rl.train(...)`, `job.run(...)` and `rl.evaluate(...).run()` return. It reads
what `nodus get`, `nodus logs` and `nodus cp` read: the TrainingJob's record in the project's state store
(refreshed from the executor first) and, through the project's executor (the Executor protocol), the job's
events (the trainer's progress reports), its gradings (every verdict, with its phase) and its outputs (the
sha256 of every output, checked again on download).
"""

from __future__ import annotations

import contextlib
import sys
import time
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any, TextIO

from nodus.errors import ConfigError, NodusError
from nodus.recipes.apply import Options
from nodus.reconciler.controllers.trainingjob import executor
from nodus.reconciler.executors import Executor
from nodus.reconciler.executors.kept import kept
from nodus.reconciler.project import Project
from nodus.reconciler.refresh import refresh_under_lease
from nodus.reconciler.state.records import LeaseHeld, ResourceKey
from nodus.reconciler.views.warnings import unseen
from nodus.reconciler.waiting import blocked_by
from nodus.specs.status_names import GradingPhase, Phase, Reason, Stage

ENDED = (Phase.SUCCEEDED, Phase.FAILED, Phase.CANCELLED, Phase.SUSPENDED)
"""Phases a run stays in until someone acts (a Suspended run resumes when its cap is raised)."""
PHASES = tuple(GradingPhase)
OUTCOMES = {"Correct": "Passed", "Incorrect": "Failed", "InvalidOutput": "Failed", "InfrastructureFailure": "Unscored"}
METRICS = ("reward", "loss", "kl")


def camel(name: str) -> str:
    """`total_steps` -> `totalSteps` (a name already in camelCase is kept)."""
    head, *rest = name.split("_")
    return head + "".join(part[:1].upper() + part[1:] for part in rest)


class Record(dict[str, Any]):
    """A JSON object read with attributes, in camelCase or snake_case: `status.summary.comparison`."""

    def __getattr__(self, name: str) -> Any:
        if name.startswith("__"):
            raise AttributeError(name)
        for key in (name, camel(name)):
            if key in self:
                return wrap(self[key])
        raise AttributeError(f"no field {name!r} here (fields: {', '.join(sorted(self)) or 'none'})")

    def __dir__(self) -> list[str]:
        return sorted({*super().__dir__(), *self})


def wrap(value: Any) -> Any:
    if isinstance(value, dict) and not isinstance(value, Record):
        return Record(value)
    if isinstance(value, list):
        return [wrap(item) for item in value]
    return value


class Outputs:
    """A run's output files, copied out only when they match the sha256 recorded when they were collected
    (the executor's `copy_outputs`, the copies `nodus cp` makes)."""

    def __init__(self, jobs: Executor, project: str, name: str, label: str) -> None:
        self._jobs = jobs
        self._project = project
        self._name = name
        self._label = label

    def _recorded(self) -> dict[str, dict[str, Any]] | None:
        if not self._jobs.exists(self._project, self._name):
            return None
        outputs = self._jobs.outputs(self._project, self._name)
        return None if outputs is None else outputs.to_json()

    def files(self) -> dict[str, Record]:
        """`path -> {sha256, size}` of every output (empty until the run has succeeded)."""
        return {path: Record(entry) for path, entry in (self._recorded() or {}).items()}

    def download(self, directory: str | Path) -> list[Path]:
        """Copy every output under `directory` (keeping its path); each copy is checked against its sha256, and
        nothing is left behind unless all of them check."""
        wanted = self._recorded()
        if wanted is None:
            raise ConfigError(f"{self._label} has no outputs yet", hint="outputs are collected when the run succeeds")
        if not wanted:
            raise ConfigError(f"{self._label} wrote no outputs")
        target = Path(directory)
        copies = [(relative, target / relative) for relative in sorted(wanted)]
        return self._jobs.copy_outputs(self._project, self._name, copies, label=self._label, root=target)


class Run:
    """One TrainingJob a recipe applied, by name, in a project."""

    def __init__(self, name: str, project: str, options: Options | None = None) -> None:
        self.name = name
        self.project = project
        self.options = options or Options()
        self._where = self.options.project()

    def __repr__(self) -> str:
        return f"Run({self.name!r}, project={self.project!r})"

    @property
    def key(self) -> ResourceKey:
        return ResourceKey("TrainingJob", self.project, self.name)

    @property
    def jobs(self) -> Executor:
        """The project's executor (`executor:` in its nodus.yaml), which runs and keeps the job."""
        return executor(self._where)

    @property
    def outputs(self) -> Outputs:
        return Outputs(self.jobs, self.project, self.name, f"TrainingJob/{self.name}")

    # --- status ------------------------------------------------------------------------------------------

    def status(self) -> Record:
        """The TrainingJob's status now (what `nodus get tj NAME -o json` shows under status)."""
        return _status(self._where, self.key)

    def wait(self, timeout: float | None = None, *, poll: float = 1.0) -> Record:
        """Wait until the run has ended (Succeeded, Failed, Cancelled or Suspended); its status then. A generation
        that can never launch by itself (its model not cached, its Environment failed) is a ConfigError at once,
        as `nodus wait` says it: the status is this generation's, never the previous one's."""
        deadline = None if timeout is None else time.monotonic() + timeout
        while True:
            status, blocked = _look(self._where, self.key)
            if status.get("phase") in ENDED:
                return status
            if blocked is not None:
                why = f"{status.get('phase')} ({status.get('reason')})" if status.get("reason") else status.get("phase")
                raise ConfigError(f"TrainingJob/{self.name} will not end: it is {why}: {blocked}")
            if deadline is not None and time.monotonic() > deadline:
                raise TimeoutError(f"TrainingJob/{self.name} is still {status.get('phase')} after {timeout} s")
            time.sleep(poll)

    def watch(self, out: TextIO | None = None, *, poll: float = 1.0) -> Record:
        """Print each stage as it starts, then reward, loss and KL of every step, until the run ends; and a
        `warning:` line when gradings fail or the reward signal is flat (again with the final figures)."""
        stream = out or sys.stdout
        events = _Tail(self.jobs, self.project, self.name)
        shown: dict[str, Any] = {}
        while True:
            status = self.status()
            _show_status(status, shown, stream)
            for record in events.read():
                _show_progress(record, shown, stream)
            if status.get("phase") in ENDED:
                for record in events.read():
                    _show_progress(record, shown, stream)
                _show_end(self.name, status, stream)
                _show_warnings(self.name, status, shown, stream)
                return status
            _show_warnings(self.name, status, shown, stream)
            time.sleep(poll)

    # --- gradings ----------------------------------------------------------------------------------------

    def tasks(self, phase: str | None = None, outcome: str | None = None) -> list[Record]:
        """The graded tasks so far, the last verdict of each task in each phase: taskId, phase, verdict,
        reward and outcome (Passed: Correct; Failed: Incorrect or InvalidOutput; Unscored: InfrastructureFailure)."""
        if phase is not None and phase not in PHASES:
            raise ConfigError(f"phase={phase!r}: a phase is one of {', '.join(PHASES)}")
        if outcome is not None and outcome not in set(OUTCOMES.values()):
            raise ConfigError(f"outcome={outcome!r}: an outcome is Passed, Failed or Unscored")
        last: dict[tuple[str, str], Record] = {}
        for record in self._gradings():
            task, verdict = record.get("taskId"), record.get("verdict")
            if not isinstance(task, str) or verdict not in OUTCOMES:
                continue
            graded = Record(
                taskId=task,
                phase=str(record.get("phase", GradingPhase.TRAINING)),
                verdict=verdict,
                reward=record.get("reward"),
                outcome=OUTCOMES[str(verdict)],
            )
            last.pop((graded.phase, task), None)  # the newest verdict goes to the end of the order
            last[(graded.phase, task)] = graded
        return [
            graded
            for graded in last.values()
            if (phase is None or graded.phase == phase) and (outcome is None or graded.outcome == outcome)
        ]

    def _gradings(self) -> Sequence[Mapping[str, Any]]:
        """Every grading of the run, from its executor; with the executor unreachable, the copy kept on this host
        when the run ended (`executors.kept`: reads need no executor), said in one line on stderr."""
        try:
            jobs = self.jobs
            return jobs.gradings(self.project, self.name).records if jobs.exists(self.project, self.name) else ()
        except NodusError as exc:
            found = kept(self._where.jobs, self.project, self.name)
            if found is None:
                raise
            sys.stderr.write(
                f"note: live state could not be read ({exc.message}); the gradings of generation "
                f"{found.generation} are the ones kept when it ended\n"
            )
            return found.gradings


def _status(project: Project, key: ResourceKey) -> Record:
    return _look(project, key)[0]


def _look(project: Project, key: ResourceKey) -> tuple[Record, str | None]:
    """The record's status after a refresh, and why it can never move on by itself (`waiting.blocked_by`), or None."""
    store = project.open_state()
    try:
        # Under the apply lease, as `nodus wait` refreshes: while an apply holds it, the stored status is read as
        # it is (the apply moves it), never refreshed beside the apply.
        with contextlib.suppress(LeaseHeld):
            refresh_under_lease(project, store, "sdk status")
        record = store.get(key)
        blocked = None if record is None else blocked_by(record, store)
    finally:
        store.close()
    if record is None:
        raise ConfigError(f"{key} is not in the project's state store ({project.root})")
    return Record(record.status), blocked


class _Tail:
    """The job's events reported since the last read (its executor's `events`, read whole each time)."""

    def __init__(self, jobs: Executor, project: str, name: str) -> None:
        self._jobs = jobs
        self._project = project
        self._name = name
        self.seen = 0

    def read(self) -> list[dict[str, Any]]:
        if not self._jobs.exists(self._project, self._name):
            return []
        records = list(self._jobs.events(self._project, self._name))
        if len(records) < self.seen:
            self.seen = 0  # a new generation of the job started the log again
        new = records[self.seen :]
        self.seen = len(records)
        return new


def _show_status(status: Record, shown: dict[str, Any], out: TextIO) -> None:
    """A line when the run's phase (or its reason while it waits) changes, and stages the trainer does not
    report (CachingModel while the model is imported)."""
    phase, reason = status.get("phase"), status.get("reason")
    waiting = reason and phase == Phase.PENDING and reason != Reason.LAUNCHED  # why it waits: ModelNotCached, ...
    text = f"{phase}" + (f" ({reason}: {status.get('message', '')})" if waiting else "")
    if shown.get("phase") != text and phase not in ENDED:
        shown["phase"] = text
        print(text, file=out, flush=True)
    stage = status.get("stage")
    if stage == Stage.CACHING_MODEL and shown.get("stage") != stage:
        shown["stage"] = stage
        print("stage CachingModel", file=out, flush=True)


def _show_progress(record: dict[str, Any], shown: dict[str, Any], out: TextIO) -> None:
    if record.get("type") != "Progress":
        return
    stage = record.get("stage")
    if stage and shown.get("stage") != stage:
        shown["stage"] = stage
        print(f"stage {stage}", file=out, flush=True)
    metrics = record.get("metrics")
    if record.get("step") is None or not isinstance(metrics, dict):
        return
    values = [f"{name} {metrics[name]:.4g}" for name in METRICS if isinstance(metrics.get(name), int | float)]
    if not values:
        return
    total = record.get("totalSteps")
    step = f"{record['step']}/{total}" if total else f"{record['step']}"
    print(f"step {step}: " + ", ".join(values), file=out, flush=True)


def _show_warnings(name: str, status: Record, shown: dict[str, Any], out: TextIO) -> None:
    for text in unseen(status, shown, name):
        print(text, file=out, flush=True)


def _show_end(name: str, status: Record, out: TextIO) -> None:
    line = f"TrainingJob/{name}: {status.get('phase')}"
    if status.get("reason"):
        line += f" ({status['reason']})"
    summary = status.get("summary") or {}
    comparison = summary.get("comparison")
    if isinstance(comparison, dict) and comparison.get("comparable") is False:
        line += f"; no comparison ({comparison.get('reason')}: {comparison.get('message', '')})"
    elif isinstance(comparison, dict) and comparison.get("changePoints") is not None:
        before, after = summary.get("baselinePassRate"), summary.get("finalPassRate")
        rates = f"{before:.0%} -> {after:.0%}, " if isinstance(before, float) and isinstance(after, float) else ""
        line += f"; held-out pass rate {rates}{comparison['changePoints']:+} points"
    print(line, file=out, flush=True)
