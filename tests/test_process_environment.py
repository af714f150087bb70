"""What the long-lived processes `nodus apply` starts on this machine inherit from its shell: only what they need.

One `nodus apply` of a Job (its supervisor and its command) and an InferenceEndpoint on the tiny model (the model
server and the project's gateway, each under a service supervisor of its own), from a shell that holds tokens no
resource names (HF_TOKEN, AWS_SECRET_ACCESS_KEY, RAY_AUTH_TOKEN). Every process below the supervisors nodus recorded
is read in /proc/PID/environ: none holds a token; the Job's command has its `spec.env`, the model server its
service's settings, libpq's (a PostgreSQL state store's password) only what opens the store (the gateway, and the
service supervisors, whose reports refresh the endpoint's status), never the model server or the Job, and a variable
the host lists in NODUS_PASS_ENV reaches the command and the model server.

Needs the training stack (the model server runs on transformers) and the tiny model (built here, no download).
"""

from __future__ import annotations

import json
import socket
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from nodus.testing.module_project import nodus

pytestmark = pytest.mark.slow

CANARIES = {
    "HF_TOKEN": "canary-hf-4d1c",
    "AWS_SECRET_ACCESS_KEY": "canary-aws-77e0",
    "RAY_AUTH_TOKEN": "canary-ray-0b2a",
    "NODUS_API_KEY": "canary-nodus-9f31",
}
RESOURCES = """apiVersion: nodus.dev/v1beta1
kind: Job
metadata: {name: holder}
spec:
  command: [sleep, "300"]
  env: {JOB_SETTING: from-the-spec}
---
apiVersion: nodus.dev/v1
kind: InferenceEndpoint
metadata: {name: chat}
spec: {model: nodus/tiny-qwen3, rpm: 60, maxConcurrent: 4, maxCostUSD: "1.00"}
"""


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port: int = probe.getsockname()[1]
        return port


def environ_of(pid: int) -> dict[str, str]:
    """Its environment; empty for a process that ended meanwhile (a short-lived child: not what is checked here)."""
    try:
        raw = Path(f"/proc/{pid}/environ").read_bytes()
    except (ProcessLookupError, FileNotFoundError):
        return {}
    pairs = (entry.decode(errors="replace").partition("=") for entry in raw.split(b"\0") if entry)
    return {name: value for name, _, value in pairs}


def command_of(pid: int) -> str:
    return Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace").strip()


def tree(pid: int) -> list[int]:
    """`pid` and every live process below it (from /proc's parent pids)."""
    parents: dict[int, int] = {}
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                parents[int(entry.name)] = int((entry / "stat").read_text().rpartition(")")[2].split()[1])
            except (OSError, IndexError, ValueError):
                continue
    found, frontier = [pid], [pid]
    while frontier:
        parent = frontier.pop()
        children = [child for child, ppid in parents.items() if ppid == parent]
        found += children
        frontier += children
    return found


def reporting(pid: int) -> bool:
    """A supervisor's report (a refresh of the store that ends in a moment), or a process that ended meanwhile."""
    try:
        command = command_of(pid)
    except OSError:
        return True
    return "nodus.reconciler.refresh" in command or "service_supervisor" in command  # forked, not yet exec'd


def supervised(record: Path, timeout_s: float = 60.0) -> tuple[int, list[int]]:
    """(supervisor pid, its children's trees) from the supervisor.json nodus wrote, once it has a child and no report
    of the supervisor's is running (they end in a moment)."""
    deadline = time.monotonic() + timeout_s
    while True:
        pid = int(json.loads(record.read_text())["pid"])
        below = tree(pid)[1:]
        if any(reporting(child) for child in below):
            below = []
        if below:
            return pid, below
        assert time.monotonic() < deadline, f"no process below the supervisor in {record}"
        time.sleep(0.2)


@pytest.fixture
def project(tmp_path: Path, tiny_model: tuple[str, str], monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    monkeypatch.setenv("HF_HUB_CACHE", tiny_model[0])
    monkeypatch.delenv("NODUS_HOME", raising=False)
    monkeypatch.delenv("NODUS_STATE", raising=False)
    for name, value in CANARIES.items():
        monkeypatch.setenv(name, value)
    monkeypatch.setenv("PGPASSWORD", "the-state-stores")  # libpq's: what opens the store alone
    monkeypatch.setenv("SITE_SETTING", "this-host-wants-it")
    monkeypatch.setenv("NODUS_PASS_ENV", "SITE_SETTING")
    root = tmp_path / "project"
    root.mkdir()
    (root / "nodus.lock").write_text("lockfileVersion: 1\nenvironments: {}\n")
    (root / "nodus.yaml").write_text(f"inference: {{gateway: {{port: {free_port()}}}}}\n")
    monkeypatch.chdir(root)
    yield root
    nodus("delete", "ep/chat")
    nodus("delete", "job/holder")


def test_no_process_nodus_starts_inherits_a_token_of_the_shell_that_applied(project: Path) -> None:
    (project / "resources.yaml").write_text(RESOURCES)
    code, output = nodus("apply", ".", "--yes")
    assert code == 0, output
    code, output = nodus("wait", "ep/chat", "--for=jsonpath={.status.phase}=Running", "--timeout", "5m")
    assert code == 0, output

    state = project / ".nodus"
    job_supervisor, job_processes = supervised(state / "jobs" / "default" / "holder" / "supervisor.json")
    model_supervisor, model_processes = supervised(state / "services" / "default" / "chat" / "supervisor.json")
    gateway_supervisor, gateway_processes = supervised(state / "services" / "nodus" / "gateway" / "supervisor.json")
    every = [
        job_supervisor,
        *job_processes,
        model_supervisor,
        *model_processes,
        gateway_supervisor,
        *gateway_processes,
    ]
    assert len(every) >= 6, every
    for pid in every:
        seen = environ_of(pid)
        if not seen:
            continue
        leaked = {name for name, value in seen.items() if name in CANARIES or value in CANARIES.values()}
        assert not leaked, f"{command_of(pid)} (pid {pid}) inherited {sorted(leaked)}"
        assert "PATH" in seen, f"{command_of(pid)} (pid {pid}) has no PATH"

    (trainer,) = [pid for pid in job_processes if command_of(pid) == "sleep 300"]
    seen = environ_of(trainer)
    assert seen["JOB_SETTING"] == "from-the-spec" and seen["NODUS_JOB_NAME"] == "holder", seen
    assert seen["SITE_SETTING"] == "this-host-wants-it", seen
    assert "JOB_SETTING" not in environ_of(job_supervisor)  # the spec's env is the command's, not its supervisor's
    (server,) = [pid for pid in model_processes if "nodus.runtimes.serving" in command_of(pid)]
    seen = environ_of(server)
    assert seen["HF_HUB_OFFLINE"] == "1" and seen["SITE_SETTING"] == "this-host-wants-it", seen
    (gateway,) = [pid for pid in gateway_processes if "nodus.reconciler.inference.gateway" in command_of(pid)]
    seen = environ_of(gateway)
    assert seen["PGPASSWORD"] == "the-state-stores" and "JOB_SETTING" not in seen, seen
    store_openers = (gateway, gateway_supervisor, model_supervisor)  # a supervisor's report refreshes the store
    opened = [pid for pid in every if "PGPASSWORD" in environ_of(pid)]
    assert not [pid for pid in opened if pid not in store_openers], [command_of(pid) for pid in opened]
    assert "PGPASSWORD" not in environ_of(server)
