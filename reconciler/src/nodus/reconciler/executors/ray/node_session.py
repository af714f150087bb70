"""A job's session on the Ray node that runs its trainer: the Ray job's entrypoint.

Who runs it: Ray, for every submission `RayExecutor` makes (`python -m nodus.reconciler.executors.ray.node_session`,
with the node's absolute interpreter: an entrypoint inherits the PATH of `ray start`). Its stdout is the Ray job's
log, which is all the controller's host reads of the job (`status_stream.py`).

What it does, on the node:
1. reads the workload from `NODUS_WORKLOAD` (JSON, in the submission's runtime_env) and what to do with it from
   `NODUS_RUN` (`launch`, or `resume` after a suspension), and drops both from its environment (what it
   starts gets the base environment of `process_env.py` and what the workload names, nothing else of this one);
2. hands it to a `LocalExecutor` over the node's jobs folder (`NODUS_NODE_JOBS`, default `~/.nodus/node-jobs`):
   the workload is resolved on this node (`executors/local/resolve.py`) and runs under the same supervisor as a
   local job (attempt API on a Unix socket, grading in the container sandbox with no network, cost and cap), with
   the project at `NODUS_NODE_PROJECT` for the artifacts it names (content store, models, Volumes; unset: the
   workload may name none, as for an executor over a bare jobs folder), or, when the submission names a registry
   (`NODUS_CHANNEL_REGISTRY`, `channel.py`), with the node's own store filled from it first (`NODUS_INPUTS`);
3. follows the job folder until the supervisor has recorded an end and let go of it, writing to stdout the
   trainer's log lines as they come (escaped where they look like markers) and a marker line for each status
   change, event and grading record, then the output manifest (sha256 per file; with a registry, the outputs
   pushed there first and the artifact named in it, or why they could not be) and the final status;
4. on SIGTERM (Ray's `stop_job`), asks the supervisor to suspend, which stops the trainer and keeps the state
   folder on this node, and follows on until it has (Ray SIGKILLs this process after RAY_JOB_STOP_WAIT_TIME_S;
   the supervisor, in a session of its own, finishes the suspension by itself).

Exit status: 0 when the job succeeded, 1 when it ended otherwise (the final marker says how), 2 when its
supervisor was lost with no end recorded (no final marker: the controller sees a lost session and decides on a
restart).
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import sys
import threading
import time
from collections.abc import MutableMapping
from decimal import Decimal
from pathlib import Path
from typing import Any, Final, TextIO

from nodus.errors import NodusError, TemporaryError
from nodus.specs.status_names import Phase, Reason

from ...project import Project
from ..local import LocalExecutor
from ..local.job import TERMINAL, JobFiles, lock_held, read_json
from ..workload import Workload
from . import gang, status_stream
from .channel import INPUTS_VARIABLE, REGISTRY_VARIABLE, RegistryChannel, node_store
from .gang_coordinator import run_gang
from .session_variables import (
    JOBS_VARIABLE,
    LAUNCH,
    MEMBER_VARIABLE,
    PROJECT_VARIABLE,
    RESUME,
    RUN_VARIABLE,
    WORKLOAD_VARIABLE,
    default_jobs_root,
)

MEMBER_START_S: Final = 60.0
"""How long a member's session waits for the session of the epoch before to have let go of its job folder."""
TICK_S: Final = 0.2
UNTRACKED: Final = frozenset({"events", "heartbeatAt"})
"""Status fields a status marker leaves out: the events have markers of their own, and a heartbeat alone is no
change (Ray says whether this process lives)."""
LOST_AFTER_S: Final = 30.0
"""How long a supervisor may be gone, its job recorded as running, before this session gives up on it."""


