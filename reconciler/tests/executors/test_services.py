"""Services on the local executor (`executors/local/services.py`, `service_supervisor.py`): a real supervisor keeps a
small HTTP server on a Unix socket up: Running once it answers its probe, started again when it dies, stopped and
started on request, Failed after its restarts in a row with the cause from its log, and refused in one line when
this host lacks what it names."""

from __future__ import annotations

import http.client
import json
import os
import shutil
import signal
import socket
import sys
import time
from pathlib import Path

import pytest

from nodus.errors import ConfigError
from nodus.reconciler.executors.local import LocalExecutor
from nodus.reconciler.executors.local.job import read_json, same_process_alive, start_ticks
from nodus.reconciler.executors.service import Adapter, JobOutput, Report, Service, ServiceKey
from nodus.specs.status_names import Phase, Reason

pytestmark = pytest.mark.slow

SERVER = r"""
import http.server, os, socketserver, sys
class Handler(http.server.BaseHTTPRequestHandler):
    def do_GET(self):
        body = f"{self.path} from {os.getpid()}".encode()
        self.send_response(200)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)
    def log_message(self, *args):
        pass
class Server(socketserver.UnixStreamServer):
    def get_request(self):
        request, _ = super().get_request()
        return request, ("unix", 0)
print("serving on", sys.argv[1], flush=True)
Server(sys.argv[1], Handler).serve_forever()
"""


def get(path: str, route: str) -> str:
    class Connection(http.client.HTTPConnection):
        def connect(self) -> None:
            self.sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
            self.sock.connect(path)

    connection = Connection("localhost", timeout=5)
    try:
        connection.request("GET", route)
        return connection.getresponse().read().decode()
    finally:
        connection.close()


def service(
    name: str = "echo", generation: int = 1, command: tuple[str, ...] | None = None, **fields: object
) -> Service:
    return Service(
        key=ServiceKey(project="default", name=name),
        generation=generation,
        command=command or ("python", "-c", SERVER, "{socket}"),
        **fields,  # type: ignore[arg-type]
    )


def until(executor: LocalExecutor, name: str, check, timeout: float = 30.0):  # type: ignore[no-untyped-def]
    deadline = time.monotonic() + timeout
    while True:
        seen = executor.services.observe_service("default", name)
        if check(seen):
            return seen
        assert time.monotonic() < deadline, seen
        time.sleep(0.1)


@pytest.fixture
def executor(tmp_path: Path):  # type: ignore[no-untyped-def]
    local = LocalExecutor(tmp_path / "jobs", python=sys.executable)
    yield local
    for folder in (tmp_path / "services" / "default").glob("*") if (tmp_path / "services").exists() else ():
        local.services.stop_service("default", folder.name)


def test_a_service_runs_once_it_answers_is_started_again_when_it_dies_and_stops_on_request(
    executor: LocalExecutor,
) -> None:
    executor.services.launch_service(service())
    seen = until(executor, "echo", lambda s: s.ready)
    assert seen.phase == Phase.RUNNING and seen.address is not None and seen.address.startswith("unix:")
    socket_path = seen.address.removeprefix("unix:")
    first = get(socket_path, "/health")
    assert first.startswith("/health from ")
    executor.services.launch_service(service())  # the same generation, up: nothing
    assert get(socket_path, "/health") == first

    os.kill(int(first.rsplit(" ", 1)[1]), signal.SIGKILL)  # the server dies: its supervisor starts it again
    seen = until(executor, "echo", lambda s: s.ready and s.restarts == 1)
    assert get(socket_path, "/health") != first

    executor.services.stop_service("default", "echo")
    seen = executor.services.observe_service("default", "echo")
    assert (seen.phase, seen.reason, seen.ready) == (Phase.STOPPED, Reason.STOP_REQUESTED, False)
    assert not Path(socket_path).exists()
    supervisor = read_json(executor.services.files("default", "echo").supervisor) or {}
    assert not same_process_alive(supervisor.get("pid"), supervisor.get("startTicks"))

    executor.services.launch_service(service())  # started again
    assert until(executor, "echo", lambda s: s.ready).phase == Phase.RUNNING
    assert "serving on" in executor.services.service_log("default", "echo")


def test_a_service_that_keeps_exiting_fails_with_the_cause_and_a_new_generation_tries_again(
    executor: LocalExecutor,
) -> None:
    broken = service(
        "broken", command=("python", "-c", "import sys; print('no model at /x'); sys.exit(3)"), max_restarts=1
    )
    executor.services.launch_service(broken)
    seen = until(executor, "broken", lambda s: s.phase == Phase.FAILED)
    assert seen.reason == Reason.SERVICE_EXITED and seen.message is not None
    assert "exited with status 3 in 2 starts in a row without becoming ready: " in seen.message
    assert "no model at /x" in seen.message
    executor.services.launch_service(broken)  # it gave up: the same generation is not started again
    assert executor.services.observe_service("default", "broken").phase == Phase.FAILED
    executor.services.launch_service(service("broken", generation=2))
    assert until(executor, "broken", lambda s: s.ready).generation == 2


