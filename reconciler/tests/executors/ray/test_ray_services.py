"""Model servers as Ray jobs (executors/ray/services.py) against conftest's in-memory cluster: one submission per
start, looked up before submitting; their state read back from the session's markers; stop, start, a new generation,
a start that failed; placement by the service's resources; and the node's session (service_session.py) over a
service host of its own."""

from __future__ import annotations

import io
import sys
import threading
from pathlib import Path
from typing import Any

import pytest

from nodus.reconciler.executors import GpuResources, Resources
from nodus.reconciler.executors.ray import RayExecutor
from nodus.reconciler.executors.ray.service_session import ServiceSession
from nodus.reconciler.executors.ray.services import SERVICE_VARIABLE
from nodus.reconciler.executors.ray.status_stream import marker, parse, read_marker
from nodus.reconciler.executors.service import SERVING_KEY_VARIABLE, Service, ServiceKey, ServiceObservation
from nodus.reconciler.inference.upstream_keys import upstream_key
from nodus.specs.status_names import Phase, Reason

FIRST = "nodus-svc_0a1b2c3d_proj_chat-g1-s1"
RUNNING = {"phase": "Running", "ready": True, "address": "http://10.0.0.7:41234", "restarts": 0, "generation": 1}


def service(generation: int = 1, resources: Resources | None = None) -> Service:
    command = ("python", "-m", "nodus.runtimes.serving", "--model", "{model}", "--name", "chat", "--uds", "{socket}")
    return Service(
        key=ServiceKey(project="proj", name="chat"), generation=generation, command=command, resources=resources
    )


def test_a_start_is_one_submission_found_again_by_its_id(ray_executor: RayExecutor, fake_jobs, tmp_path: Path) -> None:
    assert ray_executor.capabilities.services
    services = ray_executor.services
    services.launch_service(service())
    services.launch_service(service())  # Ray has it: looked up, not submitted again (Ray would answer HTTP 500)
    (submission,) = fake_jobs.submissions
    assert submission.submission_id == FIRST
    assert submission.entrypoint == "/opt/node/bin/python -m nodus.reconciler.executors.ray.service_main"
    assert Service.from_json(submission.env_vars[SERVICE_VARIABLE]) == service()
    # The server's key, from the project's state folder: the gateway there derives the same one.
    assert submission.env_vars[SERVING_KEY_VARIABLE] == upstream_key(tmp_path, "proj", "chat")
    assert (tmp_path / "upstream.key").stat().st_mode & 0o777 == 0o600
    assert submission.num_cpus == 1
    assert services.local.python == sys.executable  # the gateway stays here, under this machine's interpreter
    seen = services.observe_service("proj", "chat")
    assert (seen.phase, seen.ready, seen.address) == (Phase.PENDING, False, None)
    assert seen.message == f"its Ray job {FIRST} is PENDING"


def test_its_state_is_read_from_the_sessions_markers(ray_executor: RayExecutor, fake_jobs) -> None:
    services = ray_executor.services
    services.launch_service(service())
    fake_jobs.set_status(FIRST, "RUNNING")
    fake_jobs.write_log(FIRST, "nodus: serving InferenceEndpoint/chat on 10.0.0.7:41234\n" + marker("status", RUNNING))
    seen = services.observe_service("proj", "chat")
    assert (seen.phase, seen.ready, seen.address, seen.auth) == ("Running", True, "http://10.0.0.7:41234", "Bearer")
    assert "serving InferenceEndpoint/chat" in services.service_log("proj", "chat")
    # Ray ended it with no final marker (its session was killed): Failed, saying so.
    fake_jobs.set_status(FIRST, "FAILED", "the node died")
    seen = services.observe_service("proj", "chat")
    assert (seen.phase, seen.ready) == (Phase.FAILED, False)
    assert seen.message == f"its Ray job {FIRST} ended FAILED: the node died"


def test_stop_then_start_is_a_new_start_and_a_new_generation_replaces_the_old(
    ray_executor: RayExecutor, fake_jobs
) -> None:
    services = ray_executor.services
    services.launch_service(service())
    fake_jobs.set_status(FIRST, "RUNNING")
    services.stop_service("proj", "chat")
    assert fake_jobs.stopped == [FIRST]
    assert services.observe_service("proj", "chat").phase == Phase.STOPPED
    services.launch_service(service())
    assert [s.submission_id for s in fake_jobs.submissions] == [FIRST, "nodus-svc_0a1b2c3d_proj_chat-g1-s2"]
    services.launch_service(service(generation=2))
    assert fake_jobs.stopped == [FIRST, "nodus-svc_0a1b2c3d_proj_chat-g1-s2"]
    assert fake_jobs.submissions[-1].submission_id == "nodus-svc_0a1b2c3d_proj_chat-g2-s1"


