"""The attempt API's behaviour without a supervisor: routing, bodies, what reaches the trainer, and the
HTTP/1.1 transport on a Unix socket (keep-alive, error codes, the access and wire logs).

A small stand-in for the grading service records its calls; one test uses the real service to show that a
bad grading item is refused before any grader starts.
"""

from __future__ import annotations

import http.client
import json
import socket
import stat
from collections.abc import Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any

import pytest

from nodus.errors import PermanentError, TemporaryError
from nodus.reconciler.grading import EnvironmentRef, GradingService, GradingSettings, Verdict
from nodus.reconciler.session.attempt_api import AttemptAPI, AttemptServer, FileTranscript, for_trainer
from nodus.reconciler.session.environment import EnvironmentSpec
from nodus.reconciler.session.summary import PHASES

ENVIRONMENT = EnvironmentSpec("fake", "1.0.0", paths=("/nonexistent",), train_tasks=3, held_out_tasks=2, seed=7)


class FakeGrading:
    """Tasks with a field that must never reach a trainer, and a verdict per item; records every call."""

    def __init__(self, error: Exception | None = None) -> None:
        self.error = error
        self.task_calls: list[tuple[str, int, int | None]] = []
        self.grade_calls: list[tuple[str, list[Mapping[str, Any]]]] = []

    def tasks(self, env: EnvironmentRef, split: str, seed: int, *, limit: int | None = None) -> list[dict[str, Any]]:
        self.task_calls.append((split, seed, limit))
        return [
            {"taskId": f"{split}-{i}", "prompt": f"p{i}", "metadata": {"i": i}, "solution": f"secret-{i}"}
            for i in range(limit or 0)
        ]

    def grade(self, job: str, env: EnvironmentRef, items: Sequence[Mapping[str, Any]]) -> list[Verdict]:
        if self.error is not None:
            raise self.error
        self.grade_calls.append((job, list(items)))
        evidence = {"process": {"argv": ["unshare", "/srv/env/answers"], "mode": "process"}, "exitCode": None}
        return [Verdict(str(item["taskId"]), "Correct", 1.0, evidence) for item in items]


def make_api(
    grading: Any, *, environment: EnvironmentSpec | None = ENVIRONMENT
) -> tuple[AttemptAPI, list[dict[str, Any]], list[str]]:
    events: list[dict[str, Any]] = []
    logged: list[str] = []
    api = AttemptAPI(
        name="tj",
        environment=environment,
        grading=grading,
        grading_job="proj/tj",
        on_event=events.append,
        log=logged.append,
    )
    return api, events, logged


def post(api: AttemptAPI, endpoint: str, body: object = None, *, name: str = "tj") -> tuple[int, dict[str, Any]]:
    data = b"" if body is None else (body if isinstance(body, bytes) else json.dumps(body).encode())
    reply = api.handle("POST", f"/trainingjobs/{name}/{endpoint}", data)
    return reply.status, reply.body


def test_tasks_carry_only_id_prompt_and_metadata_and_are_fetched_once() -> None:
    grading = FakeGrading()
    api, _, logged = make_api(grading)
    status, body = post(api, "tasks")
    assert status == 200 and set(body) == {"files"} and set(body["files"]) == {"train.jsonl", "test.jsonl"}
    train = [json.loads(line) for line in body["files"]["train.jsonl"].splitlines()]
    test = [json.loads(line) for line in body["files"]["test.jsonl"].splitlines()]
    assert [t["taskId"] for t in train] == ["train-0", "train-1", "train-2"] and len(test) == 2
    assert all(list(t) == ["taskId", "prompt", "metadata"] for t in train + test)
    assert "secret" not in json.dumps(body)
    assert len(logged) == 5 and "dropped fields ['solution']" in logged[0]
    assert post(api, "tasks", {}) == (status, body)
    assert sorted(grading.task_calls) == [("test", 7, 2), ("train", 7, 3)]


