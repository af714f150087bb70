"""A model server's session on the Ray node that runs it: the entrypoint of a service's Ray job.

Who runs it: Ray, for every start `RayServices` submits (`python -m nodus.reconciler.executors.ray.service_main`).
Its stdout is the Ray job's log, which is all the controller's host reads of the service (`status_stream.py`).

What it does, on the node:
1. reads the Service from `NODUS_SERVICE` and the endpoint's key from `NODUS_SERVING_API_KEY`, and drops both from
   its environment;
2. finds the node's address as Ray knows it and a free TCP port there, and turns the service's `--uds {socket}` into
   that address (`Service.on_tcp`), the key in the server's environment: the gateway on the project's host calls it
   there with the key, and nobody without the key gets an answer (`nodus.runtimes.serving` refuses /v1 without it);
3. keeps it up with the local service host over the node's jobs folder (`NODUS_NODE_JOBS`) and project
   (`NODUS_NODE_PROJECT`, for the model and adapters it names): the same supervisor, restarts and readiness probe as
   on one machine;
4. writes a status marker on each change (phase, ready, `address: http://IP:PORT`, restarts, message) and the
   server's log lines as they come;
5. on SIGTERM (Ray's `stop_job`: `nodus stop ep/NAME`, a new generation, a delete) stops the server and writes a
   final Stopped status; a server its supervisor gave up on ends the session with a final Failed status.

Exit status: 0 when stopped, 1 when the server failed, 2 when it could not start (the final marker says why).
"""

from __future__ import annotations

import contextlib
import logging
import os
import signal
import socket
import sys
import threading
from collections.abc import MutableMapping
from pathlib import Path
from typing import Any, Final, TextIO

from nodus.errors import NodusError
from nodus.specs.status_names import Phase, Reason

from ...project import Project
from ..local.services import LocalServices
from ..service import SERVING_KEY_VARIABLE, Service
from . import status_stream
from .services import SERVICE_VARIABLE
from .session_variables import JOBS_VARIABLE, PROJECT_VARIABLE, default_jobs_root

TICK_S: Final = 0.5
SERVICES_FOLDER: Final = ".services"
"""Under the node's jobs folder: the services this node keeps up (`LocalServices`' folders)."""


def node_address() -> str:
    """This node's address as the Ray cluster knows it (what its other nodes reach it on)."""
    import ray

    ray.init(address="auto", log_to_driver=False, logging_level=logging.ERROR)
    try:
        return str(ray.util.get_node_ip_address())  # type: ignore[no-untyped-call]
    finally:
        ray.shutdown()


def free_port(host: str) -> int:
    """A TCP port free on `host` now (the server binds it a moment later; a race lost is a failed start, retried)."""
    with socket.socket(socket.AF_INET6 if ":" in host else socket.AF_INET, socket.SOCK_STREAM) as probe:
        probe.bind((host, 0))
        return int(probe.getsockname()[1])


class ServiceSession:
    """Keeps `service` up on this node through `services` and reports it on `out` until `stopping` is set."""

    def __init__(self, service: Service, services: LocalServices, out: TextIO, stopping: threading.Event) -> None:
        self.service = service
        self.services = services
        self.out = out
        self.stopping = stopping
        self.reported: dict[str, Any] | None = None
        self.log_offset = 0

    def run(self) -> int:
        key = self.service.key
        try:
            self.services.launch_service(self.service)
        except NodusError as exc:
            return self.final(Phase.FAILED, Reason.LAUNCH_FAILED, exc.message, code=2)
        while not self.stopping.wait(TICK_S):
            self.relay_log()
            seen = self.services.observe_service(key.project, key.name)
            self.report(seen.raw)
            if seen.phase == Phase.FAILED:
                return self.final(Phase.FAILED, seen.reason or Reason.NOT_READY, seen.message or "failed", code=1)
        self.services.stop_service(key.project, key.name)
        self.relay_log()
        return self.final(Phase.STOPPED, Reason.STOP_REQUESTED, "stopped", code=0)

    def report(self, raw: Any) -> None:
        status = {k: v for k, v in dict(raw).items() if k != "heartbeatAt"}
        if status != self.reported:
            self.reported = status
            self.write(status_stream.marker("status", status))

    def relay_log(self) -> None:
        log = self.services.files(self.service.key.project, self.service.key.name).log
        with contextlib.suppress(FileNotFoundError), log.open("rb") as handle:
            handle.seek(self.log_offset)
            data = handle.read()
            whole, _, _ = data.rpartition(b"\n")
            if whole:
                self.log_offset += len(whole) + 1
                lines = whole.decode("utf-8", errors="replace").split("\n")
                self.write("".join(status_stream.escape(line) + "\n" for line in lines))

    def final(self, phase: str, reason: str, message: str, *, code: int) -> int:
        status = {**(self.reported or {}), "phase": phase, "reason": reason, "message": message, "ready": False}
        self.write(status_stream.marker("final", status))
        return code

    def write(self, text: str) -> None:
        self.out.write(text)
        self.out.flush()


def main(environ: MutableMapping[str, str] | None = None, out: TextIO | None = None) -> int:
    environ = os.environ if environ is None else environ
    out = sys.stdout if out is None else out
    text = environ.pop(SERVICE_VARIABLE, None)
    key = environ.pop(SERVING_KEY_VARIABLE, None)
    if not text or not key:
        print(
            f"error: {SERVICE_VARIABLE} and {SERVING_KEY_VARIABLE} must be set: this runs as a Ray job", file=sys.stderr
        )
        return 2
    service = Service.from_json(text)
    stopping = threading.Event()
    jobs_root = Path(environ.get(JOBS_VARIABLE) or default_jobs_root())
    failed = {"phase": Phase.FAILED, "reason": Reason.LAUNCH_FAILED, "ready": False}
    try:
        project = Project.find(Path(environ[PROJECT_VARIABLE])) if environ.get(PROJECT_VARIABLE) else None
        host = node_address()
        served = service.on_tcp(host, free_port(host))
    except (NodusError, ValueError, OSError) as exc:
        why = exc.message if isinstance(exc, NodusError) else str(exc)
        out.write(status_stream.marker("final", {**failed, "message": why}))
        return 2
    # After ray.init (node_address), which puts in a SIGTERM handler of its own that exits at once: Ray's stop must
    # stop the server first, or its detached supervisor would keep it up with no Ray job left to say so.
    signal.signal(signal.SIGTERM, lambda signum, frame: stopping.set())
    served = served.model_copy(update={"env": {**served.env, SERVING_KEY_VARIABLE: key}})
    services = LocalServices(jobs_root / SERVICES_FOLDER, jobs_root, project, sys.executable)
    out.write(f"nodus: serving {service.key.kind}/{service.key.name} on {served.listen}\n")
    return ServiceSession(served, services, out, stopping).run()