def test_a_server_that_failed_is_tried_again_only_after_a_stop(ray_executor: RayExecutor, fake_jobs) -> None:
    services = ray_executor.services
    services.launch_service(service())
    failed = {**RUNNING, "phase": "Failed", "ready": False, "message": "exited 5 times without answering"}
    fake_jobs.write_log(FIRST, marker("final", failed))
    fake_jobs.set_status(FIRST, "FAILED")
    services.launch_service(service())
    assert len(fake_jobs.submissions) == 1  # it gave up: the next pass must not start it again and again
    seen = services.observe_service("proj", "chat")
    assert (seen.phase, seen.message) == (Phase.FAILED, "exited 5 times without answering")
    services.stop_service("proj", "chat")  # `nodus stop` then `nodus start`
    services.launch_service(service())
    assert fake_jobs.submissions[-1].submission_id == "nodus-svc_0a1b2c3d_proj_chat-g1-s2"


def test_a_server_placed_by_its_resources_or_held_unschedulable(ray_executor: RayExecutor, fake_jobs) -> None:
    services = ray_executor.services
    services.launch_service(service(resources=Resources(gpu=GpuResources(types=("h100-sxm-80g",), count=1))))
    assert fake_jobs.submissions == []
    seen = services.observe_service("proj", "chat")
    assert (seen.phase, seen.reason) == (Phase.PENDING, Reason.UNSCHEDULABLE)
    assert seen.message is not None and seen.message.startswith("its model server fits no node of the Ray cluster: ")
    assert "h100-sxm-80g x1" in seen.message


# --- the session on the node ----------------------------------------------------------------------------------


class NodeServices:
    """The node's service host, scripted: what observe_service answers, turn by turn."""

    def __init__(self, folder: Path, answers: list[ServiceObservation], stopping: threading.Event) -> None:
        self.folder = folder
        self.answers = answers
        self.stopping = stopping
        self.launched: list[Service] = []
        self.stopped = 0

    def launch_service(self, service: Service) -> None:
        self.launched.append(service)

    def observe_service(self, project: str, name: str) -> ServiceObservation:
        if len(self.answers) == 1:
            self.stopping.set()  # the last answer: then Ray's SIGTERM
        return self.answers.pop(0) if len(self.answers) > 1 else self.answers[0]

    def stop_service(self, project: str, name: str) -> None:
        self.stopped += 1

    def files(self, project: str, name: str) -> Any:
        class Files:
            log = self.folder / "service.log"

        return Files()


def test_the_node_session_reports_each_change_and_stops_on_sigterm(tmp_path: Path) -> None:
    stopping = threading.Event()
    (tmp_path / "service.log").write_text("loading the model\nready\n")
    starting = ServiceObservation(Phase.PENDING, raw={"phase": "Pending", "ready": False, "heartbeatAt": 1.0})
    running = ServiceObservation(Phase.RUNNING, ready=True, raw={**RUNNING, "heartbeatAt": 2.0})
    beat = ServiceObservation(Phase.RUNNING, ready=True, raw={**RUNNING, "heartbeatAt": 3.0})
    node = NodeServices(tmp_path, [starting, running, beat], stopping)
    out = io.StringIO()
    tcp = service().on_tcp("10.0.0.7", 41234)
    assert tcp.listen == "10.0.0.7:41234" and tcp.command[-4:] == ("--host", "10.0.0.7", "--port", "41234")
    code = ServiceSession(tcp, node, out, stopping).run()  # type: ignore[arg-type]
    assert code == 0 and node.launched == [tcp] and node.stopped == 1
    stream = parse(out.getvalue(), complete=True)
    assert stream.trainer.splitlines() == ["loading the model", "ready"]
    reports = [
        found[1] for line in out.getvalue().splitlines() if (found := read_marker(line)) and found[0] == "status"
    ]
    assert reports == [{"phase": "Pending", "ready": False}, RUNNING]  # a heartbeat alone is no change
    assert stream.final is not None and (stream.final["phase"], stream.final["reason"]) == ("Stopped", "StopRequested")


def test_the_node_session_ends_when_its_server_failed(tmp_path: Path) -> None:
    stopping = threading.Event()
    failed = ServiceObservation(Phase.FAILED, reason=Reason.NOT_READY, message="gave up", raw={"phase": "Failed"})
    node = NodeServices(tmp_path, [failed, failed], threading.Event())
    out = io.StringIO()
    assert ServiceSession(service().on_tcp("10.0.0.7", 1), node, out, stopping).run() == 1  # type: ignore[arg-type]
    final = parse(out.getvalue(), complete=True).final
    assert final is not None and (final["phase"], final["message"]) == ("Failed", "gave up")


def test_a_command_without_a_socket_cannot_listen_on_a_node() -> None:
    plain = Service(key=ServiceKey(project="p", name="n"), command=("server", "--port", "8000"))
    with pytest.raises(ValueError, match="its command takes no --uds"):
        plain.on_tcp("10.0.0.7", 1)
