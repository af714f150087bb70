"""Gangs on the Ray executor without Ray: the placement group's name and bundles, each rank's variables, and what
the executor submits for a gang (a coordinator reserving nothing, told its run and its members' placement)."""

from __future__ import annotations

import json

from nodus.reconciler.executors.ray import RayExecutor, gang
from nodus.reconciler.executors.ray.jobs_client import RayNode
from nodus.reconciler.executors.ray.placement import GPU_TYPE_RESOURCE, Placement
from nodus.reconciler.executors.workload import GpuResources, Resources, Workload, WorkloadKey

RUN = "nodus_0a1b2c3d_default_pair-g1-a1"


def gang_workload(nodes: int = 2, launcher: str = "Plain", gpu: GpuResources | None = None) -> Workload:
    return Workload(
        key=WorkloadKey(project="default", name="pair", kind="Job"),
        command=("python", "-c", "print('hi')"),
        resources=Resources(gpu=gpu, nodes=nodes, launcher=launcher, startupTimeoutS=20),
    )


def test_the_placement_group_name_is_the_runs_so_a_repeated_launch_finds_it() -> None:
    assert gang.placement_group_name(RUN) == gang.placement_group_name(RUN) == RUN + "-gang"
    assert gang.placement_group_name(RUN + "-r1") != gang.placement_group_name(RUN)


def test_one_bundle_per_node_each_with_the_gpu_type_resource() -> None:
    workload = gang_workload(3, gpu=GpuResources(types=("H100",), count=2))
    placement = Placement("H100", 2, {GPU_TYPE_RESOURCE + "H100": 2.0})
    assert gang.bundles(workload, placement) == [{"CPU": 1.0, GPU_TYPE_RESOURCE + "H100": 2.0, "GPU": 2.0}] * 3
    assert gang.bundles(gang_workload(2), Placement()) == [{"CPU": 1.0}, {"CPU": 1.0}]


def test_each_rank_gets_the_seeds_variables() -> None:
    workload = gang_workload(2, gpu=GpuResources(types=("H100",), count=8))
    env = gang.rank_env(workload, 1, ["10.0.0.1", "10.0.0.2"])
    assert env["NODUS_NODE_RANK"] == env["NODE_RANK"] == "1"
    assert env["NODUS_NUM_NODES"] == env["NNODES"] == "2"
    assert env["NODUS_GPUS_PER_NODE"] == "8"
    assert env["NODUS_NODE_IPS"] == "10.0.0.1,10.0.0.2"
    assert (env["MASTER_ADDR"], env["MASTER_PORT"], env["NODUS_GANG_EPOCH"]) == ("10.0.0.1", "29500", "1")
    assert (env["RANK"], env["LOCAL_RANK"], env["LOCAL_WORLD_SIZE"], env["WORLD_SIZE"]) == ("1", "0", "1", "2")
    assert not any(name.startswith("PET_") for name in env)


def test_a_torchrun_rank_gets_the_pet_variables_and_no_restarts() -> None:
    env = gang.rank_env(gang_workload(2, "Torchrun"), 0, ["10.0.0.1", "10.0.0.2"])
    assert env["PET_NNODES"] == "2"
    assert env["PET_NODE_RANK"] == "0"
    assert env["PET_NPROC_PER_NODE"] == "1"  # no GPUs: one process per node
    assert (env["PET_MASTER_ADDR"], env["PET_MASTER_PORT"]) == ("10.0.0.1", "29500")
    assert env["PET_MAX_RESTARTS"] == "0"
    assert "RANK" not in env  # torchrun assigns its own


def test_a_gang_is_submitted_as_a_coordinator_that_reserves_nothing(ray_executor: RayExecutor, fake_jobs) -> None:
    fake_jobs.cluster_nodes.append(RayNode("w1", True, {"CPU": 1.0, GPU_TYPE_RESOURCE + "H100": 2.0}))
    ray_executor.launch(gang_workload(2, gpu=GpuResources(types=("H100",), count=1)))
    ray_executor.launch(gang_workload(2, gpu=GpuResources(types=("H100",), count=1)))
    (submitted,) = fake_jobs.submissions
    assert submitted.submission_id == RUN
    assert (submitted.num_cpus, submitted.num_gpus, dict(submitted.resources)) == (0.0, None, {})
    assert submitted.env_vars[gang.SUBMISSION_VARIABLE] == RUN
    members = gang.placement_from_json(submitted.env_vars[gang.PLACEMENT_VARIABLE])
    assert members == Placement("H100", None, {GPU_TYPE_RESOURCE + "H100": 1.0})
    assert json.loads(submitted.env_vars[gang.PLACEMENT_VARIABLE])["numCpus"] == 1.0
    assert ray_executor.capabilities.gangs
