"""A real Ray cluster started by `nodus cluster`'s library (the `ray_cluster` fixture): its nodes, a job placed by
GPU type, and token auth; what its nodes inherit. The teardown of the fixture checks `down` leaves no process of ours."""

from __future__ import annotations

import os
import sys
import time
import urllib.error
import urllib.request
from pathlib import Path

import pytest
from click.testing import CliRunner

from nodus.cli.main import cli
from nodus.reconciler.executors.ray.cluster import GPU_TYPE_LABEL, dashboard_nodes, gpu_type_resource
from nodus.testing.ray_cluster import RayTestCluster

pytestmark = [pytest.mark.ray, pytest.mark.slow]

# A task asking for one H100 (the worker has two: the entrypoint holds the other), started by the job's entrypoint: it prints the node it ran on.
WHERE_AM_I = """
import ray
ray.init()
@ray.remote(num_cpus=0, resources={"nodus.dev/gpu-type/H100": 1})
def node():
    return ray.get_runtime_context().get_node_id()
print("NODE", ray.get(node.remote()))
"""


def test_status_lists_the_head_and_two_workers_alive(ray_cluster: RayTestCluster) -> None:
    result = CliRunner().invoke(cli, ["cluster", "status", "--dir", str(ray_cluster.folder)])
    assert result.exit_code == 0, result.output
    rows = [row.split() for row in result.output.splitlines()[1:4]]
    assert [row[0] for row in rows] == ["head", "worker-1", "worker-2"]
    assert [row[2] for row in rows] == ["yes", "yes", "yes"]
    assert "nodus.dev/gpu-type/H100=2" in rows[1][3] and "nodus.dev/gpu-type/A10G=1" in rows[2][3]
    assert f"Dashboard: {ray_cluster.dashboard_url}" in result.output
    with ray_cluster.inside():
        listed = dashboard_nodes(ray_cluster.dashboard_url, ray_cluster.token)
    assert sorted(n["state"] for n in listed) == ["ALIVE"] * 3
    labels = sorted(n["labels"].get(GPU_TYPE_LABEL, "-") for n in listed)
    assert labels == ["-", "A10G", "H100"]


def test_a_job_asking_for_a_gpu_type_runs_on_the_worker_that_has_it(ray_cluster: RayTestCluster) -> None:
    from ray.job_submission import JobStatus, JobSubmissionClient

    with ray_cluster.inside():
        client = JobSubmissionClient(ray_cluster.dashboard_url, headers=ray_cluster.headers())
        nodes = {
            n["labels"].get(GPU_TYPE_LABEL): n["node_id"]
            for n in dashboard_nodes(ray_cluster.dashboard_url, ray_cluster.token)
        }
        job = client.submit_job(
            entrypoint=f"{sys.executable} -c '{WHERE_AM_I}'",
            entrypoint_resources={gpu_type_resource("H100"): 1},
        )
        deadline = time.monotonic() + 120
        while (state := client.get_job_status(job)) not in {JobStatus.SUCCEEDED, JobStatus.FAILED, JobStatus.STOPPED}:
            assert time.monotonic() < deadline, f"job {job} still {state}"
            time.sleep(1)
        logs = client.get_job_logs(job)
        driver = client.get_job_info(job).driver_node_id
    assert state == JobStatus.SUCCEEDED, logs
    (printed,) = [line for line in logs.splitlines() if line.startswith("NODE ")]
    assert printed.split()[1] == nodes["H100"]  # the task
    assert driver == nodes["H100"]  # the entrypoint itself (entrypoint_resources)


def test_a_client_without_the_token_is_refused(ray_cluster: RayTestCluster) -> None:
    with ray_cluster.inside():
        with pytest.raises(urllib.error.HTTPError) as refused:
            urllib.request.urlopen(f"{ray_cluster.dashboard_url}/api/jobs/", timeout=10)
        assert refused.value.code == 401
        with pytest.raises(urllib.error.HTTPError) as wrong:
            dashboard_nodes(ray_cluster.dashboard_url, "0" * 64)
        assert wrong.value.code == 403
        assert len(dashboard_nodes(ray_cluster.dashboard_url, ray_cluster.token)) == 3


def test_a_node_holds_the_base_environment_not_the_whole_environment_of_the_process_that_started_it(
    ray_cluster: RayTestCluster,
) -> None:
    # The root conftest sets NODUS_RUNNER_UID in every test process, so the one that ran `up` had it; no node needs it.
    assert "NODUS_RUNNER_UID" in os.environ
    seen = 0
    for node in ray_cluster.record.nodes:
        for pid in [node.pid, *descendants(node.pid)]:
            try:
                raw = Path(f"/proc/{pid}/environ").read_bytes()
            except (FileNotFoundError, ProcessLookupError):
                continue  # ended since the tree was read
            names = {entry.partition(b"=")[0].decode() for entry in raw.split(b"\0") if entry}
            assert "NODUS_RUNNER_UID" not in names and "RAY_AUTH_TOKEN" not in names, (node.role, pid, sorted(names))
            seen += 1
    assert seen >= 6  # each node's ray start and what it forked (gcs, raylet, agents, workers)


def descendants(pid: int) -> list[int]:
    parents: dict[int, int] = {}
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                parents[int(entry.name)] = int((entry / "stat").read_text().rpartition(")")[2].split()[1])
            except (OSError, IndexError, ValueError):
                continue
    found, frontier = [], [pid]
    while frontier:
        parent = frontier.pop()
        children = [child for child, ppid in parents.items() if ppid == parent]
        found += children
        frontier += children
    return found
