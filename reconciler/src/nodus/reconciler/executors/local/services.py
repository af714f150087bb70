"""Services on this machine: each kept up by a detached supervisor of its own (`service_supervisor.py`).

Who uses it: `LocalExecutor.services` (the `ServiceHost` of `executors/service.py`), for the InferenceEndpoint
controller and `nodus stop/start ep/NAME`. Every call works from the service's folder alone, so a later `nodus`
process sees what an earlier one started:

    services/<project>/<name>/
        service.json      the Service as launched (generation, command, model, adapters)
        argv.json         its command resolved on this host ({socket}, {model}, {adapter:NAME} filled in), and its
                          report command (run by the supervisor when the service becomes ready or stops being so)
        status.json       what its supervisor reports: phase, reason, ready, address, restarts, heartbeatAt
        supervisor.json   the supervisor's pid and start time (signalled only while it is that process)
        stop              a request to stop, taken by the supervisor
        service.sock      where the service listens (a Unix socket: nothing on any network)
        logs/service.log  what its processes printed; logs/supervisor.log the supervisor's own lines

A supervisor whose folder is gone (the project deleted) stops its service and ends: nothing outlives its project.
A service whose supervisor died (its machine rebooted, a kill) is started again by the next launch of the same
generation; `observe_service` says it is Pending with NotReady meanwhile, never Running on a stale status.
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any, Final

from nodus.errors import ConfigError, PermanentError, TemporaryError
from nodus.specs.status_names import Phase, Reason

from ...project import Project
from ..process_env import base_environment
from ..service import (
    ADAPTER_PLACEHOLDER,
    MODEL_PLACEHOLDER,
    SOCKET_PLACEHOLDER,
    Adapter,
    Service,
    ServiceObservation,
)
from .job import (
    MAX_UNIX_SOCKET_PATH,
    locked,
    log_tail,
    private_socket_dir,
    read_json,
    same_process_alive,
    signal_verified,
    start_ticks,
    wait_gone,
    write_json,
)
from .resolve import model_path

SUPERVISOR_MODULE: Final = "nodus.reconciler.executors.local.service_supervisor"
SPAWN_TIMEOUT_S: Final = 30.0
HEARTBEAT_S: Final = 2.0
"""How often a service's supervisor writes its heartbeat (it is alive while one is at most a few of these old)."""
STALE_AFTER_S: Final = 5 * HEARTBEAT_S
STOP_WAIT_S: Final = 30.0
SOCKET_NAME: Final = "service.sock"


class ServiceFiles:
    """The folder of one service (see the module docstring)."""

    def __init__(self, folder: Path) -> None:
        self.dir = folder
        self.service = folder / "service.json"
        self.argv = folder / "argv.json"
        self.status = folder / "status.json"
        self.supervisor = folder / "supervisor.json"
        self.stop_request = folder / "stop"
        self.lock = folder / ".service.lock"
        self.supervisor_lock = folder / ".supervisor.lock"
        self.logs = folder / "logs"
        self.log = self.logs / "service.log"
        self.supervisor_log = self.logs / "supervisor.log"

    @property
    def socket(self) -> Path:
        """In the service's folder, or under a per-user folder in /tmp when that path is longer than a Unix socket
        address can be (as a job's attempt API socket: `JobFiles.socket`)."""
        inside = self.dir / SOCKET_NAME
        if len(os.fsencode(inside)) <= MAX_UNIX_SOCKET_PATH:
            return inside
        key = hashlib.sha256(os.fsencode(self.dir.resolve())).hexdigest()[:24]
        return Path(tempfile.gettempdir()) / f"nodus-{os.getuid()}" / f"service-{key}.sock"

    def read_status(self) -> dict[str, Any]:
        return read_json(self.status) or {}


def address_of(service: Service, files: ServiceFiles) -> str:
    """Where the service listens: `http://HOST:PORT` of its TCP address, else `unix:` its socket."""
    return f"http://{service.listen}" if service.listen else f"unix:{files.socket}"


