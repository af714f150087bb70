"""The job supervisor: one long-lived process per running job, started detached so that it outlives the CLI.

Who uses it: `LocalExecutor` starts it as `python -m nodus.reconciler.executors.local.supervisor --detach JOB_DIR`
(the `--detach` parent prints the supervisor's pid and exits at once; the supervisor runs in its own
session with its output in `logs/supervisor.log`). It

- holds `supervisor.lock` for its whole life (a second supervisor of the same job exits at once, and the
  executor tells a live supervisor from a dead one by that lock and the heartbeat in status.json),
- serves the attempt API on the job's Unix socket (`attempt_api.py`), grading with its own `GradingService`,
- starts the trainer with the runtime contract's variables, in its own process group, output to
  `logs/trainer.log`, and killed by the kernel if the supervisor dies (so no trainer runs unwatched),
- heartbeats into status.json every `heartbeatIntervalS`, and accounts cost every `accountingIntervalS` as
  running time times the host's price; before an interval that would take the cost past `maxCostUSD` it
  stops the trainer (SIGKILL after at most one interval), closes the job's graders and leaves the job
  Suspended (MaxCostReached), so the cost recorded never passes the cap by more than one interval,
- takes requests from the executor as files in the job folder (`cancel`, `suspend`),
- on the trainer's exit records Succeeded (with `outputs.json`: sha256 and size per output file) or Failed
  (TrainerFailed with the log's last lines),
- keeps every verdict in `logs/gradings.jsonl` (with the request's `phase` and a `request` number) and, after
  every grading and at the end, the run's `summary` (baseline and final pass rates, their comparison) and
  `diagnostics` (the training reward signal) in status.json, computed by `summary.py` from those records.
  The trainer never grades itself: summary keys it reports that the platform owns are dropped.

The trainer's environment (the runtime contract, DESIGN.md section 7):

    NODUS_INPUT_PARAMS   folder holding params.json       NODUS_STATE_DIR   resumable state (kept across restarts)
    NODUS_OUTPUT_DIR     results                           NODUS_ATTEMPT_API path of the attempt API's Unix socket
    NODUS_JOB_NAME, NODUS_PROJECT, NODUS_ATTEMPT           which job and which attempt (1, 2, ... after restarts)

A job with an `image` runs its command in that image under podman, with no network and the contract's folders
and socket mounted at `/nodus/...` (`trainer_container.py`); without one, on this host.

With NODUS_RECORD_WIRE=1 in its own environment the supervisor writes every request and response body of the
attempt API to `logs/attempt-wire.jsonl` (tests assert on what crossed the socket).
"""

from __future__ import annotations

import argparse
import contextlib
import ctypes
import dataclasses
import json
import os
import signal
import subprocess
import sys
import threading
import time
import traceback
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from decimal import Decimal
from pathlib import Path
from typing import Any, Final

from nodus.errors import NodusError

from ...grading import GradingService, GradingSettings
from ...session.summary import DEFAULT_MIN_COMPARISON_TASKS, PLATFORM_SUMMARY_KEYS, GradingTally
from . import trainer_container
from .attempt_api import AttemptAPI, AttemptServer
from .job import (
    CANCEL_REQUESTED,
    CANCELLED,
    FAILED,
    MAX_COST_REACHED,
    RUNNING,
    SUCCEEDED,
    SUPERVISOR_ERROR,
    SUPERVISOR_STOPPED,
    SUSPEND_REQUESTED,
    SUSPENDED,
    TERMINAL,
    TRAINER_FAILED,
    TRAINER_SUCCEEDED,
    JobFiles,
    JobSpec,
    append_jsonl,
    grading_from_json,
    json_objects,
    log_tail,
    manifest_of,
    private_socket_dir,
    read_json,
    start_ticks,
    try_lock,
    usd,
    write_json,
)

TICK_S: Final = 0.05
"""How often the supervisor looks at the trainer and the request files."""
LOCK_WAIT_S: Final = 5.0
"""How long a starting supervisor waits for the lock (the executor probes it for a moment now and then)."""
STATUS_EVENTS: Final = 100
"""Events kept in status.json; all of them are in logs/events.jsonl."""
PR_SET_PDEATHSIG: Final = 1