class NodeSession:
    """One run of a workload on this node, followed onto `out` (the Ray job's log)."""

    def __init__(
        self,
        workload: Workload,
        run: str,
        local: LocalExecutor,
        out: TextIO,
        *,
        channel: RegistryChannel | None = None,
        inputs: str | None = None,
        submission: str = "",
        member: bool = False,
    ) -> None:
        self.workload = workload
        self.run = run
        self.local = local
        self.out = out
        self.channel = channel
        self.inputs = inputs
        self.submission = submission
        self.member = member
        self.files: JobFiles = local.files(workload.project, workload.name)
        self.stopping = threading.Event()
        self._offsets: dict[Path, int] = {}
        self._trainer_tail = b""
        self._last_status: dict[str, Any] | None = None

    def start(self) -> None:
        """Launch the workload here, or resume it from its state on this node (launched afresh where this node
        has none: the resume landed on another node than the suspension)."""
        project, name = self.workload.project, self.workload.name
        if self.channel is not None and self.local.project is not None:
            self.channel.fetch_inputs(self.workload, self.inputs, self.local.project)
        if self.run == RESUME and self.local.exists(project, name):
            phase = self.local.observe(project, name).phase
            if phase == Phase.SUSPENDED:
                self.local.resume(project, name, self.workload.max_cost_usd)
                return
        if not self.member:
            self.local.launch(self.workload)
            return
        # A gang member: every epoch and run is a later attempt than this node holds, so its trainer resumes
        # from the state folder here (from the checkpoint every rank holds: nodus.runtimes.distributed).
        deadline = time.monotonic() + MEMBER_START_S
        while True:
            held = self.local.spec_of(project, name).attempt if self.local.exists(project, name) else 0
            try:
                self.local.launch(self.workload.with_changes(attempt=max(self.workload.attempt, held + 1)))
                return
            except TemporaryError:  # the last epoch's supervisor is still closing down
                if time.monotonic() >= deadline:
                    raise
                time.sleep(1.0)

    def follow(self) -> int:
        """Write the job's reports until its supervisor has recorded an end; the exit status."""
        asked_to_suspend = False
        gone_since: float | None = None
        while True:
            if self.stopping.is_set() and not asked_to_suspend:
                asked_to_suspend = True
                with contextlib.suppress(NodusError):
                    self.local.suspend(self.workload.project, self.workload.name)
            self._copy()
            status = self.files.read_status()
            phase = status.get("phase")
            running = lock_held(self.files.supervisor_lock)
            if (phase in TERMINAL or phase == Phase.SUSPENDED) and not running:
                self._copy(final=True)
                return self._finish(status)
            if not running and not self.local.is_alive(self.workload.project, self.workload.name):
                gone_since = gone_since or time.monotonic()
                if time.monotonic() - gone_since > LOST_AFTER_S or asked_to_suspend:
                    self._copy(final=True)
                    return 2
            else:
                gone_since = None
            time.sleep(TICK_S)

    def fail(self, reason: str, message: str) -> int:
        """The final marker of a run that could not start here (an artifact this node lacks, ...)."""
        self._write(status_stream.marker("final", {"phase": Phase.FAILED, "reason": reason, "message": message}))
        return 1

    # --- what the job folder holds, as markers --------------------------------------------------------------

    def _copy(self, *, final: bool = False) -> None:
        self._copy_trainer_log(final=final)
        for record in self._new_records(self.files.events_log):
            self._write(status_stream.marker("event", record))
        for record in self._new_records(self.files.gradings_log):
            self._write(status_stream.marker("grading", record))
        status = {key: value for key, value in self.files.read_status().items() if key not in UNTRACKED}
        if status and status != self._last_status:
            self._last_status = status
            self._write(status_stream.marker("status", status))

    def _copy_trainer_log(self, *, final: bool) -> None:
        chunk = self._tail(self.files.trainer_log)
        data = self._trainer_tail + chunk
        whole, _, rest = data.rpartition(b"\n")
        self._trainer_tail = rest
        lines = whole.decode("utf-8", errors="replace").split("\n") if b"\n" in data else []
        if final and rest:
            lines.append(rest.decode("utf-8", errors="replace"))  # the trainer's last line had no newline
            self._trainer_tail = b""
        if lines:
            self._write("".join(status_stream.escape(line) + "\n" for line in lines))

    def _new_records(self, path: Path) -> list[dict[str, Any]]:
        data = self._tail(path)
        whole, _, rest = data.rpartition(b"\n")
        self._offsets[path] -= len(rest)  # a line still being written: read again next time
        records = []
        for line in whole.split(b"\n") if whole else ():
            with contextlib.suppress(ValueError):
                record = json.loads(line)
                if isinstance(record, dict):
                    records.append(record)
        return records

    def _tail(self, path: Path) -> bytes:
        offset = self._offsets.get(path, 0)
        try:
            with path.open("rb") as handle:
                handle.seek(offset)
                data = handle.read()
        except FileNotFoundError:
            data = b""
        self._offsets[path] = offset + len(data)
        return data

    def _finish(self, status: dict[str, Any]) -> int:
        if status.get("phase") == Phase.SUCCEEDED:
            recorded = read_json(self.files.outputs_manifest)
            if recorded is not None:
                self._write(status_stream.marker("outputs", self._published(recorded)))
        self._write(status_stream.marker("final", {k: v for k, v in status.items() if k not in UNTRACKED}))
        return 0 if status.get("phase") == Phase.SUCCEEDED else 1

    def _published(self, recorded: dict[str, Any]) -> dict[str, Any]:
        """The output manifest, with the registry artifact the outputs were pushed to (or why they were not: the
        run still succeeded, and its files stay in this node's job folder)."""
        if self.channel is None or self.local.project is None:
            return recorded
        found = recorded.get("files")
        files: dict[str, Any] = found if isinstance(found, dict) else {}
        tag = self.submission or f"{self.workload.project}-{self.workload.name}-g{self.workload.generation}"
        try:
            digest = self.channel.publish_outputs(self.files.outputs, files, tag, self.local.project)
        except NodusError as exc:
            return {**recorded, "artifactError": exc.message}
        return {**recorded, "artifact": {"registry": str(self.channel.ref), "digest": digest}}

    def _write(self, text: str) -> None:
        self.out.write(text)
        self.out.flush()


