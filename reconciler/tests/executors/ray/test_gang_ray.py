"""Gangs on a real Ray cluster (the `ray_cluster` fixture: a head with no CPUs, two workers with one CPU each):
a 2-node Plain Job prints every rank's variables, and a 3-node gang fails with GangAssemblyTimeout, holding no
placement group after (after its retries); a gang is billed for every member, suspended at its cap with every member
released, and resumed from its cost so far. Driven through the RayExecutor."""

from __future__ import annotations

import json
import sys
import time
import urllib.request
from decimal import Decimal
from pathlib import Path
from typing import Any

import pytest

from nodus.reconciler.executors.ray import RayExecutor
from nodus.reconciler.executors.ray.jobs_client import RayJobsClient
from nodus.reconciler.executors.workload import Intervals, Resources, Workload, WorkloadKey
from nodus.specs.status_names import Phase, Reason
from nodus.testing.ray_cluster import RayTestCluster

pytestmark = [pytest.mark.ray, pytest.mark.slow]

PRINT_RANK = (
    "import os; print('RANK-ENV', os.environ['NODUS_NODE_RANK'], os.environ['NNODES'], os.environ['MASTER_ADDR'])"
)


def gang(name: str, nodes: int, timeout_s: float, retries: int = 2) -> Workload:
    return Workload(
        key=WorkloadKey(project="default", name=name, kind="Job"),
        command=(sys.executable, "-c", PRINT_RANK),
        resources=Resources(nodes=nodes, startupTimeoutS=timeout_s, maxAssemblyRetries=retries),
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

        executor.launch(gang("trio", 3, 15, retries=1))
        phase, reason, logs = wait_ended(executor, "trio")
        assert (phase, reason) == (Phase.FAILED, Reason.GANG_ASSEMBLY_TIMEOUT), logs
        message = executor.observe("default", "trio").message or ""
        assert "startupTimeout 15s" in message and "(try 2 of 2); every member released" in message, message
        assert logs.count("[gang] assembly failed: ") == 2, logs
        held = [group for group in placement_groups(ray_cluster) if group.get("state") != "REMOVED"]
        assert held == []


SLEEPER = "import time; print('up', flush=True); time.sleep(600)"


def test_a_gang_is_billed_for_every_member_suspended_at_its_cap_and_resumed_with_its_cost(
    ray_cluster: RayTestCluster, tmp_path: Path
) -> None:
    with ray_cluster.inside():
        executor = RayExecutor(RayJobsClient(ray_cluster.dashboard_url, ray_cluster.token), tmp_path)
        # $36 an hour a node, two nodes: $0.02 a second; accounted every second, capped at $0.40.
        executor.launch(
            Workload(
                key=WorkloadKey(project="default", name="meter", kind="Job"),
                command=(sys.executable, "-c", SLEEPER),
                resources=Resources(nodes=2, startupTimeoutS=60),
                pricePerHourUSD="36",
                maxCostUSD="0.40",
                intervals=Intervals(accountingS=1),
            )
        )
        deadline = time.monotonic() + 120
        running: list[Any] = []
        while not (seen := executor.observe("default", "meter")).ended and seen.phase != Phase.SUSPENDED:
            assert time.monotonic() < deadline, f"still {seen.phase}: {seen.message}"
            if seen.phase == Phase.RUNNING:
                running.append(seen)
            time.sleep(0.5)
        assert (seen.phase, seen.reason) == (Phase.SUSPENDED, Reason.MAX_COST_REACHED), seen.message
        # Stopped before an interval ($0.02) would pass the cap; the members are billed until they are released,
        # so the recorded cost is within one interval of the cap either side (the seeds' rule).
        assert Decimal("0.38") <= Decimal(seen.cost_usd or "0") <= Decimal("0.42"), seen.cost_usd
        assert running and running[-1].raw["topology"] == {"nodes": 2, "gpusPerNode": 0, "totalGPUs": 0}
        assert len(running[-1].raw["gang"]["members"]) == 2
        held = [group for group in placement_groups(ray_cluster) if group.get("state") != "REMOVED"]
        assert held == []

        executor.resume("default", "meter", "0.60")
        deadline = time.monotonic() + 120
        while (again := executor.observe("default", "meter")).phase != Phase.SUSPENDED or again.raw.get(
            "raySubmissionId"
        ) == seen.raw.get("raySubmissionId"):
            assert not again.ended and time.monotonic() < deadline, f"{again.phase}: {again.message}"
            time.sleep(0.5)
        assert again.reason == Reason.MAX_COST_REACHED, again.message
        # The resumed run started from the first one's cost, so it stopped at the raised cap, not at $0.20 more.
        assert Decimal("0.58") <= Decimal(again.cost_usd or "0") <= Decimal("0.62"), again.cost_usd


def test_a_cancelled_gang_stops_every_rank_and_holds_nothing(ray_cluster: RayTestCluster, tmp_path: Path) -> None:
    marker = f"nodus-gang-cancel-{time.time_ns()}"  # in the ranks' command line, to find their processes
    with ray_cluster.inside():
        executor = RayExecutor(RayJobsClient(ray_cluster.dashboard_url, ray_cluster.token), tmp_path)
        executor.launch(
            Workload(
                key=WorkloadKey(project="default", name="halt", kind="Job"),
                command=(sys.executable, "-c", SLEEPER, marker),
                resources=Resources(nodes=2, startupTimeoutS=60),
            )
        )
        deadline = time.monotonic() + 120
        # Both ranks up here, and seen Running through the Ray job's log (which comes a little later).
        while len(ranks_running(marker)) < 2 or executor.observe("default", "halt").phase != Phase.RUNNING:
            assert time.monotonic() < deadline, executor.observe("default", "halt").message
            time.sleep(0.5)
        executor.cancel("default", "halt")
        deadline = time.monotonic() + 90
        while not (seen := executor.observe("default", "halt")).ended:
            assert time.monotonic() < deadline, f"still {seen.phase}"
            time.sleep(0.5)
        assert (seen.phase, seen.reason) == (Phase.CANCELLED, Reason.CANCEL_REQUESTED)
        deadline = time.monotonic() + 30
        while ranks_running(marker):  # the ranks' process trees end with the stop, not later
            assert time.monotonic() < deadline, ranks_running(marker)
            time.sleep(0.5)
        held = [group for group in placement_groups(ray_cluster) if group.get("state") != "REMOVED"]
        assert held == []


def ranks_running(marker: str) -> list[int]:
    """The pids of this host's processes whose command line holds `marker`."""
    found = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                if marker.encode() in (entry / "cmdline").read_bytes():
                    found.append(int(entry.name))
            except OSError:
                continue
    return found