def test_a_service_whose_supervisor_died_is_not_reported_running_and_the_next_launch_starts_it(
    executor: LocalExecutor,
) -> None:
    executor.services.launch_service(service())
    seen = until(executor, "echo", lambda s: s.ready)
    served_by = int(get(seen.address.removeprefix("unix:"), "/").rsplit(" ", 1)[1])  # type: ignore[union-attr]
    supervisor = read_json(executor.services.files("default", "echo").supervisor) or {}
    os.kill(supervisor["pid"], signal.SIGKILL)
    deadline = time.monotonic() + 10
    while same_process_alive(served_by, start_ticks(served_by)) and time.monotonic() < deadline:
        time.sleep(0.05)  # the server dies with its supervisor (the kernel kills it)
    seen = executor.services.observe_service("default", "echo")
    assert (seen.phase, seen.ready) == (Phase.PENDING, False) and "supervisor is gone" in (seen.message or "")
    executor.services.launch_service(service())
    assert until(executor, "echo", lambda s: s.ready).phase == Phase.RUNNING


def test_what_the_host_lacks_is_refused_in_one_line(executor: LocalExecutor) -> None:
    adapter = Adapter(name="support", job=JobOutput(project="default", name="quickstart"))
    with pytest.raises(ConfigError, match=r"adapter support: TrainingJob/quickstart has no adapter/ in its outputs"):
        executor.services.launch_service(service(adapters=(adapter,), command=("python", "{adapter:support}")))
    assert executor.services.observe_service("default", "echo").phase == Phase.PENDING  # nothing started


REPORT = """
import json, sys
status = json.load(open("status.json"))
with open(sys.argv[1], "a") as out:
    out.write(json.dumps([status["phase"], status["ready"]]) + "\\n")
"""


def reported(path: Path) -> list[list[object]]:
    return [json.loads(line) for line in path.read_text().splitlines()] if path.exists() else []


def test_a_service_reports_each_change_of_its_readiness(executor: LocalExecutor, tmp_path: Path) -> None:
    log = tmp_path / "reports.jsonl"
    executor.services.launch_service(service(report=Report(command=("python", "-c", REPORT, str(log)))))
    seen = until(executor, "echo", lambda s: s.ready)
    deadline = time.monotonic() + 30
    while [Phase.RUNNING, True] not in reported(log):  # reported without anyone asking
        assert time.monotonic() < deadline, reported(log)
        time.sleep(0.1)
    os.kill(int(get(seen.address.removeprefix("unix:"), "/").rsplit(" ", 1)[1]), signal.SIGKILL)  # type: ignore[union-attr]
    until(executor, "echo", lambda s: s.ready and s.restarts == 1)
    while reported(log)[-1] != [Phase.RUNNING, True] or [Phase.PENDING, False] not in reported(log):
        assert time.monotonic() < deadline, reported(log)
        time.sleep(0.1)
    supervisor = (read_json(executor.services.files("default", "echo").supervisor) or {})["pid"]
    while zombies_of(supervisor):  # each ended report is reaped at the supervisor's next tick
        assert time.monotonic() < deadline, zombies_of(supervisor)
        time.sleep(0.1)


def zombies_of(parent: int) -> list[int]:
    found = []
    for entry in Path("/proc").iterdir():
        try:
            fields = (entry / "stat").read_text().rpartition(")")[2].split() if entry.name.isdigit() else []
        except OSError:
            continue
        if fields and fields[0] == "Z" and int(fields[1]) == parent:
            found.append(int(entry.name))
    return found


def test_a_service_whose_folder_is_gone_stops_and_writes_nothing(executor: LocalExecutor) -> None:
    executor.services.launch_service(service())
    seen = until(executor, "echo", lambda s: s.ready)
    served_by = int(get(seen.address.removeprefix("unix:"), "/").rsplit(" ", 1)[1])  # type: ignore[union-attr]
    files = executor.services.files("default", "echo")
    supervisor = read_json(files.supervisor) or {}
    shutil.rmtree(files.dir)  # the project deleted under it
    deadline = time.monotonic() + 30
    while same_process_alive(supervisor["pid"], supervisor["startTicks"]) or same_process_alive(
        served_by, start_ticks(served_by)
    ):
        assert time.monotonic() < deadline, "the supervisor or its server outlived the folder"
        time.sleep(0.1)
    assert not files.dir.exists()