def main(environ: MutableMapping[str, str] | None = None, out: TextIO | None = None) -> int:
    """Run the session of the workload in `environ` (this process's environment), reporting onto `out`."""
    environ = os.environ if environ is None else environ
    out = out or sys.stdout
    text = environ.pop(WORKLOAD_VARIABLE, None)
    run = environ.pop(RUN_VARIABLE, LAUNCH)
    if text is None:
        print(f"error: {WORKLOAD_VARIABLE} is not set: this runs as a Ray job's entrypoint", file=sys.stderr)
        return 2
    workload = Workload.from_json(text)
    jobs_root = Path(environ.get(JOBS_VARIABLE) or default_jobs_root())
    if gang.is_gang(workload):  # the gang's coordinator: its members run the command (gang_coordinator.py)
        placement = gang.placement_from_json(environ[gang.PLACEMENT_VARIABLE])
        cwd = environ.get(PROJECT_VARIABLE)
        base = Decimal(environ.get(gang.COST_VARIABLE) or "0")
        return run_gang(
            workload, environ[gang.SUBMISSION_VARIABLE], placement, out, cwd, jobs_root, base, run=run, environ=environ
        )
    project = None
    if environ.get(PROJECT_VARIABLE):
        project = Project.find(Path(environ[PROJECT_VARIABLE]))
    try:
        channel = RegistryChannel.from_env(environ)
    except NodusError as exc:  # the controller's host checked it: a submission made by hand, or another version
        failed = {
            "phase": Phase.FAILED,
            "reason": Reason.LAUNCH_FAILED,
            "message": f"{REGISTRY_VARIABLE}: {exc.message}",
        }
        out.write(status_stream.marker("final", failed))
        return 1
    inputs = environ.pop(INPUTS_VARIABLE, None)
    if channel is not None and project is None:
        project = node_store(jobs_root)
    session = NodeSession(
        workload,
        run,
        LocalExecutor(jobs_root, project=project),
        out,
        channel=channel,
        inputs=inputs,
        submission=environ.pop(gang.SUBMISSION_VARIABLE, ""),
        member=environ.pop(MEMBER_VARIABLE, None) is not None,
    )
    signal.signal(signal.SIGTERM, lambda number, frame: session.stopping.set())
    try:
        session.start()
    except TemporaryError as exc:
        print(f"error: {exc.message}", file=sys.stderr)  # no final marker: the controller tries again
        return 2
    except NodusError as exc:
        return session.fail(Reason.LAUNCH_FAILED, exc.message)
    return session.follow()
