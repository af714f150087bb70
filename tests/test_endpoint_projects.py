"""Two projects on one host each serve their own endpoint at the same time, each through its own gateway on a port of
its own, each reachable with its own key; a gateway stops with its project's last endpoint (deleted; a stopped one answers 503 through it), and once its
project's folder is deleted (issue 25, problem 6).

Needs the training stack (the model server runs on transformers) and the tiny model (built here, no download).
Processes are ended by pid: each project's endpoint is deleted, and what a deleted folder's supervisors left (they
end by themselves) is checked and, failing that, killed by its recorded pid and start time.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from nodus.reconciler.executors.local.job import same_process_alive
from nodus.reconciler.inference.gateway_address import Address, holder
from nodus.testing.module_project import nodus

pytestmark = pytest.mark.slow


def supervisors(root: Path) -> list[tuple[int, int]]:
    """(pid, start ticks) of the service supervisors of a project (the test's own processes)."""
    found = []
    for record in (root / ".nodus" / "services").glob("*/*/supervisor.json"):
        launched = json.loads(record.read_text())
        found.append((int(launched["pid"]), int(launched["startTicks"])))
    return found


@pytest.fixture
def projects(tmp_path: Path, tiny_model: tuple[str, str], monkeypatch: pytest.MonkeyPatch) -> Iterator[dict[str, Path]]:
    monkeypatch.setenv("HF_HUB_CACHE", tiny_model[0])
    monkeypatch.delenv("NODUS_HOME", raising=False)
    monkeypatch.delenv("NODUS_STATE", raising=False)
    roots = {name: tmp_path / name for name in ("alpha", "beta")}
    for root in roots.values():
        root.mkdir()
        (root / "nodus.lock").write_text("lockfileVersion: 1\nenvironments: {}\n")
    started: list[tuple[int, int]] = []
    yield roots
    for root in roots.values():
        if root.exists():
            started += supervisors(root)
            monkeypatch.chdir(root)
            nodus("delete", "ep/chat")
    for pid, ticks in started:
        if same_process_alive(pid, ticks):
            os.killpg(pid, signal.SIGKILL)


def serve(root: Path, monkeypatch: pytest.MonkeyPatch) -> tuple[dict[str, Any], str]:
    """The project's endpoint `chat` Running, and a key of the project: (its status, the key's secret)."""
    monkeypatch.chdir(root)
    code, output = nodus("create", "inferenceendpoint", "chat", "--model", "nodus/tiny-qwen3", "--wait")
    assert code == 0, output
    code, output = nodus("get", "ep", "chat", "-o", "json")
    status: dict[str, Any] = json.loads(output)["status"]
    code, output = nodus("keys", "create", "app")
    assert code == 0, output
    return status, output.splitlines()[0]


def chat(root: Path, secret: str, monkeypatch: pytest.MonkeyPatch) -> tuple[int, str]:
    monkeypatch.chdir(root)
    monkeypatch.setenv("NODUS_API_KEY", secret)
    return nodus("inference", "chat", "--endpoint", "chat", "reverse: a b", "--max-tokens", "4")


def gateway_of(status: dict[str, Any]) -> Address:
    host_port = status["url"].removeprefix("http://").split("/", 1)[0]
    host, _, port = host_port.rpartition(":")
    return Address(host, int(port))


def until_gone(address: Address, timeout: float = 60.0) -> None:
    deadline = time.monotonic() + timeout
    while holder(address) is not None:
        assert time.monotonic() < deadline, f"a gateway still answers at {address.url}"
        time.sleep(0.2)


def test_two_projects_serve_their_own_endpoints_through_their_own_gateways(
    projects: dict[str, Path], monkeypatch: pytest.MonkeyPatch
) -> None:
    alpha, alpha_key = serve(projects["alpha"], monkeypatch)
    beta, beta_key = serve(projects["beta"], monkeypatch)
    assert alpha["phase"] == beta["phase"] == "Running"
    assert gateway_of(alpha) != gateway_of(beta)  # a port each
    for name, key in (("alpha", alpha_key), ("beta", beta_key)):  # both at once, each with its own key
        code, output = chat(projects[name], key, monkeypatch)
        assert code == 0 and "request ireq_" in output, (name, output)
    # The other project's gateway does not take this project's key.
    request = urllib.request.Request(
        f"{gateway_of(beta).url}/v1/models", headers={"Authorization": f"Bearer {alpha_key}"}
    )
    with pytest.raises(urllib.error.HTTPError) as refused:
        urllib.request.build_opener(urllib.request.ProxyHandler({})).open(request, timeout=30)
    assert refused.value.code == 401

    monkeypatch.chdir(projects["alpha"])
    code, output = nodus("delete", "ep/chat")  # alpha's last endpoint: its gateway stops with it
    assert code == 0, output
    until_gone(gateway_of(alpha))
    code, output = chat(projects["beta"], beta_key, monkeypatch)
    assert code == 0, output

    left = supervisors(projects["beta"])
    assert left
    shutil.rmtree(projects["beta"])  # the project deleted: its gateway and model server end by themselves
    until_gone(gateway_of(beta))
    deadline = time.monotonic() + 60
    while any(same_process_alive(pid, ticks) for pid, ticks in left):
        assert time.monotonic() < deadline, "a supervisor outlived its project's folder"
        time.sleep(0.2)