@dataclass(frozen=True)
class Outcome:
    """How a supervised run ended: the phase to record (None: leave it, the run is to be restarted)."""

    phase: str | None
    reason: str
    message: str
    extra: dict[str, Any]


class StatusWriter:
    """status.json, which this process alone writes while it runs; every write replaces the whole file."""

    def __init__(self, files: JobFiles, initial: dict[str, Any]) -> None:
        self.files = files
        self._status = dict(initial)
        self._lock = threading.Lock()

    def get(self, key: str, default: Any = None) -> Any:
        with self._lock:
            return self._status.get(key, default)

    def update(self, *, durable: bool = False, **fields: Any) -> None:
        with self._lock:
            self._status.update(fields)
            write_json(self.files.status, self._status, durable=durable)

    def event(
        self,
        kind: str,
        details: Mapping[str, Any] | None = None,
        *,
        update: Mapping[str, Any] | None = None,
        durable: bool = False,
    ) -> None:
        """An event in status.json (the last ones) and logs/events.jsonl (all), written with the `update`."""
        record = {"at": time.time(), "type": kind, **(details or {})}
        with self._lock:
            self._status.update(update or {})
            self._status["events"] = [*self._status.get("events", []), record][-STATUS_EVENTS:]
            write_json(self.files.status, self._status, durable=durable)
            append_jsonl(self.files.events_log, record)

    def progress(self, report: dict[str, Any]) -> None:
        """A checked report from the trainer: stage, step and totals replace, metrics and summary merge."""
        record = {"at": time.time(), "type": "Progress", **report}
        with self._lock:
            for key in ("stage", "step", "totalSteps", "message"):
                if key in report:
                    self._status[key] = report[key]
            for key in ("metrics", "summary"):
                if key in report:
                    self._status[key] = {**self._status.get(key, {}), **report[key]}
            self._status["events"] = [*self._status.get("events", []), record][-STATUS_EVENTS:]
            write_json(self.files.status, self._status)
            append_jsonl(self.files.events_log, record)

    def platform_summary(self, summary: dict[str, Any], diagnostics: dict[str, Any]) -> None:
        """The platform's summary keys replace their old values; the trainer's other summary keys stay."""
        with self._lock:
            trainer = {k: v for k, v in self._status.get("summary", {}).items() if k not in PLATFORM_SUMMARY_KEYS}
            self._status["summary"] = {**summary, **trainer}
            if diagnostics:
                self._status["diagnostics"] = diagnostics
            write_json(self.files.status, self._status)


