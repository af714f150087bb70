"""An InferenceEndpoint through `nodus apply`: the model table's `nodus/tiny-qwen3` imported from the local cache and
served by the model server as a service of the local executor, Running once it answers; `nodus stop`/`start`
(`spec.state`) stop and start it; a delete stops it; a catalog id the table lacks is refused at plan time. A started
endpoint (`start`, `create` without `--wait`) serves with no later command: only pure reads (`get`) follow it.

Needs the training stack (the model server runs on transformers) and the tiny model (built here, no download).
"""

from __future__ import annotations

import http.client
import json
import socket
import time
from pathlib import Path
from typing import Any

import pytest

from nodus.testing.module_project import nodus

pytestmark = pytest.mark.slow

ENDPOINT = """apiVersion: nodus.dev/v1
kind: InferenceEndpoint
metadata: {{name: chat}}
spec: {{model: {model}, rpm: 60, maxConcurrent: 4, maxCostUSD: "1.00"}}
"""


def post(address: str, route: str, body: dict[str, Any]) -> dict[str, Any]:
    class Connection(http.client.HTTPConnection):
        def connect(self) -> None:
            self.sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
            self.sock.connect(address.removeprefix("unix:"))

    connection = Connection("localhost", timeout=60)
    try:
        connection.request("POST", route, json.dumps(body), {"Content-Type": "application/json"})
        reply = connection.getresponse()
        document: dict[str, Any] = json.loads(reply.read())
        assert reply.status == 200, document
        return document
    finally:
        connection.close()


def status_of(name: str) -> dict[str, Any]:
    code, output = nodus("get", "ep", name, "-o", "json")
    assert code == 0, output
    found: dict[str, Any] = json.loads(output)["status"]
    return found


