"""The job supervisor: one long-lived process per running job, started detached so that it outlives the CLI.

Who uses it: `LocalExecutor` starts it as `python -m nodus.reconciler.executors.local.supervisor --detach JOB_DIR`
(the `--detach` parent prints the supervisor's pid and exits at once; the supervisor runs in its own
session with its output in `logs/supervisor.log`). It

- holds `supervisor.lock` for its whole life (a second supervisor of the same job exits at once, and the
  executor tells a live supervisor from a dead one by that lock and the heartbeat in status.json),
- drives the job's `JobSession` (`nodus.reconciler.session`): the attempt API on the job's Unix socket, grading
  with its own `GradingService`, cost and the cap, the verdict tally; `JobFolderSink` is where the session's
  reports land in the job folder (status.json, logs/events.jsonl, logs/gradings.jsonl, logs/attempt.log),
- starts the trainer with the runtime contract's variables, in its own process group, output to
  `logs/trainer.log`, and killed by the kernel if the supervisor dies (so no trainer runs unwatched),
- heartbeats into status.json every `heartbeatIntervalS`, and has the session account cost every
  `accountingIntervalS` (running time times the host's price); before an interval that would take the cost
  past `maxCostUSD` it stops the trainer (SIGKILL after at most one interval), closes the job's graders and
  leaves the job Suspended (MaxCostReached), so the cost recorded never passes the cap by more than one interval,
- takes requests from the executor as files in the job folder (`cancel`, `suspend`, and a cap changed in
  spec.json, which it hands to the session),
- on the trainer's exit records Succeeded (with `outputs.json`: sha256 and size per output file) or Failed
  (TrainerFailed with the log's last lines),
- keeps every verdict in `logs/gradings.jsonl` (with the request's `phase` and a `request` number) and, after
  every grading and at the end, the run's `summary` (baseline and final pass rates, their comparison) and
  `diagnostics` (the training reward signal) in status.json, computed by the session's tally from those
  records (a restarted supervisor hands the session the log so far). The trainer never grades itself: summary
  keys it reports that the platform owns are dropped.

The trainer's environment (the runtime contract, DESIGN.md section 7):

    NODUS_INPUT_PARAMS   folder holding params.json       NODUS_STATE_DIR   resumable state (kept across restarts)
    NODUS_OUTPUT_DIR     results                           NODUS_ATTEMPT_API path of the attempt API's Unix socket
    NODUS_JOB_NAME, NODUS_PROJECT, NODUS_ATTEMPT           which job and which attempt (1, 2, ... after restarts)

with the job's `env`, its Secrets' values, and of this process's own environment only the base one
(`executors/process_env.py`: PATH, locale, HOME, the host's caches and GPU placement, NODUS_PASS_ENV's names).

A job with an `image` runs its command in that image under podman, with no network and the contract's folders
and socket mounted at `/nodus/...` (`trainer_container.py`); without one, on this host.

With NODUS_RECORD_WIRE=1 in its own environment the supervisor writes every request and response body of the
attempt API to `logs/attempt-wire.jsonl` (tests assert on what crossed the socket).
"""

from __future__ import annotations

import argparse
import contextlib
import ctypes
import json
import os
import signal
import subprocess
import sys
import threading
import time
import traceback
from collections.abc import Callable, Mapping, Sequence
from decimal import Decimal
from pathlib import Path
from typing import Any, Final

from nodus.errors import NodusError
from nodus.specs.secret import SecretSpec

from ...grading import GradingSettings
from ...secret_values import value
from ...session.attempt_api import FileTranscript
from ...session.session import JobSession, Outcome, compares, min_comparison_tasks
from ..process_env import base_environment
from . import trainer_container
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

__all__ = ["JobFolderSink", "Outcome", "Supervisor", "earlier_gradings", "main", "min_comparison_tasks", "run"]

TICK_S: Final = 0.05
"""How often the supervisor looks at the trainer and the request files."""
LOCK_WAIT_S: Final = 5.0
"""How long a starting supervisor waits for the lock (the executor probes it for a moment now and then)."""
PR_SET_PDEATHSIG: Final = 1


