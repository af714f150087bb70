"""A service's supervisor: one detached process per service, keeping its command up until asked to stop.

Who runs it: `LocalServices.launch_service` (`services.py`), as `python -m
nodus.reconciler.executors.local.service_supervisor --detach SERVICE_DIR` (the parent prints the supervisor's pid
and exits; the supervisor runs in a session of its own, so it outlives the `nodus` that started it).

What it does: starts the command of `argv.json` in a process group of its own (killed by the kernel if the supervisor
dies), its output in `logs/service.log`, with the command's env over the base environment (`process_env.py`, and the
service's `pass_env`: nothing else of the `nodus` that started it); probes it (`GET <readyPath>` over its Unix socket)
until it answers 200, then writes Running with `ready: true`; while it runs, probes it every few seconds (three failures
in a row: ready false, and the endpoint answers 503 until it recovers). When the process exits it is started again after
a backoff (1, 2, 4 ... 30 s), Pending with reason ServiceExited and its exit status; `maxRestarts` starts in a row that
never became ready make it Failed with the last lines of its log. A start that is not ready within `startTimeoutS`
counts as a failed start. A `stop` file asks it to end: SIGTERM to the group, SIGKILL after 10 s, then Stopped; a
folder that is gone (its project deleted) ends it the same way, writing nothing (a write would make the folder again).

Each time the service becomes ready or stops being ready, it runs the service's report command (`argv.json`'s
`report`, in the background, one at a time, again when a change came while one ran), so the resource's stored status
follows what it serves without a later `nodus` command (`Service.report`).
"""

from __future__ import annotations

import argparse
import contextlib
import http.client
import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path
from typing import Any, Final

from nodus.errors import NodusError
from nodus.specs.status_names import Phase, Reason

from ..process_env import base_environment
from ..service import Service
from .job import log_tail, read_json, try_lock, write_json
from .services import HEARTBEAT_S, ServiceFiles
from .supervisor import _detach, _die_with_parent, _kill_group

TICK_S: Final = 0.25
PROBE_EVERY_S: Final = 3.0
PROBE_FAILURES: Final = 3
STOP_GRACE_S: Final = 10.0
BACKOFF_MAX_S: Final = 30.0


class _UnixConnection(http.client.HTTPConnection):
    """HTTP over a Unix socket (the service listens on nothing else)."""

    def __init__(self, path: Path, timeout: float) -> None:
        super().__init__("localhost", timeout=timeout)
        self.path = path

    def connect(self) -> None:
        self.sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self.sock.settimeout(self.timeout)
        self.sock.connect(str(self.path))


def probe(path: Path, route: str, timeout: float = 2.0, listen: str | None = None) -> bool:
    """Whether the service answers 200 to `GET route`: on its TCP address `listen` (`HOST:PORT`), else on the Unix
    socket `path`."""
    connection: http.client.HTTPConnection
    if listen is not None:
        host, _, port = listen.rpartition(":")
        connection = http.client.HTTPConnection(host, int(port), timeout=timeout)
    elif not path.exists():
        return False
    else:
        connection = _UnixConnection(path, timeout)
    try:
        connection.request("GET", route)
        return connection.getresponse().status == 200
    except OSError:
        return False
    finally:
        connection.close()


class Reporter:
    """Runs the report command in the background: one at a time, once more when asked while one runs (so the last
    change is always reported)."""

    def __init__(self, argv: list[str], env: dict[str, str], files: ServiceFiles) -> None:
        self.argv = argv
        self.env = env
        self.files = files
        self.running: subprocess.Popen[bytes] | None = None
        self.again = False

    def request(self) -> None:
        if not self.argv:
            return
        self.poll()
        if self.running is not None:
            self.again = True
            return
        self._start()

    def poll(self) -> None:
        """Reap a report that ended (no zombie is left behind) and start the one asked for meanwhile."""
        if self.running is None or self.running.poll() is None:
            return
        self.running = None
        if self.again:
            self.again = False
            self._start()

    def _start(self) -> None:
        if not self.files.service.exists():
            return
        with self.files.supervisor_log.open("ab") as log:
            self.running = subprocess.Popen(
                self.argv, stdin=subprocess.DEVNULL, stdout=log, stderr=log, env=self.env, cwd=self.files.dir
            )


