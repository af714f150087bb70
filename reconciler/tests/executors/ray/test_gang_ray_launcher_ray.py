"""The `Ray` launcher on a real Ray cluster (the `ray_cluster` fixture: a head with no CPUs, two one-CPU workers):
a 2-node Job whose command joins the gang's inner Ray cluster with a bare `ray.init()` sees both inner nodes alive
and `RAY_ADDRESS`, runs on rank 0 only, and leaves no process of the inner cluster and no temp folder behind
(driven through the RayExecutor, as test_gang_ray.py is); and a member's `stop` (SIGTERM to its process group)
while the command runs ends the inner node by pid just the same (the member run here, as its actor runs it)."""

from __future__ import annotations

import re
import sys
import threading
import time
from pathlib import Path

import pytest

from nodus.reconciler.executors.ray import RayExecutor, gang, launchers
from nodus.reconciler.executors.ray.gang_member import GangMember
from nodus.reconciler.executors.ray.jobs_client import RayJobsClient
from nodus.reconciler.executors.workload import Resources, Workload, WorkloadKey
from nodus.specs.status_names import Phase, Reason
from nodus.testing.ray_cluster import RayTestCluster

pytestmark = [pytest.mark.ray, pytest.mark.slow]

COUNT_NODES = (
    "import os, pathlib, ray; ray.init(); "
    "print('INNER-NODES', sum(1 for n in ray.nodes() if n['Alive']), os.environ['RAY_ADDRESS'], "
    "os.environ['NODUS_NODE_RANK']); "
    # The inner nodes' processes name their temp folders: what the test looks for after the run is really there.
    "print('INNER-PROCESSES', sum(1 for p in pathlib.Path('/proc').glob('[0-9]*/cmdline') "
    "if b'nodus-rayl-' in p.read_bytes()))"
)
STARTED = re.compile(
    r"\[rank (\d)\] \[ray launcher\] inner (?:head|node) starting: ray start pid (\d+), temp dir (\S+)"
)


def commands_naming(text: str) -> list[tuple[int, str]]:
    """Every live process whose command line names `text` (the inner nodes' Ray processes name their temp dir)."""
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            command = (entry / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
        except OSError:
            continue
        if text in command:
            found.append((int(entry.name), command[:120]))
    return found


def test_a_ray_launcher_gang_runs_the_command_on_rank_0_of_its_own_ray_cluster(
    ray_cluster: RayTestCluster, tmp_path: Path
) -> None:
    with ray_cluster.inside():
        executor = RayExecutor(RayJobsClient(ray_cluster.dashboard_url, ray_cluster.token), tmp_path)
        executor.launch(
            Workload(
                key=WorkloadKey(project="default", name="inner", kind="Job"),
                command=(sys.executable, "-c", COUNT_NODES),
                resources=Resources(nodes=2, launcher="Ray", startupTimeoutS=180),
            )
        )
        deadline = time.monotonic() + 420
        while not (seen := executor.observe("default", "inner")).ended:
            assert time.monotonic() < deadline, f"inner still {seen.phase}"
            time.sleep(1)
        logs = executor.jobs.logs(executor._runs("default", "inner")[-1].submission_id)
    assert (seen.phase, seen.reason) == (Phase.SUCCEEDED, Reason.TRAINER_SUCCEEDED), logs
    printed = [line.split() for line in logs.splitlines() if "INNER-NODES" in line]
    assert printed == [["[rank", "0]", "INNER-NODES", "2", "127.0.0.1:29501", "0"]], logs
    (processes,) = [int(line.split()[-1]) for line in logs.splitlines() if "INNER-PROCESSES" in line]
    assert processes >= 6, logs  # each node's ray start, gcs or raylet, agents, workers
    started = {int(rank): (int(pid), folder) for rank, pid, folder in STARTED.findall(logs)}
    assert sorted(started) == [0, 1], logs
    for pid, folder in started.values():
        assert not Path(folder).exists(), logs
        assert commands_naming(folder) == [], logs
        assert pid not in [found for found, _ in commands_naming("ray")], logs


def test_a_stopped_ray_launcher_rank_ends_its_inner_node_by_pid(ray_cluster: RayTestCluster) -> None:
    job = Workload(
        key=WorkloadKey(project="default", name="stopped", kind="Job"),
        command=(sys.executable, "-c", "import time; print('COMMAND-UP', flush=True); time.sleep(300)"),
        resources=Resources(nodes=1, launcher="Ray", startupTimeoutS=120),
    )
    env = gang.rank_env(job, 0, ["127.0.0.1"])
    env.update(RAY_AUTH_MODE="token", RAY_AUTH_TOKEN_PATH=ray_cluster.record.token_file)
    member = GangMember()
    status: list[int] = []

    def run() -> None:
        with ray_cluster.inside():  # this thread starts the node program: it runs in the cluster's namespace
            status.append(member.run(launchers.member_command(job, 0, env), env, None))

    runner = threading.Thread(target=run)
    runner.start()
    deadline = time.monotonic() + 180
    while b"COMMAND-UP" not in member.output(0):
        assert runner.is_alive() and time.monotonic() < deadline, member.output(0).decode()
        time.sleep(0.5)
    member.stop()
    runner.join(timeout=60)
    logs = member.output(0).decode()
    assert status == [143], logs
    assert "[ray launcher] stopped" in logs
    ((pid, folder),) = [(int(pid), folder) for _, pid, folder in STARTED.findall("[rank 0] " + logs)]
    assert f"inner node stopped (ray start pid {pid}); removed {folder}" in logs
    assert not Path(folder).exists()
    assert commands_naming(folder) == []
