"""Services on a Ray cluster: each InferenceEndpoint's model server is a Ray job that runs on a node until stopped.

Who uses it: `RayExecutor.services` (the `ServiceHost` of `executors/service.py`), for the InferenceEndpoint
controller and `nodus stop/start ep/NAME`. The gateway (a host Service, `kind: Service`) stays on this machine, the
one that holds the project's state store: it is handed to the local service host, as the local executor does.

One model server start is one Ray submission, found again by its id alone (a later `nodus` process, or another
host with the token, sees what an earlier one started):

    nodus-svc_{owner}_{project}_{name}-g{generation}-s{start}

`start` counts the starts of a generation (a stopped service started again is a new submission: Ray ends a stopped
job for good). Its entrypoint is `service_session` on the node (`python -m ...ray.service_main`), which keeps the
server up under the local service supervisor there, listening on the node's address with the endpoint's key
(`upstream_key`), and writes its state to the Ray job's log as status markers (`status_stream.py`), which
`observe_service` reads back. Placement: one CPU, or the Service's resources (GPU type and count, CPU, memory) as
jobs are placed (`placement.py`); a server that fits no node is Pending with reason `Unschedulable` and the offers
tried, submitted at the next launch.
"""

from __future__ import annotations

import re
import shlex
import time
from pathlib import Path
from typing import Final

from nodus.specs.status_names import Phase, Reason

from ...inference.upstream_keys import BEARER, upstream_key
from ..local.job import locked, read_json, write_json
from ..local.services import LocalServices
from ..service import SERVING_KEY_VARIABLE, Service, ServiceObservation
from ..workload import Resources, Workload, WorkloadKey
from . import session_variables, status_stream
from .jobs_client import JobsClient, RayJob, Submission
from .placement import Unschedulable, place
from .submission import job_prefix

SERVICE_MODULE: Final = "nodus.reconciler.executors.ray.service_main"
SERVICE_VARIABLE: Final = "NODUS_SERVICE"
PREFIX: Final = "nodus-svc"
LOCKS_FOLDER: Final = "ray-services"
LOG_LINES: Final = 40
STOP_WAIT_S: Final = 30.0
"""How long a stop waits for Ray to end the server's job (its session stops the server first)."""
STOP_POLL_S: Final = 0.5
HOST_SERVICE: Final = ("nodus", "gateway")
"""(project, name) of the host's own service, the gateway (`controllers/endpoint.py` GATEWAY): kept on this machine."""
_TAIL: Final = re.compile(r"-g(?P<generation>[0-9]+)-s(?P<start>[0-9]+)$")


def service_prefix(owner: str, project: str, name: str) -> str:
    """What every submission id of the service starts with (as a job's, `submission.py`, under `nodus-svc`)."""
    return job_prefix(owner, project, name, prefix=PREFIX)


def start_of(prefix: str, identifier: str) -> tuple[int, int] | None:
    """(generation, start) of one of the service's submission ids; None for any other id."""
    if not identifier.startswith(prefix):
        return None
    found = _TAIL.fullmatch(identifier[len(prefix) :])
    return (int(found["generation"]), int(found["start"])) if found is not None else None


