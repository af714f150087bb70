"""Gangs on the Ray executor without Ray: the placement group's name and bundles, each rank's variables, and what
the executor submits for a gang (a coordinator reserving nothing, told its run and its members' placement), the
gang's checkpoint folder and restore point, and a member's command (output by offset, a stop that ends its whole
process tree) run here as its actor would run it."""

from __future__ import annotations

import json
import os
import sys
import threading
import time
from pathlib import Path

from nodus.reconciler.controllers.trainingjob import resources_of
from nodus.reconciler.executors.ray import RayExecutor, gang, gang_checkpoints
from nodus.reconciler.executors.ray.gang_member import GangMember
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
    sized = Placement(num_cpus=4.0, memory_bytes=2**30)
    assert gang.bundles(gang_workload(2), sized) == [{"CPU": 4.0, "memory": float(2**30)}] * 2


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


def test_a_rank_gets_its_epoch_transport_and_checkpoint_places() -> None:
    first = gang.rank_env(gang_workload(2, "Torchrun"), 1, ["10.0.0.1", "10.0.0.2"], checkpoint_uri="file:///c")
    assert (first["NODUS_GANG_EPOCH"], first["NODUS_GANG_TRANSPORT"]) == ("1", "private")
    assert first["NODUS_CHECKPOINT_URI"] == "file:///c" and "NODUS_RESTORE_URI" not in first
    later = gang.rank_env(
        gang_workload(2, "Torchrun"), 1, ["10.0.0.1", "10.0.0.2"], epoch=3, restore_uri="file:///c/step-000020"
    )
    assert (later["NODUS_GANG_EPOCH"], later["NODUS_RESTORE_URI"]) == ("3", "file:///c/step-000020")
    assert later["PET_RDZV_ID"] != first["PET_RDZV_ID"]  # a torchrun of an old epoch is another rendezvous


def test_each_assembly_try_after_the_first_has_a_group_name_of_its_own() -> None:
    assert gang.placement_group_name(RUN, 1) == RUN + "-gang"
    assert gang.placement_group_name(RUN, 2) == RUN + "-gang-t2" != gang.placement_group_name(RUN, 3)


def test_the_restore_point_is_the_checkpoint_committed_last_and_an_interrupted_one_is_passed_over(
    tmp_path: Path,
) -> None:
    assert gang_checkpoints.latest_committed(tmp_path / "none yet") is None
    for name, marker, when in (("step-05", "COMMITTED", 100), ("step-10", ".metadata", 200), ("step-15", None, 300)):
        (tmp_path / name).mkdir()
        if marker is not None:
            (tmp_path / name / marker).touch()
            os.utime(tmp_path / name / marker, (when, when))
    assert gang_checkpoints.latest_committed(tmp_path) == tmp_path / "step-10"
    folder = gang_checkpoints.folder(tmp_path, "default", "pair")
    assert folder == tmp_path / "default" / "pair" / "gang" / "checkpoints"
    assert gang_checkpoints.uri(folder) == "file://" + str(folder)


def test_the_recovery_and_assembly_bounds_reach_the_workload() -> None:
    spec = {
        "distributed": {"nodes": 2, "maxAssemblyRetries": 0, "startupTimeout": "5m"},
        "recovery": {"maxAttempts": 1},
    }
    resources = resources_of(spec)
    assert resources is not None
    assert (resources.nodes, resources.max_assembly_retries, resources.max_restarts) == (2, 0, 1)
    assert resources.startup_timeout_s == 300
    defaults = resources_of({"distributed": {"nodes": 2}})
    assert defaults is not None and (defaults.max_assembly_retries, defaults.max_restarts) == (2, 3)


def test_a_member_streams_its_output_and_its_stop_ends_the_whole_process_tree(tmp_path: Path) -> None:
    member = GangMember()
    script = (
        "import subprocess, sys, time; "
        f"child = subprocess.Popen(['sleep', '300']); open({str(tmp_path / 'child')!r}, 'w').write(str(child.pid)); "
        "print('started', flush=True); time.sleep(300)"
    )
    done: list[int] = []
    thread = threading.Thread(target=lambda: done.append(member.run([sys.executable, "-c", script], {}, None)))
    thread.start()
    deadline = time.monotonic() + 30
    while b"started" not in member.output(0) or not (tmp_path / "child").exists():
        assert time.monotonic() < deadline and thread.is_alive(), member.output(0)
        time.sleep(0.05)
    assert member.output(len(b"started\n")) == b""
    child = int((tmp_path / "child").read_text())
    member.stop()
    thread.join(timeout=30)
    assert done and done[0] != 0
    deadline = time.monotonic() + 10
    while Path(f"/proc/{child}").exists() and "Z" not in Path(f"/proc/{child}/stat").read_text().split()[2]:
        assert time.monotonic() < deadline, "the rank's grandchild outlived the stop"
        time.sleep(0.05)


def test_a_member_finds_this_pythons_scripts_and_says_when_a_command_cannot_start() -> None:
    member = GangMember()
    assert member.run(["sh", "-c", 'echo "$PATH"; echo "$RANK_SEEN"'], {"RANK_SEEN": "1"}, None) == 0
    path, seen = member.output(0).decode().splitlines()
    assert path.split(os.pathsep)[0] == str(Path(sys.executable).parent) and seen == "1"
    missing = GangMember()
    assert missing.run(["no-such-program-here"], {}, None) == 127
    assert missing.output(0).decode().startswith("no-such-program-here: ")