class LocalServices:
    """Services under `root` (`.nodus/services/`); models, Volumes and job outputs resolved from `project` and the
    local executor's `jobs_root` (a TrainingJob's adapter is in its job folder's outputs)."""

    def __init__(self, root: Path, jobs_root: Path, project: Project | None, python: str = sys.executable) -> None:
        self.root = root
        self.jobs_root = jobs_root
        self.project = project
        self.python = python

    def files(self, project: str, name: str) -> ServiceFiles:
        return ServiceFiles(self.root / project / name)

    # --- the ServiceHost protocol ----------------------------------------------------------------------------

    def launch_service(self, service: Service) -> None:
        files = self.files(service.key.project, service.key.name)
        for folder in (self.root, files.dir.parent, files.dir):  # its owner's only, like the state folder
            folder.mkdir(mode=0o700, parents=True, exist_ok=True)
        with locked(files.lock):
            current = read_json(files.service)
            before = Service.model_validate(current) if current is not None else None
            same = before is not None and before.generation >= service.generation
            same = same and before is not None and before.command == service.command  # a changed command restarts it
            if same and self._alive(files) and not files.stop_request.exists():
                return
            if same and files.read_status().get("phase") == Phase.FAILED:
                return  # it gave up: a new generation (a changed spec) or a stop and start tries again
            if self._alive(files):
                self._stop(files)  # an older generation, or a stop still being carried out
            argv = self._argv(service, files)
            files.stop_request.unlink(missing_ok=True)
            private_socket_dir(files.socket)
            files.socket.unlink(missing_ok=True)
            report = self._python(list(service.report.command)) if service.report is not None else []
            write_json(files.argv, {"argv": argv, "env": dict(service.env), "report": report}, durable=True)
            write_json(files.service, service.model_dump(mode="json", by_alias=True), durable=True)
            restarts = files.read_status().get("restarts", 0) if same else 0
            write_json(
                files.status,
                {
                    "phase": Phase.PENDING,
                    "reason": Reason.NOT_READY,
                    "message": "starting",
                    "generation": service.generation,
                    "ready": False,
                    "address": address_of(service, files),
                    "restarts": restarts,
                },
                durable=True,
            )
            self._spawn(files, service)

    def observe_service(self, project: str, name: str) -> ServiceObservation:
        files = self.files(project, name)
        status = files.read_status()
        if not status:
            return ServiceObservation(Phase.PENDING, reason=Reason.NOT_READY, message="not started on this host")
        phase = str(status.get("phase") or Phase.PENDING)
        ready = bool(status.get("ready"))
        message = status.get("message")
        if phase in (Phase.PENDING, Phase.RUNNING) and not self._alive(files):
            phase, ready, message = Phase.PENDING, False, "its supervisor is gone: the next apply starts it again"
        return ServiceObservation(
            phase=phase,
            ready=ready,
            address=status.get("address"),
            message=message,
            reason=status.get("reason"),
            generation=status.get("generation"),
            restarts=int(status.get("restarts") or 0),
            started_at=status.get("startedAt"),
            raw=status,
        )

    def stop_service(self, project: str, name: str) -> None:
        files = self.files(project, name)
        if not files.service.exists():
            return
        with locked(files.lock):
            self._stop(files)

    def service_log(self, project: str, name: str) -> str:
        return "\n".join(log_tail(self.files(project, name).log, lines=40))

    def exists(self, project: str, name: str) -> bool:
        return self.files(project, name).service.exists()

    # --- internals ---------------------------------------------------------------------------------------

    def _argv(self, service: Service, files: ServiceFiles) -> list[str]:
        """The command with this host's places filled in; ConfigError naming what this host lacks."""
        label = f"{service.key.kind}/{service.key.name}"
        values = {SOCKET_PLACEHOLDER: str(files.socket)}
        if service.model is not None:
            values[MODEL_PLACEHOLDER] = str(model_path(service.model, service.key.project, label, self.project))
        for adapter in service.adapters:
            values[ADAPTER_PLACEHOLDER % adapter.name] = str(self._adapter_path(adapter, service, label))
        argv = []
        for part in service.command:
            for placeholder, value in values.items():
                part = part.replace(placeholder, value)
            argv.append(part)
        return self._python(argv)

    def _python(self, argv: list[str]) -> list[str]:
        """`python` as the first word means the interpreter nodus runs in here."""
        if argv and argv[0] in ("python", "python3"):
            argv[0] = self.python
        return argv

    def _adapter_path(self, adapter: Adapter, service: Service, label: str) -> Path:
        if adapter.job is not None:
            folder = self.jobs_root / adapter.job.project / adapter.job.name / "outputs" / adapter.job.path
            if not (folder / "adapter_config.json").is_file():
                raise ConfigError(
                    f"{label}: adapter {adapter.name}: TrainingJob/{adapter.job.name} has no {adapter.job.path}/ in "
                    "its outputs on this host",
                    hint="serve it once the TrainingJob Succeeded (or export it to a Volume)",
                )
            return folder
        if adapter.volume is None or self.project is None:
            raise ConfigError(f"{label}: adapter {adapter.name}: names no job and no Volume this host has")
        folder = self.project.volume_revision(service.key.project, adapter.volume.name, adapter.volume.revision)
        if not folder.is_dir():
            raise ConfigError(
                f"{label}: adapter {adapter.name}: Volume {adapter.volume.name} has no revision "
                f"{adapter.volume.revision}"
            )
        return folder / adapter.path

    def _alive(self, files: ServiceFiles) -> bool:
        launched = read_json(files.supervisor) or {}
        if not same_process_alive(launched.get("pid"), launched.get("startTicks")):
            return False
        beat = files.read_status().get("heartbeatAt")
        fresh = isinstance(beat, int | float) and time.time() - beat < STALE_AFTER_S
        return fresh or time.time() - float(launched.get("launchedAt") or 0) < STALE_AFTER_S

    def _spawn(self, files: ServiceFiles, service: Service) -> None:
        files.logs.mkdir(parents=True, exist_ok=True)
        launched_at = time.time()
        with files.supervisor_log.open("ab") as log:
            try:
                result = subprocess.run(
                    [self.python, "-m", SUPERVISOR_MODULE, "--detach", str(files.dir)],
                    stdin=subprocess.DEVNULL,
                    stdout=subprocess.PIPE,
                    stderr=log,
                    cwd=files.dir,
                    # The base environment and what the service (and its report command) asks for by name; its
                    # command's env is in argv.json.
                    env=base_environment(extra=service.pass_env + (service.report.pass_env if service.report else ())),
                    timeout=SPAWN_TIMEOUT_S,
                    check=False,
                )
            except subprocess.TimeoutExpired:
                raise TemporaryError(f"the supervisor of service {files.dir.name} took too long to start") from None
        pid = result.stdout.decode().strip()
        if result.returncode != 0 or not pid.isdigit():
            tail = " | ".join(log_tail(files.supervisor_log, lines=3))
            raise PermanentError(f"the supervisor of service {files.dir.name} did not start: {tail}")
        write_json(
            files.supervisor,
            {"pid": int(pid), "startTicks": start_ticks(int(pid)), "launchedAt": launched_at},
            durable=True,
        )

    def _stop(self, files: ServiceFiles) -> None:
        """Ask the supervisor to stop its service and wait for it; a supervisor that does not is ended."""
        files.stop_request.touch()
        launched = read_json(files.supervisor) or {}
        pid, ticks = launched.get("pid"), launched.get("startTicks")
        if not wait_gone(pid, ticks, STOP_WAIT_S):
            signal_verified(pid, ticks, signal.SIGKILL, group=True)
            wait_gone(pid, ticks, 5.0)
        status = files.read_status()
        if status.get("phase") != Phase.STOPPED:
            status.update(phase=Phase.STOPPED, reason=Reason.STOP_REQUESTED, message="stopped", ready=False)
            write_json(files.status, status, durable=True)
        with contextlib.suppress(FileNotFoundError):
            os.unlink(files.socket)
