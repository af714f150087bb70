"""Fixtures for the local executor tests: an executor over a temporary jobs folder, job specs that run the
echo trainer (`runtimes/echo_trainer.py`) against the catalog's arithmetic environment with process-mode
graders, and helpers to watch a job.

Who uses it: the tests in this folder, through the `jobs` fixture (pytest runs with --import-mode=importlib,
so helpers come as fixtures, never by import). Every process a test starts is ended by pid in teardown:
each job's supervisor is asked to cancel, then it, its trainer and every process below them (graders)
are killed if still there.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import signal
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any, TypeVar

import pytest

from nodus.reconciler.executors import (
    EnvironmentArtifact,
    Intervals,
    LocalExecutor,
    PackageSource,
    Workload,
    WorkloadKey,
)
from nodus.reconciler.executors.local.job import JobFiles, lock_held, read_json, signal_verified, start_ticks
from nodus.reconciler.grading import GradingSettings

HERE = Path(__file__).parent
ECHO_TRAINER = HERE / "runtimes" / "echo_trainer.py"
REPO = Path(__file__).resolve().parents[3]
ARITHMETIC = REPO / "catalog" / "arithmetic"
PROJECT = "proj"

T = TypeVar("T")


def processes() -> dict[int, tuple[int, int]]:
    """pid -> (parent pid, start ticks) of every live process on the host."""
    table: dict[int, tuple[int, int]] = {}
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            fields = (entry / "stat").read_text().rpartition(")")[2].split()
        except OSError:
            continue
        if fields and fields[0] not in ("Z", "X"):
            table[int(entry.name)] = (int(fields[1]), int(fields[19]))
    return table


def descendants(pid: int) -> list[tuple[int, int]]:
    """(pid, start ticks) of every live process below `pid`."""
    table = processes()
    found: list[tuple[int, int]] = []
    frontier = [pid]
    while frontier:
        parent = frontier.pop()
        for child, (ppid, ticks) in table.items():
            if ppid == parent:
                found.append((child, ticks))
                frontier.append(child)
    return found


class Jobs:
    """An executor over `root` and what tests need around it: specs, waiting, the job's files."""

    def __init__(self, root: Path, grading: GradingSettings, **executor_options: Any) -> None:
        self.root = root
        self.grading = grading
        self.executor = LocalExecutor(root, grading, record_wire=True, **executor_options)
        self.started: list[JobFiles] = []

    def spec(
        self,
        name: str = "tj",
        *,
        parameters: dict[str, Any] | None = None,
        project: str = PROJECT,
        package: Path = ARITHMETIC,
        **fields: Any,
    ) -> Workload:
        """A workload of the echo trainer on the arithmetic package (process-mode graders from its folder: the
        host hint), as `LocalExecutor.launch` takes it; `fields` are Workload fields."""
        environment = EnvironmentArtifact(
            project=project,
            name="arithmetic",
            version="2.0.0",
            package=PackageSource(host_hint=package.resolve().as_uri()),
            loader="arithmetic_env",
            train_tasks=16,
            held_out_tasks=8,
            seed=3,
        )
        values: dict[str, Any] = {
            "command": ("python", str(ECHO_TRAINER)),
            "environment": environment,
            "params": {"parameters": {"steps": 4, "sleepS": 0.05, **(parameters or {})}},
            "price_per_hour_usd": "36",
            "intervals": Intervals(accounting_s=0.2, heartbeat_s=0.3, stop_grace_s=3.0),
            **fields,
        }
        return Workload(key=WorkloadKey(project=project, name=name), **values)

    def launch(self, spec: Workload) -> JobFiles:
        files = self.executor.files(spec.project, spec.name)
        if files not in self.started:
            self.started.append(files)
        self.executor.launch(spec)
        return files

    def status(self, name: str = "tj") -> dict[str, Any]:
        return self.executor.status(PROJECT, name)

    def wait(self, name: str = "tj", *phases: str, timeout_s: float = 60.0) -> dict[str, Any]:
        if phases:
            return self.executor.wait(PROJECT, name, phases=phases, timeout_s=timeout_s)
        return self.executor.wait(PROJECT, name, timeout_s=timeout_s)

    def files(self, name: str = "tj") -> JobFiles:
        return self.executor.files(PROJECT, name)

    def checkpoint(self, name: str = "tj") -> int | None:
        data = read_json(self.files(name).state / "checkpoint.json")
        return None if data is None else int(data["step"])

    def steps(self, name: str = "tj") -> list[dict[str, Any]]:
        path = self.files(name).state / "steps.jsonl"
        return [json.loads(line) for line in path.read_text().splitlines()] if path.exists() else []

    def events(self, name: str = "tj") -> list[dict[str, Any]]:
        path = self.files(name).events_log
        return [json.loads(line) for line in path.read_text().splitlines()] if path.exists() else []

    def wire(self, name: str = "tj") -> list[dict[str, Any]]:
        path = self.files(name).wire_log
        return [json.loads(line) for line in path.read_text().splitlines()] if path.exists() else []

    descendants = staticmethod(descendants)

    @staticmethod
    def cmdline(pid: int) -> str:
        try:
            return Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
        except OSError:
            return ""

    @staticmethod
    def until(check: Callable[[], T | None], what: str, timeout_s: float = 60.0) -> T:
        """Poll `check` until it returns something truthy; fail the test with `what` when it never does."""
        deadline = time.monotonic() + timeout_s
        while True:
            value = check()
            if value:
                return value
            if time.monotonic() >= deadline:
                pytest.fail(f"timed out after {timeout_s:g}s waiting for {what}")
            time.sleep(0.05)

    def cleanup(self) -> None:
        for files in self.started:
            status = files.read_status()
            launched = read_json(files.supervisor) or {}
            roots = [
                (launched.get("pid"), launched.get("startTicks")),
                (status.get("supervisorPid"), status.get("supervisorStartTicks")),
                (status.get("trainerPid"), status.get("trainerStartTicks")),
            ]
            alive = [(pid, ticks) for pid, ticks in roots if isinstance(pid, int) and start_ticks(pid) == ticks]
            everything = {*alive, *(d for pid, _ in alive for d in descendants(pid))}
            with contextlib.suppress(Exception):
                self.executor.cancel(files.dir.parent.name, files.dir.name)
            deadline = time.monotonic() + 10
            while lock_held(files.supervisor_lock) and time.monotonic() < deadline:
                time.sleep(0.05)
            for pid, ticks in everything:
                signal_verified(pid, ticks, signal.SIGCONT)
                signal_verified(pid, ticks, signal.SIGKILL)