class Supervisor:
    """Runs one session of a job: from start (or resume, or restart) to the trainer's end or a stop."""

    def __init__(self, files: JobFiles, spec: JobSpec, settings: GradingSettings, status: dict[str, Any]) -> None:
        self.files = files
        self.spec = spec
        self.settings = settings
        self.status = StatusWriter(files, status)
        self.grading_job = f"{spec.project}/{spec.name}"
        self.base_cost = Decimal(str(status.get("costUSD") or "0"))
        self._stopping = threading.Event()
        self._heartbeat_stop = threading.Event()
        self._heartbeat_thread: threading.Thread | None = None
        self._gradings_lock = threading.Lock()
        self._trainer: subprocess.Popen[bytes] | None = None
        self._trainer_started = 0.0
        self._trainer_ended: float | None = None
        self._grace = spec.stop_grace_s
        self._log_offset = 0
        self._tally = read_tally(files.gradings_log)
        _end_partial_line(files.gradings_log)
        self._requests = self._tally.last_request
        self._min_comparison_tasks = min_comparison_tasks(spec.params)
        self._dropped_summary_keys = False

    # --- the session -------------------------------------------------------------------------------

    def run(self) -> int:
        for sig in (signal.SIGTERM, signal.SIGINT):
            signal.signal(sig, lambda number, frame: self._stopping.set())
        signal.signal(signal.SIGHUP, signal.SIG_IGN)
        now = time.time()
        self.status.event(
            "SupervisorStarted",
            {"pid": os.getpid(), "attempt": self.spec.attempt},
            update={
                "supervisorPid": os.getpid(),
                "supervisorStartTicks": start_ticks(os.getpid()),
                "heartbeatAt": now,
                "attempt": self.spec.attempt,
                "generation": self.spec.generation,
                "attemptApi": str(self.files.socket),
                "maxCostUSD": self.spec.max_cost_usd,
                "costUSD": usd(self.base_cost),
            },
        )
        try:
            with GradingService(self.settings) as grading:
                outcome = self._session(grading)
        except BaseException as exc:  # a bug or a broken host: never leave a trainer or a Running phase behind
            traceback.print_exc(file=sys.stderr)
            self._stop_trainer()
            outcome = Outcome(FAILED, SUPERVISOR_ERROR, f"the supervisor failed: {type(exc).__name__}: {exc}", {})
        self._finish(outcome)
        self._heartbeat_stop.set()
        if self._heartbeat_thread is not None:
            self._heartbeat_thread.join(timeout=5)
        return 1 if outcome.reason == SUPERVISOR_ERROR else 0

    def _session(self, grading: GradingService) -> Outcome:
        early = self._request() or self._cap_outcome(self.base_cost)
        if early is not None:
            return early
        api = AttemptAPI(
            name=self.spec.name,
            environment=self.spec.environment,
            grading=grading,
            grading_job=self.grading_job,
            on_event=self._progress,
            on_verdicts=self._record_verdicts,
            log=lambda line: print(line, file=sys.stderr, flush=True),
        )
        private_socket_dir(self.files.socket)
        wire = self.files.wire_log if os.environ.get("NODUS_RECORD_WIRE") == "1" else None
        server = AttemptServer(self.files.socket, api, access_log=self.files.attempt_log, wire_log=wire)
        try:
            # The trainer first, while this process has one thread (it forks); the socket already listens.
            trainer = self._start_trainer()
            if isinstance(trainer, Outcome):
                return trainer
            self._heartbeat_thread = threading.Thread(target=self._heartbeat, name="heartbeat", daemon=True)
            self._heartbeat_thread.start()
            server.start()
            return self._watch(trainer)
        finally:
            self._stop_trainer()
            server.close()
            self._close_graders(grading)

    def _watch(self, trainer: subprocess.Popen[bytes]) -> Outcome:
        interval = self.spec.accounting_interval_s
        next_account = time.monotonic() + interval
        while True:
            code = trainer.poll()
            if code is not None:
                self._trainer_ended = time.monotonic()
                return self._exit_outcome(code)
            if self._stopping.is_set():
                return Outcome(None, SUPERVISOR_STOPPED, "the supervisor was told to stop; the job will restart", {})
            request = self._request()
            if request is not None:
                return request
            if time.monotonic() >= next_account:
                cost = self._account()
                next_account = max(next_account + interval, time.monotonic())
                capped = self._cap_outcome(cost)
                if capped is not None:
                    # Stopping is billed too: a trainer that ignores SIGTERM gets at most one interval, so the
                    # cost stays within one interval of the cap.
                    self._grace = min(self.spec.stop_grace_s, interval)
                    return capped
            time.sleep(TICK_S)

    # --- the trainer -------------------------------------------------------------------------------

    def _start_trainer(self) -> subprocess.Popen[bytes] | Outcome:
        files, spec = self.files, self.spec
        for folder in (files.state, files.outputs, files.input, files.logs):
            folder.mkdir(parents=True, exist_ok=True)
        contract = {
            "NODUS_INPUT_PARAMS": str(files.input),
            "NODUS_STATE_DIR": str(files.state),
            "NODUS_OUTPUT_DIR": str(files.outputs),
            "NODUS_ATTEMPT_API": str(files.socket),
            "NODUS_JOB_NAME": spec.name,
            "NODUS_PROJECT": spec.project,
            "NODUS_ATTEMPT": str(spec.attempt),
        }
        environment = {**os.environ, **spec.env, **contract}
        argv = list(spec.command)
        if spec.image is not None:
            try:
                argv = trainer_container.run_argv(spec, files, contract)
            except NodusError as exc:
                return Outcome(FAILED, TRAINER_FAILED, f"cannot start the trainer in {spec.image}: {exc}", {})
            trainer_container.remove(files)  # one a lost supervisor left running would hold the name
            environment = dict(os.environ)  # podman's own; the container gets only the job's env and the contract
        with files.trainer_log.open("ab") as log:
            stamp = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
            log.write(f"=== nodus: trainer started {stamp}, attempt {spec.attempt} ===\n".encode())
            log.flush()
            self._log_offset = log.tell()
            try:
                trainer = subprocess.Popen(
                    argv,
                    cwd=files.dir,
                    env=environment,
                    stdin=subprocess.DEVNULL,
                    stdout=log,
                    stderr=subprocess.STDOUT,
                    start_new_session=True,
                    # Safe here: no other thread runs yet, and the child only makes one system call.
                    preexec_fn=_die_with_parent,
                )
            except OSError as exc:
                return Outcome(FAILED, TRAINER_FAILED, f"cannot start the trainer {argv[0]!r}: {exc}", {})
        self._trainer = trainer
        self._trainer_started = time.monotonic()
        now = time.time()
        self.status.event(
            "TrainerStarted",
            {"pid": trainer.pid},
            update={
                "phase": RUNNING,
                "trainerPid": trainer.pid,
                "trainerStartTicks": start_ticks(trainer.pid),
                "startedAt": self.status.get("startedAt") or now,
                "sessionStartedAt": now,
            },
            durable=True,
        )
        return trainer

    def _stop_trainer(self) -> None:
        """SIGTERM to the trainer's process group, SIGKILL after the grace; then whatever is left of the group."""
        trainer = self._trainer
        if trainer is None:
            return
        if self.spec.image is not None and trainer.poll() is None:
            # The container's command gets the SIGTERM and the grace; podman SIGKILLs it after.
            trainer_container.stop(self.files, self._grace)
        if trainer.poll() is None:
            _kill_group(trainer.pid, signal.SIGTERM)
            try:
                trainer.wait(self._grace)
            except subprocess.TimeoutExpired:
                _kill_group(trainer.pid, signal.SIGKILL)
                trainer.wait()
        if self._trainer_ended is None:
            self._trainer_ended = time.monotonic()
        # Children the trainer left behind share its group (it leads it): none may outlive the job.
        _kill_group(trainer.pid, signal.SIGKILL)

    def _exit_outcome(self, code: int) -> Outcome:
        if code == 0:
            manifest = manifest_of(self.files.outputs)
            write_json(self.files.outputs_manifest, manifest, durable=True)
            names = sorted(manifest["files"])
            return Outcome(
                SUCCEEDED, TRAINER_SUCCEEDED, f"the trainer finished; {len(names)} outputs", {"outputs": names}
            )
        tail = log_tail(self.files.trainer_log, offset=self._log_offset)
        if code < 0:
            message = f"the trainer was killed by {signal.Signals(-code).name}"
        else:
            message = f"the trainer exited with status {code}"
        if tail:
            message += f": {tail[-1][:300]}"
        return Outcome(FAILED, TRAINER_FAILED, message, {"exitCode": code, "logTail": tail})

    # --- cost, requests, heartbeat -----------------------------------------------------------------

    def _session_seconds(self) -> float:
        """How long this session's trainer has run (until it ended): what the job is billed for."""
        if self._trainer is None:
            return 0.0
        end = self._trainer_ended if self._trainer_ended is not None else time.monotonic()
        return round(end - self._trainer_started, 3)

    def _session_cost(self) -> Decimal:
        return Decimal(str(self._session_seconds())) * self.spec.price_per_hour / Decimal(3600)

    def _account(self) -> Decimal:
        cost = self.base_cost + self._session_cost()
        self.status.update(costUSD=usd(cost), accountedAt=time.time())
        return cost

    def _cap(self) -> Decimal | None:
        """The cap as spec.json has it now: the executor may raise it while the job runs."""
        with contextlib.suppress(NodusError, OSError):
            cap = self.files.read_spec().max_cost_usd
            if cap != self.spec.max_cost_usd:
                self.spec = dataclasses.replace(self.spec, max_cost_usd=cap)
                self.status.event("MaxCostChanged", {"maxCostUSD": cap}, update={"maxCostUSD": cap})
        return self.spec.max_cost

    def _cap_outcome(self, cost: Decimal) -> Outcome | None:
        """Suspend when one more interval would take the cost past the cap."""
        cap = self._cap()
        if cap is None or cost + self.spec.interval_cost() <= cap:
            return None
        message = f"cost ${usd(cost)} + one interval (${usd(self.spec.interval_cost())}) would pass maxCostUSD ${cap}"
        return Outcome(SUSPENDED, MAX_COST_REACHED, message + "; raise the cap to resume", {})

    def _request(self) -> Outcome | None:
        if self.files.cancel_request.exists():
            return Outcome(CANCELLED, CANCEL_REQUESTED, "cancelled", {})
        if self.files.suspend_request.exists():
            return Outcome(SUSPENDED, SUSPEND_REQUESTED, "suspended (spec.state: Suspended)", {})
        return None

    def _record_verdicts(self, verdicts: list[dict[str, Any]]) -> None:
        """Every verdict with the host's whole evidence, as graded (the trainer gets it without the argv),
        numbered by request (completions of one task in one request are a group), then the summary again."""
        with self._gradings_lock:
            self._requests += 1
            records = [{**verdict, "request": self._requests} for verdict in verdicts]
            with self.files.gradings_log.open("a", encoding="utf-8") as out:
                out.writelines(json.dumps(r, ensure_ascii=False, separators=(",", ":")) + "\n" for r in records)
            for record in records:
                self._tally.add(record)
            self._publish_summary()

    def _publish_summary(self) -> None:
        """status.json's summary and diagnostics from the tally (the caller holds the gradings lock)."""
        if self._tally.records:
            self.status.platform_summary(self._tally.summary(self._min_comparison_tasks), self._tally.diagnostics())

    def _progress(self, report: dict[str, Any]) -> None:
        """A trainer's progress report, less the summary keys the platform owns (said once in the log)."""
        summary = report.get("summary")
        if isinstance(summary, dict) and PLATFORM_SUMMARY_KEYS & summary.keys():
            dropped = sorted(PLATFORM_SUMMARY_KEYS & summary.keys())
            report = {**report, "summary": {k: v for k, v in summary.items() if k not in PLATFORM_SUMMARY_KEYS}}
            if not self._dropped_summary_keys:
                self._dropped_summary_keys = True
                print(
                    f"ignored the trainer's summary keys {dropped} (and any later ones the platform owns): "
                    "nodus computes them from its own gradings",
                    file=sys.stderr,
                    flush=True,
                )
        self.status.progress(report)

    def _heartbeat(self) -> None:
        # Its own thread: stopping a trainer can take the main loop `stopGraceS`, and a supervisor that is
        # busy stopping is not a lost one.
        while not self._heartbeat_stop.wait(self.spec.heartbeat_interval_s):
            with contextlib.suppress(OSError):
                self.status.update(heartbeatAt=time.time())

    def _close_graders(self, grading: GradingService) -> None:
        graders = grading.graders(self.grading_job)
        grading.close(self.grading_job)
        self.status.event("GradersClosed", {"graders": graders})

    def _finish(self, outcome: Outcome) -> None:
        with self._gradings_lock:
            self._publish_summary()  # the last word on the summary is the platform's, whatever came after
        session = self._session_cost()
        cost = self.base_cost + session
        now = time.time()
        started = self.status.get("sessionStartedAt") if self._trainer is not None else None
        record = {
            "attempt": self.spec.attempt,
            "startedAt": started,
            "endedAt": now,
            "seconds": self._session_seconds(),
            "costUSD": usd(session),
            "reason": outcome.reason,
        }
        fields: dict[str, Any] = {
            "costUSD": usd(cost),
            "reason": outcome.reason,
            "message": outcome.message,
            "sessions": [*self.status.get("sessions", []), record],
            "heartbeatAt": now,
            **outcome.extra,
        }
        if outcome.phase is not None:
            fields["phase"] = outcome.phase
        if outcome.phase in TERMINAL:
            fields["finishedAt"] = now
        details = {"message": outcome.message, "costUSD": usd(cost)}
        self.status.event(outcome.reason, details, update=fields, durable=True)