def test_a_split_of_zero_tasks_is_an_empty_file_and_no_sandbox_run() -> None:
    grading = FakeGrading()
    environment = EnvironmentSpec("fake", "1.0.0", paths=("/x",), train_tasks=2, held_out_tasks=0)
    api, _, _ = make_api(grading, environment=environment)
    status, body = post(api, "tasks")
    assert status == 200 and body["files"]["test.jsonl"] == ""
    assert grading.task_calls == [("train", 0, 2)]


def test_gradings_go_to_the_service_under_the_job_and_come_back_without_the_sandbox_argv() -> None:
    grading = FakeGrading()
    api, _, _ = make_api(grading)
    recorded: list[list[dict[str, Any]]] = []
    api.on_verdicts = recorded.append
    items = [{"taskId": "train-0", "completion": "a"}, {"taskId": "train-1", "completion": "b"}]
    status, body = post(api, "gradings", {"items": items})
    assert status == 200 and grading.grade_calls == [("proj/tj", items)]
    assert [v["taskId"] for v in body["verdicts"]] == ["train-0", "train-1"]
    assert body["verdicts"][0]["evidence"] == {"process": {"mode": "process"}, "exitCode": None}
    assert recorded[0][0]["evidence"]["process"]["argv"] == ["unshare", "/srv/env/answers"]


@pytest.mark.parametrize(("phase", "recorded"), [(None, "Training"), *((p, p) for p in PHASES)])
def test_each_verdict_is_recorded_with_the_phase_of_its_request(phase: str | None, recorded: str) -> None:
    api, _, _ = make_api(FakeGrading())
    records: list[list[dict[str, Any]]] = []
    api.on_verdicts = records.append
    body: dict[str, Any] = {"items": [{"taskId": "test-0", "completion": "a"}, {"taskId": "test-1", "completion": "b"}]}
    if phase is not None:
        body["phase"] = phase
    status, reply = post(api, "gradings", body)
    assert status == 200
    assert [(r["taskId"], r["phase"]) for r in records[0]] == [("test-0", recorded), ("test-1", recorded)]
    # The trainer's reply is the verdicts as before: the phase is the platform's bookkeeping.
    assert all("phase" not in verdict for verdict in reply["verdicts"])


def test_a_multi_turn_trainer_s_group_and_episode_go_with_each_verdict_record() -> None:
    api, _, _ = make_api(FakeGrading())
    records: list[list[dict[str, Any]]] = []
    api.on_verdicts = records.append
    items = [
        {"taskId": "test-0", "turns": ["a"], "group": "s0.b0/test-0", "episode": 2},
        {"taskId": "test-1", "turns": ["b"]},
    ]
    status, reply = post(api, "gradings", {"items": items})
    assert status == 200
    assert [(r.get("group"), r.get("episode")) for r in records[0]] == [("s0.b0/test-0", 2), (None, None)]
    assert all("group" not in verdict for verdict in reply["verdicts"])  # the platform's bookkeeping


def test_for_trainer_leaves_verdicts_without_process_evidence_alone() -> None:
    verdict = {"taskId": "t", "verdict": "InfrastructureFailure", "reward": None, "evidence": {"message": "x"}}
    assert for_trainer(verdict) is verdict


@pytest.mark.parametrize(
    ("method", "path", "status", "message"),
    [
        ("POST", "/trainingjobs/other/tasks", 404, "job 'other' is not served here"),
        ("POST", "/trainingjobs/tj/answers", 404, "no such endpoint"),
        ("POST", "/trainingjobs/tj", 404, "no such endpoint"),
        ("POST", "/", 404, "no such endpoint"),
        ("GET", "/trainingjobs/tj/tasks", 405, "GET is not allowed"),
        ("POST", "/jobs/tj/events?x=1", 200, None),
    ],
)
def test_routing(method: str, path: str, status: int, message: str | None) -> None:
    api, _, _ = make_api(FakeGrading())
    reply = api.handle(method, path, b'{"step": 1}')
    assert reply.status == status
    if message is not None:
        assert message in reply.body["error"]