class JobFolderSink:
    """Where a `JobSession`'s reports land in the job folder: the status document in status.json (whole, by
    rename), events in logs/events.jsonl, verdict records in logs/gradings.jsonl, the attempt API's access
    log in logs/attempt.log and, when the wire is recorded, logs/attempt-wire.jsonl; notes on stderr, which is
    logs/supervisor.log."""

    def __init__(self, files: JobFiles, *, record_wire: bool) -> None:
        self.files = files
        self._transcript = FileTranscript(files.attempt_log, files.wire_log if record_wire else None)

    def write_status(self, status: Mapping[str, Any], *, durable: bool) -> None:
        write_json(self.files.status, status, durable=durable)

    def append_event(self, record: Mapping[str, Any]) -> None:
        append_jsonl(self.files.events_log, record)

    def append_gradings(self, records: Sequence[Mapping[str, Any]]) -> None:
        with self.files.gradings_log.open("a", encoding="utf-8") as out:
            out.writelines(json.dumps(r, ensure_ascii=False, separators=(",", ":")) + "\n" for r in records)

    def attempt_request(self, line: str) -> None:
        self._transcript.attempt_request(line)

    def attempt_wire(self, record: Mapping[str, Any]) -> None:
        self._transcript.attempt_wire(record)

    def note(self, line: str) -> None:
        print(line, file=sys.stderr, flush=True)


class Supervisor:
    """Runs one session of a job: from start (or resume, or restart) to the trainer's end or a stop.

    The process and the folder are this class's (the trainer's Popen, signals, request files, the heartbeat);
    the rest is the `JobSession` it drives (`self.session`).
    """

    def __init__(self, files: JobFiles, spec: JobSpec, settings: GradingSettings, status: dict[str, Any]) -> None:
        self.files = files
        self.spec = spec
        earlier = earlier_gradings(files.gradings_log)
        _end_partial_line(files.gradings_log)
        record_wire = os.environ.get("NODUS_RECORD_WIRE") == "1"
        self.session = JobSession(
            name=spec.name,
            project=spec.project,
            attempt=spec.attempt,
            environment=spec.environment,
            grading=settings,
            price_per_hour=spec.price_per_hour,
            max_cost_usd=spec.max_cost_usd,
            accounting_interval_s=spec.accounting_interval_s,
            socket_path=files.socket,
            sink=JobFolderSink(files, record_wire=record_wire),
            status=status,
            earlier_gradings=earlier,
            min_comparison_tasks=min_comparison_tasks(spec.params),
            compared=compares(spec.params),
            record_wire=record_wire,
        )
        self.status = self.session.status
        self._stopping = threading.Event()
        self._heartbeat_stop = threading.Event()
        self._heartbeat_thread: threading.Thread | None = None
        self._trainer: subprocess.Popen[bytes] | None = None
        self._grace = spec.stop_grace_s
        self._log_offset = 0

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
                "costUSD": usd(self.session.cost.base),
            },
        )
        try:
            with self.session:
                outcome = self._session()
        except BaseException as exc:  # a bug or a broken host: never leave a trainer or a Running phase behind
            traceback.print_exc(file=sys.stderr)
            self._stop_trainer()
            outcome = Outcome(FAILED, SUPERVISOR_ERROR, f"the supervisor failed: {type(exc).__name__}: {exc}", {})
        self._finish(outcome)
        self._heartbeat_stop.set()
        if self._heartbeat_thread is not None:
            self._heartbeat_thread.join(timeout=5)
        return 1 if outcome.reason == SUPERVISOR_ERROR else 0

    def _session(self) -> Outcome:
        early = self._request() or self._cap_outcome(self.session.cost.base)
        if early is not None:
            return early
        private_socket_dir(self.files.socket)
        self.session.listen()
        try:
            # The trainer first, while this process has one thread (it forks); the socket already listens.
            trainer = self._start_trainer()
            if isinstance(trainer, Outcome):
                return trainer
            self._heartbeat_thread = threading.Thread(target=self._heartbeat, name="heartbeat", daemon=True)
            self._heartbeat_thread.start()
            self.session.serve()
            return self._watch(trainer)
        finally:
            self._stop_trainer()  # then leaving the session's block closes the API and the graders

    def _watch(self, trainer: subprocess.Popen[bytes]) -> Outcome:
        interval = self.spec.accounting_interval_s
        next_account = time.monotonic() + interval
        while True:
            code = trainer.poll()
            if code is not None:
                self.session.trainer_ended()
                return self._exit_outcome(code)
            if self._stopping.is_set():
                return Outcome(None, SUPERVISOR_STOPPED, "the supervisor was told to stop; the job will restart", {})
            request = self._request()
            if request is not None:
                return request
            if time.monotonic() >= next_account:
                cost = self.session.account()
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
        try:
            secrets = secret_environment(spec)
        except NodusError as exc:
            return Outcome(FAILED, TRAINER_FAILED, f"cannot start the trainer: {exc.message}", {})
        try:
            # This process's environment is the base one plus what the Secrets are read from: only the base goes on.
            base = base_environment()
        except NodusError as exc:
            return Outcome(FAILED, TRAINER_FAILED, f"cannot start the trainer: {exc.message}", {})
        environment = {**base, **spec.env, **secrets, **contract}
        argv = list(spec.command)
        if spec.image is not None:
            try:
                argv = trainer_container.run_argv(spec, files, contract)
            except NodusError as exc:
                return Outcome(FAILED, TRAINER_FAILED, f"cannot start the trainer in {spec.image}: {exc}", {})
            trainer_container.remove(files)  # one a lost supervisor left running would hold the name
            environment = base  # podman's own; the container gets only the job's env and the contract
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
        self.session.trainer_started()
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
        self.session.trainer_ended()  # billed until now, if it had not ended before
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

    # --- requests, the cap, heartbeat ---------------------------------------------------------------

    def _cap_outcome(self, cost: Decimal) -> Outcome | None:
        """Suspend when one more interval would take the cost past the cap as spec.json has it now (the
        executor may raise it while the job runs)."""
        with contextlib.suppress(NodusError, OSError):
            self.session.change_cap(self.files.read_spec().max_cost_usd)
        message = self.session.over_cap(cost)
        return None if message is None else Outcome(SUSPENDED, MAX_COST_REACHED, message, {})

    def _request(self) -> Outcome | None:
        if self.files.cancel_request.exists():
            return Outcome(CANCELLED, CANCEL_REQUESTED, "cancelled", {})
        if self.files.suspend_request.exists():
            return Outcome(SUSPENDED, SUSPEND_REQUESTED, "suspended (spec.state: Suspended)", {})
        return None

    def _heartbeat(self) -> None:
        # Its own thread: stopping a trainer can take the main loop `stopGraceS`, and a supervisor that is
        # busy stopping is not a lost one.
        while not self._heartbeat_stop.wait(self.spec.heartbeat_interval_s):
            with contextlib.suppress(OSError):
                self.status.update(heartbeatAt=time.time())

    def _finish(self, outcome: Outcome) -> None:
        self.session.finish(outcome, final=outcome.phase in TERMINAL)