def read_tally(path: Path) -> GradingTally:
    """The tally of a job's whole gradings log (a restarted supervisor goes on from it).

    A line a killed supervisor left half-written is skipped: it was never answered, so no trainer saw it.
    """
    tally = GradingTally()
    with contextlib.suppress(FileNotFoundError), path.open(encoding="utf-8") as log:
        for record in json_objects(log):
            tally.add(record)
    return tally


def _end_partial_line(path: Path) -> None:
    """End a line a killed supervisor left half-written, so the next record starts a line of its own."""
    with contextlib.suppress(FileNotFoundError), path.open("rb+") as log:
        if log.seek(0, os.SEEK_END) == 0:
            return
        log.seek(-1, os.SEEK_END)
        if log.read(1) != b"\n":
            log.write(b"\n")


def min_comparison_tasks(params: Mapping[str, Any]) -> int:
    """`evaluation.minComparisonTasks` of the job's params.json (the seeds' default when it has none)."""
    evaluation = params.get("evaluation")
    value = evaluation.get("minComparisonTasks") if isinstance(evaluation, Mapping) else None
    if isinstance(value, int) and not isinstance(value, bool) and value >= 1:
        return value
    return DEFAULT_MIN_COMPARISON_TASKS


def _kill_group(pgid: int, sig: signal.Signals) -> None:
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(pgid, sig)