@pytest.fixture
def grading_settings(tmp_path: Path) -> GradingSettings:
    """Process-mode graders with a block of runner uids per test worker (the root conftest picks the worker's)."""
    if shutil.which("prlimit") is None:
        pytest.skip("process-mode grading needs prlimit (util-linux)")
    worker_uid = int(os.environ.get("NODUS_RUNNER_UID", "10100"))
    return GradingSettings(
        mode="process",
        stage_dir=tmp_path / "stage",
        max_parallel=2,
        task_timeout_s=10,
        runner_uid_base=30000 + (worker_uid - 10100) * 16,
        runner_uid_count=16,
    )


@pytest.fixture
def jobs(tmp_path: Path, grading_settings: GradingSettings) -> Iterator[Jobs]:
    made = Jobs(tmp_path / "jobs", grading_settings)
    try:
        yield made
    finally:
        made.cleanup()


@pytest.fixture
def make_jobs(tmp_path: Path, grading_settings: GradingSettings) -> Iterator[Callable[..., Jobs]]:
    """`make_jobs(**LocalExecutor options)`: another executor on the same jobs folder, cleaned up the same way."""
    made: list[Jobs] = []

    def make(**options: Any) -> Jobs:
        jobs = Jobs(tmp_path / "jobs", grading_settings, **options)
        made.append(jobs)
        return jobs

    try:
        yield make
    finally:
        for jobs in made:
            jobs.cleanup()