@pytest.fixture
def project(tmp_path: Path, tiny_model: tuple[str, str], monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setenv("HF_HUB_CACHE", tiny_model[0])
    monkeypatch.delenv("NODUS_HOME", raising=False)
    monkeypatch.delenv("NODUS_STATE", raising=False)
    root = tmp_path / "project"
    root.mkdir()
    (root / "nodus.lock").write_text("lockfileVersion: 1\nenvironments: {}\n")
    monkeypatch.chdir(root)
    yield root
    nodus("delete", "ep/chat")


def test_a_catalog_model_is_served_stopped_started_and_deleted(project: Path) -> None:
    (project / "endpoint.yaml").write_text(ENDPOINT.format(model="nodus/tiny-qwen3"))
    code, output = nodus("apply", ".", "--yes", "--wait", "--timeout", "5m")
    assert code == 0 and "InferenceEndpoint/chat: Running" in output, output
    status = status_of("chat")
    assert status["model"] == "nodus/tiny-qwen3" and status["servedModel"] == "nodus/tiny-qwen3"
    assert status["conditions"] == [{"type": "Ready", "status": "True", "message": "its model answers"}]
    assert status["weights"].startswith("hf://nodus/tiny-qwen3@")
    reply = post(
        status["upstream"],
        "/v1/chat/completions",
        {
            "model": "nodus/tiny-qwen3",
            "messages": [{"role": "user", "content": "reverse: a b"}],
            "max_tokens": 8,
            "temperature": 0,
        },
    )
    assert reply["usage"]["completion_tokens"] >= 1 and reply["choices"][0]["message"]["role"] == "assistant"
    code, output = nodus("get", "ep")
    header, row = output.splitlines()[:2]
    assert header.split() == ["NAME", "PHASE", "MODEL", "READY", "RPM", "CONCURRENT", "MAX-COST", "AGE"], output
    assert row.split()[:7] == ["chat", "Running", "nodus/tiny-qwen3", "True", "60", "4", "$1.00"], output

    code, output = nodus("stop", "ep/chat")
    assert code == 0 and "inferenceendpoint/chat stopped" in output, output
    stopped = status_of("chat")
    assert stopped["phase"] == "Stopped" and stopped["conditions"][0]["status"] == "False"
    assert not Path(status["upstream"].removeprefix("unix:")).exists()
    code, output = nodus("start", "ep/chat")
    assert code == 0 and "inferenceendpoint/chat started" in output, output
    code, output = nodus("wait", "ep/chat", "--for=jsonpath={.status.phase}=Running", "--timeout", "3m")
    assert code == 0, output
    assert post(status["upstream"], "/v1/completions", {"model": "nodus/tiny-qwen3", "prompt": "a b", "max_tokens": 4})

    code, output = nodus("delete", "ep/chat")
    assert code == 0, output
    assert not Path(status["upstream"].removeprefix("unix:")).exists()


def test_create_makes_an_endpoint_from_flags_that_prune_keeps(project: Path) -> None:
    code, output = nodus(
        "create", "inferenceendpoint", "chat", "--model", "nodus/tiny-qwen3", "--rpm", "30", "--max-cost", "2", "--wait"
    )
    assert code == 0 and "chat" in output.splitlines(), output
    status = status_of("chat")
    assert status["phase"] == "Running", status
    code, output = nodus("get", "ep", "chat", "-o", "json")
    document = json.loads(output)
    assert {k: document["spec"][k] for k in ("model", "rpm", "maxCostUSD")} == {
        "model": "nodus/tiny-qwen3",
        "rpm": 30,
        "maxCostUSD": "2.00",
    }
    assert document["metadata"]["labels"] == {"nodus.dev/created-by": "nodus-create"}
    code, output = nodus("create", "inferenceendpoint", "chat", "--model", "nodus/tiny-qwen3")
    assert code == 1 and "InferenceEndpoint/chat exists already in project default" in output, output
    (project / "volume.yaml").write_text("apiVersion: nodus.dev/v1\nkind: Volume\nmetadata: {name: data}\nspec: {}\n")
    code, output = nodus("apply", ".", "--prune", "--yes")  # no file declares it: kept, as nodus run's Jobs
    assert code == 0, output
    assert status_of("chat")["phase"] == "Running"


def test_a_catalog_id_the_table_lacks_is_refused_at_plan_time(project: Path) -> None:
    (project / "endpoint.yaml").write_text(ENDPOINT.format(model="acme/unknown-7b"))
    code, output = nodus("plan", ".")
    assert code == 1, output
    assert (
        "endpoint.yaml: InferenceEndpoint/chat: spec.model: acme/unknown-7b is not in the model table (it has: "
        in output
    )


def until_running(name: str, timeout: float = 300.0) -> dict[str, Any]:
    """Its status once Running, read by `nodus get` alone (a pure read: nothing reconciles meanwhile)."""
    deadline = time.monotonic() + timeout
    while True:
        status = status_of(name)
        if status.get("phase") == "Running":
            return status
        assert time.monotonic() < deadline, status
        time.sleep(0.5)


def test_a_started_endpoint_serves_with_no_later_command(project: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    code, output = nodus("create", "inferenceendpoint", "chat", "--model", "nodus/tiny-qwen3")  # no --wait
    assert code == 0, output
    status = until_running("chat")
    assert status["url"].startswith("http://127.0.0.1:") and status["conditions"][0]["status"] == "True"
    code, output = nodus("keys", "create", "app")
    assert code == 0, output
    monkeypatch.setenv("NODUS_API_KEY", output.splitlines()[0])
    code, output = nodus("inference", "chat", "--endpoint", "chat", "reverse: a b", "--max-tokens", "4")
    assert code == 0 and "request ireq_" in output, output

    code, output = nodus("stop", "ep/chat")
    assert code == 0 and status_of("chat")["phase"] == "Stopped", output
    code, output = nodus("start", "ep/chat")
    assert code == 0 and "inferenceendpoint/chat started" in output, output
    until_running("chat")
    code, output = nodus("inference", "chat", "--endpoint", "chat", "reverse: c d", "--max-tokens", "4")
    assert code == 0 and "request ireq_" in output, output