class ServiceSupervisor:
    """Keeps one service up: see the module docstring."""

    def __init__(self, files: ServiceFiles) -> None:
        self.files = files
        self.service = Service.model_validate(read_json(files.service) or {})
        command = read_json(files.argv) or {}
        self.argv: list[str] = list(command.get("argv") or [])
        # What its starter gave this process is the base environment and the service's pass_env: the same goes on.
        own = base_environment(extra=self.service.pass_env)
        self.env: dict[str, str] = {**own, **(command.get("env") or {})}
        self.status: dict[str, Any] = files.read_status()
        self._beat = 0.0
        report = self.service.report
        reporting = base_environment(extra=self.service.pass_env + (report.pass_env if report else ()))
        self.reporter = Reporter(list(command.get("report") or []), reporting, files)

    def run(self) -> int:
        failed_starts = 0
        while not self._stopping():
            child = self._start()
            ready = self._watch(child)
            if self._stopping():
                break
            code = child.wait()
            failed_starts = 0 if ready else failed_starts + 1
            restarts = int(self.status.get("restarts") or 0) + 1
            why = f"exited with status {code}" if code >= 0 else f"was killed by signal {-code}"
            if failed_starts > self.service.max_restarts:
                tail = " | ".join(log_tail(self.files.log, lines=5)) or "no output"
                self._write(
                    Phase.FAILED,
                    Reason.SERVICE_EXITED,
                    f"{why} in {failed_starts} starts in a row without becoming ready: {tail}",
                    ready=False,
                    restarts=restarts,
                )
                return 1
            backoff = min(BACKOFF_MAX_S, 2.0 ** max(0, failed_starts - 1))
            self._write(
                Phase.PENDING,
                Reason.SERVICE_EXITED,
                f"{why}; starting again in {backoff:g} s",
                ready=False,
                restarts=restarts,
            )
            deadline = time.monotonic() + backoff
            while time.monotonic() < deadline and not self._stopping():
                self._heartbeat()
                time.sleep(TICK_S)
        self._write(Phase.STOPPED, Reason.STOP_REQUESTED, "stopped", ready=False)
        return 0

    def _gone(self) -> bool:
        """Its folder is gone (the project was deleted): nothing is written, the service is stopped."""
        return not self.files.service.exists()

    def _start(self) -> subprocess.Popen[bytes]:
        self.files.socket.unlink(missing_ok=True)
        self.files.logs.mkdir(parents=True, exist_ok=True)
        with self.files.log.open("ab") as log:
            child = subprocess.Popen(
                self.argv,
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=subprocess.STDOUT,
                env=self.env,
                cwd=self.files.dir,
                start_new_session=True,
                preexec_fn=_die_with_parent,  # only a prctl call before exec
            )
        self._write(Phase.PENDING, Reason.NOT_READY, "starting", ready=False, pid=child.pid, startedAt=time.time())
        return child

    def _watch(self, child: subprocess.Popen[bytes]) -> bool:
        """Follow the child until it exits or a stop is asked (then it is stopped); whether it was ever ready."""
        started, ready, failures, last_probe = time.monotonic(), False, 0, 0.0
        while child.poll() is None:
            if self._stopping():
                self._end(child)
                return ready
            now = time.monotonic()
            if not ready:
                if probe(self.files.socket, self.service.ready_path, listen=self.service.listen):
                    ready, last_probe = True, now
                    self._write(Phase.RUNNING, None, "serving", ready=True, readyAt=time.time())
                elif now - started > self.service.start_timeout_s:
                    self._end(child)
                    return False
            elif now - last_probe >= PROBE_EVERY_S:
                last_probe = now
                if probe(self.files.socket, self.service.ready_path, listen=self.service.listen):
                    if failures >= PROBE_FAILURES:
                        self._write(Phase.RUNNING, None, "serving", ready=True)
                    failures = 0
                else:
                    failures += 1
                    if failures == PROBE_FAILURES:
                        self._write(Phase.RUNNING, Reason.NOT_READY, "not answering its readiness probe", ready=False)
            self._heartbeat()
            time.sleep(TICK_S)
        return ready

    def _end(self, child: subprocess.Popen[bytes]) -> None:
        _kill_group(child.pid, signal.SIGTERM)
        try:
            child.wait(timeout=STOP_GRACE_S)
        except subprocess.TimeoutExpired:
            _kill_group(child.pid, signal.SIGKILL)
            child.wait()

    def _stopping(self) -> bool:
        return self.files.stop_request.exists() or self._gone()

    def _heartbeat(self) -> None:
        self.reporter.poll()
        if time.monotonic() - self._beat >= HEARTBEAT_S:
            self._write_status({})

    def _write(self, phase: str, reason: str | None, message: str, **fields: Any) -> None:
        self._write_status({"phase": phase, "reason": reason, "message": message, **fields})

    def _write_status(self, fields: dict[str, Any]) -> None:
        if self._gone():
            return
        self._beat = time.monotonic()
        before = (self.status.get("phase"), bool(self.status.get("ready")))
        self.status.update(fields, heartbeatAt=time.time())
        if self.status.get("reason") is None:
            self.status.pop("reason", None)
        write_json(self.files.status, self.status)
        if (self.status.get("phase"), bool(self.status.get("ready"))) != before:
            self.reporter.request()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog=__name__, description=(__doc__ or "").split("\n")[0])
    parser.add_argument("service_dir", type=Path)
    parser.add_argument("--detach", action="store_true", help="fork into a session of its own; print its pid")
    args = parser.parse_args(argv)
    files = ServiceFiles(args.service_dir.resolve())
    if not files.service.is_file():
        print(f"error: no service in {files.dir} (service.json is missing)", file=sys.stderr)
        return 2
    if args.detach:
        _detach()
    lock = try_lock(files.supervisor_lock)
    if lock is None:
        print(f"another supervisor keeps {files.dir} up; leaving it alone", file=sys.stderr)
        return 0
    try:
        return ServiceSupervisor(files).run()
    except NodusError as exc:
        print(f"error: {exc.message}", file=sys.stderr)
        return 1
    finally:
        with contextlib.suppress(OSError):
            os.close(lock)


if __name__ == "__main__":
    sys.exit(main())