class RayServices:
    """Model servers as Ray jobs through `jobs`; host services (the gateway) on `local`. `state_folder` holds the key
    file the endpoints' keys come from (the project's `.nodus/`); `python`, `node_jobs` and `node_project` as the
    executor's (the node's interpreter, jobs folder and project folder)."""

    def __init__(
        self,
        jobs: JobsClient,
        owner: str,
        local: LocalServices,
        state_folder: Path,
        *,
        python: str,
        node_jobs: str | None = None,
        node_project: str | None = None,
    ) -> None:
        self.jobs = jobs
        self.owner = owner
        self.local = local
        self.state_folder = state_folder
        self.python = python
        self.node_jobs = node_jobs
        self.node_project = node_project
        self.held: dict[tuple[str, str], ServiceObservation] = {}
        """Servers held back here because they fit no node (this process's view; the next launch tries again)."""

    # --- the ServiceHost protocol ----------------------------------------------------------------------------

    def launch_service(self, service: Service) -> None:
        """Submit a start unless this generation has one that is not over (looked up first: Ray answers a reused
        id with HTTP 500); an older generation's start is stopped first."""
        if (service.key.project, service.key.name) == HOST_SERVICE:
            self.local.launch_service(service)
            return
        project, name = service.key.project, service.key.name
        notes = self._notes(project, name)
        with locked(notes.with_suffix(".lock")):
            starts = self._starts(project, name)
            for (generation, _), job in starts:
                if generation < service.generation and not job.ended:
                    self.jobs.stop(job.submission_id)
            ours = [(key, job) for key, job in starts if key[0] == service.generation]
            if ours and not ours[-1][1].ended:
                return
            last = ours[-1][1] if ours else None
            stopped = (read_json(notes) or {}).get("stopped")
            if last is not None and self._final_phase(last) == Phase.FAILED and stopped != last.submission_id:
                return  # it gave up: a new generation, or a stop and start, tries again
            start = ours[-1][0][1] + 1 if ours else 1
            self._submit(service, start)

    def observe_service(self, project: str, name: str) -> ServiceObservation:
        if (project, name) == HOST_SERVICE:
            return self.local.observe_service(project, name)
        starts = self._starts(project, name)
        held = self.held.get((project, name))
        if not starts:
            return held or ServiceObservation(Phase.PENDING, reason=Reason.NOT_READY, message="not started on Ray")
        (generation, start), job = starts[-1]
        stream = status_stream.parse(self.jobs.logs(job.submission_id), complete=job.ended)
        report = stream.final or stream.status or {}
        phase = str(report.get("phase") or Phase.PENDING)
        ready = bool(report.get("ready")) and stream.final is None and not job.ended
        message = report.get("message")
        reason = report.get("reason")
        if job.ended and stream.final is None:
            phase, reason = (Phase.STOPPED, Reason.STOP_REQUESTED) if job.status == "STOPPED" else (Phase.FAILED, None)
            message = f"its Ray job {job.submission_id} ended {job.status}" + (
                f": {job.message}" if job.message else ""
            )
        elif not job.ended and phase == Phase.PENDING and not report:
            message = f"its Ray job {job.submission_id} is {job.status}"
        return ServiceObservation(
            phase=phase,
            ready=ready,
            address=report.get("address"),
            auth=BEARER if report.get("address") else None,
            message=message if isinstance(message, str) else None,
            reason=reason if isinstance(reason, str) else None,
            generation=generation,
            restarts=int(report.get("restarts") or 0),
            started_at=report.get("startedAt"),
            raw={**report, "raySubmissionId": job.submission_id, "start": start},
        )

    def stop_service(self, project: str, name: str) -> None:
        if (project, name) == HOST_SERVICE:
            self.local.stop_service(project, name)
            return
        self.held.pop((project, name), None)
        starts = self._starts(project, name)
        running = [job.submission_id for _, job in starts if not job.ended]
        for identifier in running:
            self.jobs.stop(identifier)  # its session stops the server, then ends (Ray's SIGTERM)
        # Stopped means its process ended, as on one machine: wait for Ray to say so (a stop takes seconds).
        deadline = time.monotonic() + STOP_WAIT_S
        while running and time.monotonic() < deadline:
            running = [one for one in running if not ((job := self.jobs.info(one)) is None or job.ended)]
            if running:
                time.sleep(STOP_POLL_S)
        if starts:  # a start that failed is tried again at the next launch, as after a stop on one machine
            write_json(self._notes(project, name), {"stopped": starts[-1][1].submission_id}, durable=True)

    def service_log(self, project: str, name: str) -> str:
        if (project, name) == HOST_SERVICE:
            return self.local.service_log(project, name)
        starts = self._starts(project, name)
        if not starts:
            return ""
        text = status_stream.parse(self.jobs.logs(starts[-1][1].submission_id)).trainer
        return "\n".join(text.splitlines()[-LOG_LINES:])

    # --- internals ---------------------------------------------------------------------------------------

    def _starts(self, project: str, name: str) -> list[tuple[tuple[int, int], RayJob]]:
        prefix = service_prefix(self.owner, project, name)
        found = []
        for job in self.jobs.list():
            key = start_of(prefix, job.submission_id)
            if key is not None:
                found.append((key, job))
        found.sort(key=lambda pair: pair[0])
        return found

    def _notes(self, project: str, name: str) -> Path:
        """This host's note of the service: the start a stop was asked for last (its lock beside it)."""
        folder = self.state_folder / LOCKS_FOLDER
        folder.mkdir(parents=True, exist_ok=True)
        return folder / f"{project}_{name}.json"

    def _final_phase(self, job: RayJob) -> str | None:
        final = status_stream.parse(self.jobs.logs(job.submission_id), complete=True).final
        return str(final.get("phase")) if final else None

    def _submit(self, service: Service, start: int) -> None:
        project, name = service.key.project, service.key.name
        # Placed as a job of the same resources would be: the GPU type list in order, then CPU and memory.
        probe = Workload(
            key=WorkloadKey(project=project, name=name, kind="Job"),
            command=service.command,
            resources=service.resources or Resources(cpu=1),
        )
        placement = place(probe, self.jobs.nodes())
        if isinstance(placement, Unschedulable):
            message = f"its model server fits no node of the Ray cluster: {placement.message}"
            self.held[(project, name)] = ServiceObservation(
                Phase.PENDING, reason=Reason.UNSCHEDULABLE, message=message, generation=service.generation
            )
            return
        self.held.pop((project, name), None)
        env = {
            SERVICE_VARIABLE: service.to_json(),
            SERVING_KEY_VARIABLE: upstream_key(self.state_folder, project, name),
        }
        if self.node_jobs is not None:
            env[session_variables.JOBS_VARIABLE] = self.node_jobs
        if self.node_project is not None:
            env[session_variables.PROJECT_VARIABLE] = self.node_project
        identifier = f"{service_prefix(self.owner, project, name)}-g{service.generation}-s{start}"
        self.jobs.submit(
            Submission(
                submission_id=identifier,
                entrypoint=f"{shlex.quote(self.python)} -m {SERVICE_MODULE}",
                env_vars=env,
                metadata={"nodus.project": project, "nodus.name": name, "nodus.kind": service.key.kind},
                num_gpus=placement.num_gpus,
                num_cpus=placement.num_cpus,
                memory_bytes=placement.memory_bytes,
                resources=placement.resources,
                label_selector=placement.label_selector,
            )
        )