@pytest.mark.parametrize(
    ("endpoint", "body", "message"),
    [
        ("gradings", b"{not json", "the body is not JSON"),
        ("gradings", b"", "the body must be a JSON object"),
        ("gradings", [1, 2], "must be a JSON object, not a list"),
        ("gradings", {}, "'items' must be a non-empty list"),
        ("gradings", {"items": []}, "'items' must be a non-empty list"),
        ("gradings", {"items": ["x"]}, "'items' must be a non-empty list"),
        ("gradings", {"items": [{"taskId": "t", "completion": "c"}], "answers": 1}, "unknown fields ['answers']"),
        ("gradings", {"items": [{"taskId": "t", "completion": "c"}], "phase": "Evaluating"}, "phase must be one of"),
        ("gradings", {"items": [{"taskId": "t", "completion": "c"}], "phase": None}, "got None"),
        ("gradings", {"items": [{"taskId": "t", "completion": "c"}], "phase": "baseline"}, "'Baseline'"),
        ("gradings", {"items": [{"taskId": "t", "turns": ["c"], "group": 3}]}, "'group' must be a string"),
        ("gradings", {"items": [{"taskId": "t", "turns": ["c"], "group": "g" * 201}]}, "1 to 200 characters"),
        ("gradings", {"items": [{"taskId": "t", "turns": ["c"], "episode": 0}]}, "'episode' needs the 'group'"),
        ("gradings", {"items": [{"taskId": "t", "turns": ["c"], "group": "g", "episode": -1}]}, "0 or more"),
        ("events", {}, "an event needs at least one of"),
        ("events", {"stage": "Cooking"}, "stage must be one of"),
        ("events", {"step": -1}, "step must be a whole number >= 0"),
        ("events", {"totalSteps": True}, "totalSteps must be a whole number >= 0"),
        ("events", {"metrics": {"loss": [1]}}, "metrics must map names to numbers"),
        ("events", {"metrics": {"loss": float("nan")}}, "metrics must map names to numbers"),
        ("events", {"summary": 3}, "summary must be an object"),
        ("events", {"phase": "Succeeded"}, "unknown event fields ['phase']"),
        ("tasks", b"[]", "must be a JSON object"),
    ],
)
def test_malformed_bodies_are_400_with_a_json_error(endpoint: str, body: object, message: str) -> None:
    grading = FakeGrading()
    api, events, _ = make_api(grading)
    data = body if isinstance(body, bytes) else json.dumps(body, allow_nan=True).encode()
    reply = api.handle("POST", f"/trainingjobs/tj/{endpoint}", data)
    assert reply.status == 400 and message in reply.body["error"]
    assert events == [] and grading.grade_calls == []


def test_a_bad_grading_item_is_refused_before_any_grader_starts(tmp_path: Path) -> None:
    with GradingService(GradingSettings(mode="process", stage_dir=tmp_path / "stage")) as grading:
        api, _, _ = make_api(grading)
        status, body = post(api, "gradings", {"items": [{"taskId": "t", "completion": 5}]})
        assert status == 400 and body == {"error": "task t: 'completion' must be a string"}
        assert grading.graders("proj/tj") == 0


def test_events_are_checked_and_handed_on() -> None:
    api, events, _ = make_api(FakeGrading(), environment=None)
    report = {"stage": "Training", "step": 3, "totalSteps": 9, "metrics": {"loss": 0.5, "note": "ok"}}
    assert post(api, "events", report) == (200, {"accepted": True})
    assert post(api, "events", {"summary": {"baselinePassRate": 0.25}, "message": "hi"})[0] == 200
    assert events == [report, {"summary": {"baselinePassRate": 0.25}, "message": "hi"}]


def test_a_job_without_an_environment_has_no_tasks_to_give() -> None:
    api, _, _ = make_api(FakeGrading(), environment=None)
    for endpoint, body in (("tasks", {}), ("gradings", {"items": [{"taskId": "t", "completion": ""}]})):
        status, reply = post(api, endpoint, body)
        assert status == 409 and "has no environment" in reply["error"]


def test_grading_failures_are_503_to_retry_or_500() -> None:
    items = {"items": [{"taskId": "t", "completion": ""}]}
    api, _, _ = make_api(FakeGrading(TemporaryError("graders are restarting", delay=2.5)))
    reply = api.handle("POST", "/trainingjobs/tj/gradings", json.dumps(items).encode())
    assert reply.status == 503 and reply.headers == {"Retry-After": "3"}
    assert reply.body == {"error": "graders are restarting"}
    api, _, _ = make_api(FakeGrading(PermanentError("the environment does not load")))
    assert post(api, "gradings", items) == (500, {"error": "the environment does not load"})


