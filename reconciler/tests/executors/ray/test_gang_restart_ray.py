"""A gang that loses a member restarts at the next epoch from its latest checkpoint (issue 15's third acceptance
point), on a Ray cluster of its own: a head with no CPUs and three one-CPU workers of made-up GPU types (so each
node is known by its resources), in a network namespace of its own, with token auth, stopped by pid.

A 2-node Plain gang with `recovery.maxAttempts` 1 counts steps and has rank 0 commit a checkpoint every 5. Killing
every process of the worker that runs rank 1 (its `ray start`, raylet and the member's command: what a lost
machine loses) stops the epoch on both ranks and restarts the gang at epoch 2 on the spare worker, every rank
resuming from the latest committed step. Killing rank 1's node again spends the one restart: the run fails with
`NodeLost` and the first loss's message, holding no placement group.
"""

from __future__ import annotations

import re
import sys
import time
from collections.abc import Iterator
from decimal import Decimal
from pathlib import Path

import pytest

from nodus.reconciler.controllers.attempts import attempts_of
from nodus.reconciler.executors.ray import RayExecutor, cluster, netns
from nodus.reconciler.executors.ray.jobs_client import RayJobsClient
from nodus.reconciler.executors.workload import Resources, Workload, WorkloadKey
from nodus.specs.status_names import Phase, Reason
from nodus.testing.ray_cluster import GANG_OF_TWO_ASSEMBLED, kill_node, spare_worker_cluster

pytestmark = [pytest.mark.ray, pytest.mark.slow]

COUNTER = """
import json, os, pathlib, time
rank, epoch = int(os.environ["NODUS_NODE_RANK"]), os.environ["NODUS_GANG_EPOCH"]
root = pathlib.Path(os.environ["NODUS_CHECKPOINT_URI"].removeprefix("file://"))
restore = os.environ.get("NODUS_RESTORE_URI")
step = json.loads((pathlib.Path(restore.removeprefix("file://")) / "progress.json").read_text())["step"] if restore else 0
print(f"epoch {epoch} rank {rank} starts at step {step}", flush=True)
while step < 100000:
    time.sleep(0.2)
    step += 1
    if rank == 0 and step % 5 == 0:
        folder = root / f"step-{step:06d}"
        folder.mkdir(parents=True, exist_ok=True)
        (folder / "progress.json").write_text(json.dumps({"step": step}))
        (folder / "COMMITTED").touch()
        print(f"committed step {step}", flush=True)
"""
ASSEMBLED = GANG_OF_TWO_ASSEMBLED


@pytest.fixture
def three_workers(tmp_path: Path) -> Iterator[cluster.ClusterRecord]:
    with spare_worker_cluster(tmp_path / "cluster") as record:
        yield record


def logs_until(
    executor: RayExecutor, pattern: str, after: int = 0, timeout_s: float = 180
) -> tuple[re.Match[str], str]:
    """The first match of `pattern` in the run's log from offset `after` on, and the whole log."""
    deadline = time.monotonic() + timeout_s
    while True:
        runs = executor._runs("default", "phoenix")
        text = executor.jobs.logs(runs[-1].submission_id) if runs else ""
        found = re.compile(pattern, re.MULTILINE).search(text, after)
        if found is not None:
            return found, text
        assert time.monotonic() < deadline, f"no {pattern!r} in the log:\n{text}"
        time.sleep(1)


def test_a_lost_member_restarts_the_gang_at_the_next_epoch_then_spent_restarts_fail_it(
    three_workers: cluster.ClusterRecord, tmp_path: Path
) -> None:
    record = three_workers
    with netns.entered(record.netns):
        executor = RayExecutor(
            RayJobsClient(record.dashboard_url, record.token()), tmp_path / "jobs", node_jobs=str(tmp_path / "node")
        )
        executor.launch(
            Workload(
                key=WorkloadKey(project="default", name="phoenix", kind="Job"),
                command=(sys.executable, "-c", COUNTER),
                resources=Resources(nodes=2, startupTimeoutS=120, maxRestarts=1, maxAssemblyRetries=0),
            )
        )
        first, _ = logs_until(executor, ASSEMBLED.pattern)
        logs_until(executor, r"^\[rank 0\] committed step 10$")
        killed = kill_node(record, first.group(3))

        lost, _ = logs_until(executor, r"^\[gang\] epoch 1 stopped on every rank: rank 1 lost at epoch 1 .*$")
        second, _ = logs_until(executor, ASSEMBLED.pattern, after=lost.end())
        assert second.group(1) == "2"
        resumed, text = logs_until(executor, r"^\[rank 1\] epoch 2 rank 1 starts at step (\d+)$", after=second.end())
        assert int(resumed.group(1)) >= 10, text
        assert re.search(rf"^\[rank 0\] epoch 2 rank 0 starts at step {resumed.group(1)}$", text, re.MULTILINE), text
        assert second.group(2) == first.group(2), text  # the survivor's machine is kept
        assert second.group(3) != first.group(3), text  # the lost rank got another one
        logs_until(executor, rf"^\[rank 0\] committed step {int(resumed.group(1)) + 5}$", after=resumed.end())
        again = kill_node(record, second.group(3))

        deadline = time.monotonic() + 180
        while not (seen := executor.observe("default", "phoenix")).ended:
            assert time.monotonic() < deadline, f"still {seen.phase}"
            time.sleep(1)
        assert (seen.phase, seen.reason) == (Phase.FAILED, Reason.NODE_LOST), seen.message
        assert seen.message.startswith("rank 1 lost at epoch 1 on node "), seen.message
        assert seen.message.endswith("; 1 restart spent (recovery.maxAttempts 1)"), seen.message
        assert killed != again

    # Each rank's attempts across the restart, with where each ran, how it ended, its boot or restore and its cost.
    rows = {(row["rank"], row["epoch"]): row for row in attempts_of(seen.raw)}
    assert sorted(rows) == [(0, 1), (0, 2), (1, 1), (1, 2)], rows
    assert [rows[1, epoch]["reason"] for epoch in (1, 2)] == [Reason.NODE_LOST, Reason.NODE_LOST]
    assert [rows[0, epoch]["phase"] for epoch in (1, 2)] == [Phase.CANCELLED, Phase.CANCELLED]
    assert rows[1, 1]["node"].startswith(first.group(3)) and rows[1, 2]["node"].startswith(second.group(3))
    assert rows[0, 1]["node"] == rows[0, 2]["node"]  # the survivor's machine, kept
    assert [rows[rank, epoch]["start"] for rank, epoch in sorted(rows)] == ["Boot", "Restore", "Boot", "Restore"]
    assert rows[1, 2]["restoreFrom"].startswith("file://") and "step-" in rows[1, 2]["restoreFrom"]
    for row in rows.values():
        assert row["readySeconds"] > 0 and Decimal(row["costUSD"]) >= 0 and row["endedAt"] >= row["readyAt"], row
