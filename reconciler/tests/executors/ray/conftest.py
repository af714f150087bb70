"""Fixtures for the Ray executor's tests.

- `ray_cluster` (the root conftest.py's): one real Ray cluster per test run, for the tests marked `ray`.
- `fake_jobs` and `ray_executor`: an in-memory Ray cluster (`FakeJobs`, a `JobsClient`) and a RayExecutor over it,
  so that the executor's own tests need no Ray (pytest runs with --import-mode=importlib, so helpers come as
  fixtures, never by import).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from pathlib import Path

import pytest

from nodus.errors import TemporaryError
from nodus.reconciler.executors.ray import RayExecutor
from nodus.reconciler.executors.ray.jobs_client import RayJob, RayNode, Submission


class FakeJobs:
    """A Ray cluster in memory: jobs by submission id, their logs, its nodes. A reused submission id is answered
    as Ray answers it (an HTTP 500 RuntimeError, not a conflict); `fail_after_submit` makes the next submit raise
    after the job is recorded (an apply interrupted between Ray taking the job and the answer)."""

    def __init__(self) -> None:
        self.jobs: dict[str, RayJob] = {}
        self.submissions: list[Submission] = []
        self.job_logs: dict[str, str] = {}
        self.stopped: list[str] = []
        self.cluster_nodes: list[RayNode] = [RayNode("head", True, {"CPU": 2.0})]
        self.fail_after_submit = False

    def submit(self, submission: Submission) -> None:
        if submission.submission_id in self.jobs:
            raise RuntimeError("Request failed with status code 500: Job with submission_id already exists.")
        self.submissions.append(submission)
        self.jobs[submission.submission_id] = RayJob(
            submission.submission_id, "PENDING", "Job has not started yet.", dict(submission.metadata)
        )
        self.job_logs[submission.submission_id] = ""
        if self.fail_after_submit:
            self.fail_after_submit = False
            raise TemporaryError("Ray at http://127.0.0.1:8265: the connection was reset after the job was recorded")

    def info(self, submission_id: str) -> RayJob | None:
        return self.jobs.get(submission_id)

    def list(self) -> Sequence[RayJob]:
        return list(self.jobs.values())

    def stop(self, submission_id: str) -> None:
        self.stopped.append(submission_id)
        self.set_status(submission_id, "STOPPED", "Job was intentionally stopped.")

    def logs(self, submission_id: str) -> str:
        return self.job_logs[submission_id]

    def nodes(self) -> Sequence[RayNode]:
        return list(self.cluster_nodes)

    # --- what a test does to the cluster ---------------------------------------------------------------

    def set_status(self, submission_id: str, status: str, message: str | None = None) -> None:
        self.jobs[submission_id] = dataclasses.replace(self.jobs[submission_id], status=status, message=message)

    def write_log(self, submission_id: str, text: str) -> None:
        self.job_logs[submission_id] += text


@pytest.fixture
def fake_jobs() -> FakeJobs:
    return FakeJobs()


@pytest.fixture
def ray_executor(fake_jobs: FakeJobs, tmp_path: Path) -> RayExecutor:
    # A known owner id, so the tests can name submission ids (a project's state makes a random one once).
    (tmp_path / "jobs").mkdir()
    (tmp_path / "jobs" / "ray-owner.json").write_text('{"owner": "0a1b2c3d"}\n')
    return RayExecutor(fake_jobs, tmp_path / "jobs", python="/opt/node/bin/python")
