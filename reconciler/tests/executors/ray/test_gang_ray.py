"""Gangs on a real Ray cluster (the `ray_cluster` fixture: a head with no CPUs, two workers with one CPU each):
a 2-node Plain Job prints every rank's variables, and a 3-node gang fails with GangAssemblyTimeout, holding no
placement group after. Driven through the RayExecutor (the Job controller does not pass `distributed` yet)."""

from __future__ import annotations

import json
import sys
import time
import urllib.request
from pathlib import Path
from typing import Any

import pytest

from nodus.reconciler.executors.ray import RayExecutor
from nodus.reconciler.executors.ray.jobs_client import RayJobsClient
from nodus.reconciler.executors.workload import Resources, Workload, WorkloadKey
from nodus.specs.status_names import Phase, Reason
from nodus.testing.ray_cluster import RayTestCluster

pytestmark = [pytest.mark.ray, pytest.mark.slow]

PRINT_RANK = (
    "import os; print('RANK-ENV', os.environ['NODUS_NODE_RANK'], os.environ['NNODES'], os.environ['MASTER_ADDR'])"
)


def gang(name: str, nodes: int, timeout_s: float) -> Workload:
    return Workload(
        key=WorkloadKey(project="default", name=name, kind="Job"),
        command=(sys.executable, "-c", PRINT_RANK),
        resources=Resources(nodes=nodes, startupTimeoutS=timeout_s),
    )


def placement_groups(cluster: RayTestCluster) -> list[dict[str, Any]]:
    """The cluster's placement groups, as Ray's state API lists them (removed ones included)."""
    request = urllib.request.Request(f"{cluster.dashboard_url}/api/v0/placement_groups", headers=cluster.headers())
    with urllib.request.urlopen(request, timeout=30) as answer:
        listed = json.load(answer)["data"]["result"]["result"]
    return [group for group in listed if str(group.get("name", "")).endswith("-gang")]


def wait_ended(executor: RayExecutor, name: str) -> tuple[str, str, str]:
    deadline = time.monotonic() + 180
    while not (seen := executor.observe("default", name)).ended:
        assert time.monotonic() < deadline, f"{name} still {seen.phase}"
        time.sleep(1)
    return str(seen.phase), str(seen.reason), executor.jobs.logs(executor._runs("default", name)[-1].submission_id)


def test_a_two_node_gang_runs_every_rank_and_a_three_node_one_times_out(
    ray_cluster: RayTestCluster, tmp_path: Path
) -> None:
    with ray_cluster.inside():
        executor = RayExecutor(RayJobsClient(ray_cluster.dashboard_url, ray_cluster.token), tmp_path)
        executor.launch(gang("pair", 2, 60))
        phase, reason, logs = wait_ended(executor, "pair")
        assert (phase, reason) == (Phase.SUCCEEDED, Reason.TRAINER_SUCCEEDED), logs
        lines = sorted(line for line in logs.splitlines() if "RANK-ENV" in line)
        assert [line.split()[:5] for line in lines] == [
            ["[rank", "0]", "RANK-ENV", "0", "2"],
            ["[rank", "1]", "RANK-ENV", "1", "2"],
        ], logs
        assert len({line.split()[-1] for line in lines}) == 1  # one MASTER_ADDR for both

        executor.launch(gang("trio", 3, 20))
        phase, reason, logs = wait_ended(executor, "trio")
        assert (phase, reason) == (Phase.FAILED, Reason.GANG_ASSEMBLY_TIMEOUT), logs
        assert "startupTimeout 20s" in executor.observe("default", "trio").message
        held = [group for group in placement_groups(ray_cluster) if group.get("state") != "REMOVED"]
        assert held == []