# --- over the socket ---------------------------------------------------------------------------------------


class UnixConnection(http.client.HTTPConnection):
    def __init__(self, path: Path) -> None:
        super().__init__("localhost", timeout=10)
        self.socket_path = path

    def connect(self) -> None:
        self.sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self.sock.settimeout(self.timeout)
        self.sock.connect(str(self.socket_path))


@pytest.fixture
def served(tmp_path: Path) -> Iterator[tuple[AttemptServer, Path]]:
    api, _, _ = make_api(FakeGrading())
    path = tmp_path / "a.sock"
    transcript = FileTranscript(tmp_path / "attempt.log", tmp_path / "wire.jsonl")
    server = AttemptServer(path, api, transcript=transcript, record_wire=True)
    server.start()
    try:
        yield server, tmp_path
    finally:
        server.close()


def request(connection: UnixConnection, path: str, body: bytes | None) -> tuple[int, dict[str, Any]]:
    connection.request("POST", path, body, {"Content-Type": "application/json"})
    response = connection.getresponse()
    return response.status, json.loads(response.read())


def test_the_socket_serves_http_with_keep_alive_and_logs_every_request(
    served: tuple[AttemptServer, Path],
) -> None:
    server, folder = served
    assert stat.S_IMODE(server.socket_path.stat().st_mode) == 0o600
    connection = UnixConnection(server.socket_path)
    status, body = request(connection, "/trainingjobs/tj/tasks", b"{}")
    assert status == 200 and "train-0" in body["files"]["train.jsonl"]
    first = connection.sock
    assert request(connection, "/trainingjobs/tj/events", b'{"step": 2}') == (200, {"accepted": True})
    assert connection.sock is first  # the same connection served both
    assert request(connection, "/trainingjobs/nope/events", b'{"step": 2}')[0] == 404
    connection.close()

    log = (folder / "attempt.log").read_text().splitlines()
    assert len(log) == 3 and " POST /trainingjobs/tj/tasks 200 in=2B out=" in log[0]
    assert " 404 " in log[2] and "error=\"job 'nope' is not served here" in log[2]
    wire = [json.loads(line) for line in (folder / "wire.jsonl").read_text().splitlines()]
    assert [(w["path"], w["status"]) for w in wire] == [
        ("/trainingjobs/tj/tasks", 200),
        ("/trainingjobs/tj/events", 200),
        ("/trainingjobs/nope/events", 404),
    ]
    assert wire[1]["request"] == {"step": 2} and wire[1]["response"] == {"accepted": True}
    assert "solution" not in (folder / "wire.jsonl").read_text()


def test_the_socket_refuses_chunked_and_oversized_bodies(served: tuple[AttemptServer, Path]) -> None:
    server, _ = served
    connection = UnixConnection(server.socket_path)
    connection.putrequest("POST", "/trainingjobs/tj/events")
    connection.putheader("Transfer-Encoding", "chunked")
    connection.endheaders()
    response = connection.getresponse()
    assert response.status == 411 and response.getheader("Connection") == "close"
    response.read()
    connection.close()

    connection = UnixConnection(server.socket_path)
    connection.putrequest("POST", "/trainingjobs/tj/events")
    connection.putheader("Content-Length", str(1 << 40))
    connection.endheaders()
    response = connection.getresponse()
    assert response.status == 413 and "at most" in json.loads(response.read())["error"]
    connection.close()


def test_closing_the_server_removes_its_socket(tmp_path: Path) -> None:
    api, _, _ = make_api(FakeGrading())
    path = tmp_path / "a.sock"
    path.parent.mkdir(exist_ok=True)
    stale = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    stale.bind(str(path))  # left behind by a dead supervisor
    stale.close()
    server = AttemptServer(path, api, transcript=FileTranscript(tmp_path / "attempt.log"))
    server.start()
    server.close()
    assert not path.exists()
