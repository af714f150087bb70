"""Issue 15's acceptance point "20 applies interrupted at random points submit each job once", against the
in-memory Ray cluster (conftest's FakeJobs), no Ray.

Each apply is a fresh RayExecutor over the same jobs folder (a new `nodus apply` process after the one before
was killed), launching one workload. The cluster is made to fail at calls chosen by a seeded RNG: before a
submit reaches Ray, after Ray recorded it (the answer lost), and during the lookups (list, info, logs, nodes).
Each interrupted apply is run again until one returns; every (generation, attempt) must then be submitted
exactly once. A lost run restarted the same way submits exactly one more attempt.
"""

from __future__ import annotations

import random
from collections import Counter
from collections.abc import Sequence
from pathlib import Path

import pytest

from nodus.reconciler.executors import Workload, WorkloadKey
from nodus.reconciler.executors.ray import RayExecutor
from nodus.reconciler.executors.ray.jobs_client import RayJob, RayNode, Submission

PROJECT, NAME = "proj", "tj-1"
APPLIES = 20
TRIES = 50  # far more than any seed needs; a loop that never ends is a failure, not a hang


class ApplyKilledError(Exception):
    """The apply died here (a kill, a dropped connection): nothing after this point of it ran."""


def interrupting(base: type) -> object:
    """A FakeJobs (its class given as `base`, a fixture's type) that an apply dies in at its call number
    `interrupt_at` (counted from 0 by `calls`): a submit dies before Ray takes it or after Ray recorded it,
    every read before it answers."""

    class InterruptedJobs(base):  # type: ignore[misc, valid-type]
        interrupt_at: int | None = None

        def _maybe(self, where: str) -> None:
            if self.interrupt_at is None:
                return
            self.calls += 1
            if self.calls - 1 == self.interrupt_at:
                self.interruptions[where] += 1
                raise ApplyKilledError(where)

        def submit(self, submission: Submission) -> None:
            self._maybe("before submit")
            super().submit(submission)
            self._maybe("after Ray recorded the submit")

        def info(self, submission_id: str) -> RayJob | None:
            self._maybe("info")
            return super().info(submission_id)  # type: ignore[no-any-return]

        def list(self) -> Sequence[RayJob]:
            self._maybe("list")
            return super().list()  # type: ignore[no-any-return]

        def logs(self, submission_id: str) -> str:
            self._maybe("logs")
            return super().logs(submission_id)  # type: ignore[no-any-return]

        def nodes(self) -> Sequence[RayNode]:
            self._maybe("nodes")
            return super().nodes()  # type: ignore[no-any-return]

    jobs = InterruptedJobs()
    jobs.interruptions = Counter()
    jobs.calls = 0
    return jobs


def workload(generation: int, attempt: int = 1) -> Workload:
    return Workload(
        key=WorkloadKey(project=PROJECT, name=NAME, kind="Job"),
        generation=generation,
        attempt=attempt,
        command=("python", "-c", "print('step 1', flush=True)"),
        max_cost_usd="1.00",
    )


def until_it_returns(rng: random.Random, jobs_root: Path, jobs: object, act: str, *args: object) -> int:
    """Run `act` of a new RayExecutor (a new process each time), each try killed at a random call to Ray (or at
    none, when the number drawn is past its last call), until one returns; the number of interrupted tries."""
    for tries in range(TRIES):
        jobs.calls = 0  # type: ignore[attr-defined]
        jobs.interrupt_at = rng.randrange(2 * len(jobs.jobs) + 6)  # type: ignore[attr-defined]
        try:
            executor = RayExecutor(jobs, jobs_root, python="/opt/node/bin/python")  # type: ignore[arg-type]
            getattr(executor, act)(*args)
        except ApplyKilledError:
            continue
        finally:
            jobs.interrupt_at = None  # type: ignore[attr-defined]
        return tries
    raise AssertionError(f"{act}{args} was interrupted {TRIES} times in a row")


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_twenty_interrupted_applies_submit_each_run_once_and_a_restart_one_more(
    fake_jobs: object, tmp_path: Path, seed: int
) -> None:
    rng = random.Random(seed)
    jobs = interrupting(type(fake_jobs))
    jobs_root = tmp_path / "jobs"
    jobs_root.mkdir()
    (jobs_root / "ray-owner.json").write_text('{"owner": "0a1b2c3d"}\n')
    prefix = "nodus_0a1b2c3d_proj_tj-1"

    # 20 applies of the job: each a new generation once the one before ended, each interrupted at random.
    interrupted = 0
    for generation in range(1, APPLIES + 1):
        interrupted += until_it_returns(rng, jobs_root, jobs, "launch", workload(generation))
        interrupted += until_it_returns(rng, jobs_root, jobs, "launch", workload(generation))  # applied once more
        jobs.set_status(f"{prefix}-g{generation}-a1", "SUCCEEDED")  # type: ignore[attr-defined]

    submitted = Counter(s.submission_id for s in jobs.submissions)  # type: ignore[attr-defined]
    assert submitted == Counter(f"{prefix}-g{g}-a1" for g in range(1, APPLIES + 1))
    # The seed really interrupted the applies, at every kind of point (so this test tests something).
    assert interrupted > APPLIES
    assert set(jobs.interruptions) >= {"before submit", "after Ray recorded the submit", "list", "info"}  # type: ignore[attr-defined]

    # The latest run is lost (Ray ended it, no final marker): restarts, interrupted at random, add one attempt.
    jobs.set_status(f"{prefix}-g{APPLIES}-a1", "FAILED", "Job supervisor actor died: the node was lost")  # type: ignore[attr-defined]
    until_it_returns(rng, jobs_root, jobs, "restart", PROJECT, NAME)
    until_it_returns(rng, jobs_root, jobs, "restart", PROJECT, NAME)  # not lost any more: nothing twice
    until_it_returns(rng, jobs_root, jobs, "launch", workload(APPLIES, attempt=2))  # the controller's next apply
    submitted = Counter(s.submission_id for s in jobs.submissions)  # type: ignore[attr-defined]
    assert len(jobs.submissions) == APPLIES + 1  # type: ignore[attr-defined]
    assert submitted[f"{prefix}-g{APPLIES}-a2"] == 1
    seen = RayExecutor(jobs, jobs_root).observe(PROJECT, NAME)  # type: ignore[arg-type]
    assert (seen.generation, seen.attempt, seen.lost) == (APPLIES, 2, False)
