"""Acceptance of `nodus controller`: left running on a repository, it picks up a pushed commit and converges within
two intervals; killed in the middle of an apply and started again, it loses nothing and starts nothing twice.

The repository holds a Secret and Jobs (a command each, no Environment to build), so the test needs neither
podman nor a model. Each Job appends a line to a file of its own, so "launched once" is checked where it counts:
the command ran once. The controller runs as a real process (`nodus controller --interval 2s -v`), killed with
SIGKILL right after it logged its first launch of an apply; `nodus get` is the one that reads its work.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner

from nodus.cli.main import cli
from nodus.reconciler.state import open_store
from nodus.reconciler.state.records import ResourceKey

pytestmark = pytest.mark.slow

INTERVAL_S = 2.0
NODUS = Path(sys.executable).parent / "nodus"
SECRET = "apiVersion: nodus.dev/v1\nkind: Secret\nmetadata: {{name: creds}}\nspec: {{keys: [{keys}]}}\n"
JOB = """apiVersion: nodus.dev/v1beta1
kind: Job
metadata: {{name: {name}}}
spec:
  command: [/bin/sh, -c, "echo ran >> {runs}/{name}"]
"""


class Repo:
    def __init__(self, folder: Path, runs: Path) -> None:
        self.folder, self.runs = folder, runs
        folder.mkdir()
        for args in (
            ["init", "-q", "-b", "main"],
            ["config", "user.email", "t@example.com"],
            ["config", "user.name", "t"],
        ):
            self.git(*args)

    def git(self, *args: str) -> str:
        return subprocess.run(
            ["git", *args], cwd=self.folder, capture_output=True, text=True, check=True
        ).stdout.strip()

    def commit(self, message: str, keys: str, jobs: list[str]) -> str:
        (self.folder / "secret.yaml").write_text(SECRET.format(keys=keys))
        for name in jobs:
            (self.folder / "jobs").mkdir(exist_ok=True)
            (self.folder / "jobs" / f"{name}.yaml").write_text(JOB.format(name=name, runs=self.runs))
        self.git("add", "-A")
        self.git("commit", "-q", "-m", message)
        return self.git("rev-parse", "HEAD")


class Controller:
    """`nodus controller` as a process of this test, its log in a file the test reads as it grows."""

    def __init__(self, repo: Repo, service: Path, log: Path) -> None:
        self.log = log
        self.process = subprocess.Popen(
            [str(NODUS), "controller", "--repo", str(repo.folder), "--interval", f"{INTERVAL_S:g}s", "-v"],
            cwd=service,
            stdout=log.open("ab"),
            stderr=subprocess.STDOUT,
            env={**os.environ, "PYTHONUNBUFFERED": "1", "NO_COLOR": "1", "COLUMNS": "200"},
        )

    def size(self) -> int:
        return len(self.log.read_text())

    def wait_for(self, text: str, *, since: int = 0, timeout_s: float = 60, poll_s: float = 0.02) -> None:
        """Wait until the log, from character `since` on, has `text`."""
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            if text in self.log.read_text()[since:]:
                return
            assert self.process.poll() is None, (
                f"the controller exited ({self.process.returncode}):\n{self.log.read_text()}"
            )
            time.sleep(poll_s)
        raise AssertionError(f"no {text!r} in the controller's log within {timeout_s}s:\n{self.log.read_text()}")

    def stop(self, signal_number: int = signal.SIGTERM) -> int:
        if self.process.poll() is None:
            self.process.send_signal(signal_number)
        return self.process.wait(timeout=60)


@pytest.fixture
def service(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """Where the controller runs: its state folder (checkout, jobs, SQLite store) is NODUS_HOME."""
    folder = tmp_path / "service"
    folder.mkdir()
    monkeypatch.setenv("NODUS_HOME", str(folder / ".nodus"))
    monkeypatch.delenv("NODUS_STATE", raising=False)
    monkeypatch.chdir(folder)
    return folder


@pytest.fixture
def started(service: Path, tmp_path: Path) -> Iterator[list[Controller]]:
    """The controllers a test started; any still running at the end is killed (by its own pid)."""
    controllers: list[Controller] = []
    yield controllers
    for controller in controllers:
        if controller.process.poll() is None:
            controller.process.kill()
            controller.process.wait(timeout=30)


def get_jobs() -> dict[str, dict[str, Any]]:
    """`nodus get job -o json`, by name."""
    result = CliRunner().invoke(cli, ["get", "job", "-o", "json"], catch_exceptions=False)
    assert result.exit_code == 0, result.output
    if "No Job resources" in result.output:
        return {}
    data = json.loads(result.output)
    items = data.get("items", [data])
    return {item["metadata"]["name"]: item for item in items}


def converged(revision: str, names: list[str]) -> bool:
    jobs = get_jobs()
    return all(
        name in jobs
        and jobs[name].get("sync", {}).get("status") == "Synced"
        and jobs[name]["sync"]["revision"] == revision
        for name in names
    )


def test_the_controller_converges_on_a_pushed_commit_and_loses_nothing_when_killed(
    service: Path, tmp_path: Path, started: list[Controller]
) -> None:
    runs = tmp_path / "runs"
    runs.mkdir()
    repo = Repo(tmp_path / "repo", runs)
    first = repo.commit("first", "A", ["a"])
    controller = Controller(repo, service, tmp_path / "controller-1.log")
    started.append(controller)
    controller.wait_for(f"synced {first[:7]}")
    assert converged(first, ["a"])

    # A pushed commit converges within two intervals: picked up by the next poll, applied, recorded.
    second = repo.commit("second", "A, B", ["a", "b"])
    pushed = time.monotonic()
    while not converged(second, ["a", "b"]):
        assert time.monotonic() - pushed < 2 * INTERVAL_S, (
            f"not converged in two intervals:\n{controller.log.read_text()}"
        )
        time.sleep(0.1)
    wide = CliRunner().invoke(cli, ["get", "job", "-o", "wide"], catch_exceptions=False).output
    assert "SYNC" in wide and "HEALTH" in wide and "Synced" in wide and second[:7] in wide

    # Killed right after its first launch of an apply: the specs of the wave are written, most jobs not launched.
    names = ["c", "d", "e", "f", "g", "h"]
    mark = controller.size()
    third = repo.commit("third", "A, B, C", ["a", "b", *names])
    controller.wait_for(f"applying {third[:7]}", since=mark)
    controller.wait_for("launched Job/default/", since=mark, poll_s=0.005)
    controller.stop(signal.SIGKILL)
    store = open_store(None, project_state_dir=service / ".nodus")
    try:
        unlaunched = [name for name in names if not store.launches(ResourceKey("Job", "default", name))]
        summary = json.loads(store.get_value("controller/last-sync") or "{}")
        assert summary["outcome"] == "Running" and summary["revision"] == third
        assert unlaunched, "the apply ended before the kill: nothing was cut off"
    finally:
        store.close()

    controller = Controller(repo, service, tmp_path / "controller-2.log")
    started.append(controller)
    controller.wait_for(f"synced {third[:7]}")
    assert (
        "the last sync was interrupted" in controller.log.read_text()
        or "the plan has changes" in controller.log.read_text()
    )
    everything = ["a", "b", *names]
    deadline = time.monotonic() + 60
    while True:
        jobs = get_jobs()
        if all(jobs.get(name, {}).get("status", {}).get("phase") == "Succeeded" for name in everything):
            break
        assert time.monotonic() < deadline, json.dumps(jobs, indent=1)[:4000]
        time.sleep(0.3)
    assert converged(third, everything)
    store = open_store(None, project_state_dir=service / ".nodus")
    try:
        for name in everything:
            key = ResourceKey("Job", "default", name)
            record = store.get(key)
            assert record is not None and record.generation == 1, name  # applied once, never rewritten
            assert [launch.launch_key for launch in store.launches(key)] == [f"Job/default/{name}/gen1/attempt1"]
            assert (runs / name).read_text() == "ran\n", name  # the command ran exactly once
        secret = store.get(ResourceKey("Secret", "default", "creds"))
        assert secret is not None and secret.spec["spec"]["keys"] == ["A", "B", "C"] and secret.generation == 3
        assert json.loads(store.get_value("controller/last-sync") or "{}")["outcome"] == "Succeeded"
        assert store.current_lease("apply") is None  # the dead controller's lease was taken over, then released
    finally:
        store.close()

    # SIGTERM stops it cleanly.
    assert controller.stop(signal.SIGTERM) == 0
    assert "stopped" in controller.log.read_text().splitlines()[-1]