def secret_environment(spec: JobSpec) -> dict[str, str]:
    """The values of the job's Secret references, read now from where each Secret says (this process's environment,
    which the `nodus` that launched it gave exactly these variables of its own, or a dotenv file): handed to the
    trainer, written nowhere."""
    found = {}
    for ref in spec.secrets:
        where = f"{spec.kind}/{spec.name}: {ref.get('field')}"
        source = SecretSpec.model_validate(ref.get("source") or {})
        found[str(ref["env"])] = value(source, str(ref["secret"]), str(ref["key"]), base=Path.cwd(), where=where)
    return found


def earlier_gradings(path: Path) -> list[dict[str, Any]]:
    """Every whole verdict record of a job's gradings log (a restarted supervisor's session goes on from them).

    A line a killed supervisor left half-written is skipped: it was never answered, so no trainer saw it.
    """
    with contextlib.suppress(FileNotFoundError), path.open(encoding="utf-8") as log:
        return list(json_objects(log))
    return []


def _end_partial_line(path: Path) -> None:
    """End a line a killed supervisor left half-written, so the next record starts a line of its own."""
    with contextlib.suppress(FileNotFoundError), path.open("rb+") as log:
        if log.seek(0, os.SEEK_END) == 0:
            return
        log.seek(-1, os.SEEK_END)
        if log.read(1) != b"\n":
            log.write(b"\n")


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