def _find_prctl() -> Callable[..., int] | None:
    try:
        prctl: Callable[..., int] = ctypes.CDLL(None, use_errno=True).prctl
    except (OSError, AttributeError):  # not Linux
        return None
    return prctl


_PRCTL = _find_prctl()  # looked up here, so that the forked child does nothing but the call


def _die_with_parent() -> None:
    """In the trainer, before exec: the kernel SIGKILLs it when the supervisor dies (even by SIGKILL)."""
    if _PRCTL is not None:
        _PRCTL(PR_SET_PDEATHSIG, int(signal.SIGKILL), 0, 0, 0)


def _detach() -> None:
    """Fork; the parent prints the child's pid and exits, the child goes on in a session of its own.

    The executor waits for the parent only, so the supervisor is nobody's child that must be waited for,
    and it outlives the process that launched it.
    """
    child = os.fork()
    if child > 0:
        os.write(1, f"{child}\n".encode())
        os._exit(0)
    os.setsid()
    os.dup2(2, 1)  # stdout goes to supervisor.log too, and the executor's pipe sees its end of file


def run(files: JobFiles) -> int:
    """Supervise the job in `files` until its trainer ends or it is stopped; 0 also when there is nothing to do."""
    lock = _wait_for_lock(files)
    if lock is None:
        print(f"another supervisor runs {files.dir}; leaving it alone", file=sys.stderr)
        return 0
    try:
        spec = files.read_spec()
        status = files.read_status()
        phase = status.get("phase")
        if phase in TERMINAL or phase == SUSPENDED:
            print(f"{files.dir} is {phase}; nothing to supervise", file=sys.stderr)
            return 0
        settings = grading_from_json(read_json(files.grading) or {})
        return Supervisor(files, spec, settings, status).run()
    finally:
        os.close(lock)


def _wait_for_lock(files: JobFiles) -> int | None:
    deadline = time.monotonic() + LOCK_WAIT_S
    while True:
        fd = try_lock(files.supervisor_lock)
        if fd is not None or time.monotonic() >= deadline:
            return fd
        time.sleep(0.05)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="nodus.reconciler.executors.local.supervisor", description=__doc__.split("\n")[0]
    )
    parser.add_argument("job_dir", type=Path, help="the job folder (spec.json, status.json, ...)")
    parser.add_argument("--detach", action="store_true", help="fork into a session of its own; print its pid")
    args = parser.parse_args(argv)
    files = JobFiles(args.job_dir.resolve())
    if not files.spec.is_file():
        print(f"error: no job in {files.dir} (spec.json is missing)", file=sys.stderr)
        return 2
    if args.detach:
        _detach()
    try:
        return run(files)
    except NodusError as exc:
        print(f"error: {exc.message}", file=sys.stderr)
        return 1


if __name__ == "__main__":
    sys.exit(main())
