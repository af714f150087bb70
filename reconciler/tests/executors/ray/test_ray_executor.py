"""RayExecutor against an in-memory Ray cluster (conftest's FakeJobs): idempotent launches, placement and
Unschedulable, observe of every Ray status with and without the node session's markers, stops and recovery."""

from __future__ import annotations

import dataclasses
import json

import pytest

from nodus.errors import ConfigError, TemporaryError
from nodus.reconciler.executors import GpuResources, Resources, Workload, WorkloadKey
from nodus.reconciler.executors.ray import RayExecutor
from nodus.reconciler.executors.ray.jobs_client import RayNode
from nodus.reconciler.executors.ray.placement import GPU_TYPE_LABEL, GPU_TYPE_RESOURCE
from nodus.reconciler.executors.ray.status_stream import marker
from nodus.specs.status_names import Reason

PROJECT, NAME = "proj", "tj-1"
FIRST = "nodus_0a1b2c3d_proj_tj-1-g1-a1"


def workload(generation: int = 1, attempt: int = 1, gpu: GpuResources | None = None) -> Workload:
    return Workload(
        key=WorkloadKey(project=PROJECT, name=NAME, kind="Job"),
        generation=generation,
        attempt=attempt,
        command=("python", "-c", "print('hi')"),
        resources=Resources(gpu=gpu) if gpu is not None else None,
        max_cost_usd="1.00",
    )


# --- launch is idempotent ------------------------------------------------------------------------------------


def test_launch_twice_submits_once(ray_executor: RayExecutor, fake_jobs) -> None:
    ray_executor.launch(workload())
    ray_executor.launch(workload())
    assert [s.submission_id for s in fake_jobs.submissions] == [FIRST]
    (submission,) = fake_jobs.submissions
    assert submission.entrypoint == "/opt/node/bin/python -m nodus.reconciler.executors.ray.node_main"
    assert Workload.from_json(submission.env_vars["NODUS_WORKLOAD"]) == workload()
    assert submission.env_vars["NODUS_RUN"] == "launch"
    assert submission.num_cpus == 1  # a CPU for the session: never on a head without CPUs


def test_an_interrupted_launch_then_another_submits_once(ray_executor: RayExecutor, fake_jobs) -> None:
    fake_jobs.fail_after_submit = True
    with pytest.raises(TemporaryError, match="connection was reset"):
        ray_executor.launch(workload())
    ray_executor.launch(workload())  # Ray has it: looked up, not submitted again (Ray would answer HTTP 500)
    assert [s.submission_id for s in fake_jobs.submissions] == [FIRST]


def test_another_project_state_on_the_same_cluster_never_takes_this_one_s_runs(
    ray_executor: RayExecutor, fake_jobs, tmp_path
) -> None:
    # Two checkouts whose projects are both `proj` (or one whose .nodus/ was deleted): the same job name, one
    # cluster. Each state has its own owner id, made once and kept, so each submits and sees only its own run.
    ray_executor.launch(workload())
    other = RayExecutor(fake_jobs, tmp_path / "other-jobs", python="/opt/node/bin/python")
    assert not other.exists(PROJECT, NAME)
    other.launch(workload())
    assert len(fake_jobs.submissions) == 2 and fake_jobs.submissions[1].submission_id != FIRST
    assert RayExecutor(fake_jobs, tmp_path / "other-jobs").owner == other.owner  # kept in its jobs folder


def test_launch_of_an_earlier_attempt_submits_nothing(ray_executor: RayExecutor, fake_jobs) -> None:
    ray_executor.launch(workload(attempt=2))
    ray_executor.launch(workload(attempt=1))
    ray_executor.launch(workload(attempt=2))
    assert [s.submission_id for s in fake_jobs.submissions] == ["nodus_0a1b2c3d_proj_tj-1-g1-a2"]


def test_a_new_generation_waits_for_the_one_that_runs(ray_executor: RayExecutor, fake_jobs) -> None:
    ray_executor.launch(workload())
    fake_jobs.set_status(FIRST, "RUNNING")
    with pytest.raises(TemporaryError, match="still runs generation 1 attempt 1"):
        ray_executor.launch(workload(generation=2))
    fake_jobs.set_status(FIRST, "SUCCEEDED")
    ray_executor.launch(workload(generation=2))
    assert [s.submission_id for s in fake_jobs.submissions] == [FIRST, "nodus_0a1b2c3d_proj_tj-1-g2-a1"]
    assert ray_executor.earlier_generations(PROJECT, NAME) == [1]


# --- placement ---------------------------------------------------------------------------------------------


def test_a_job_that_fits_no_node_is_pending_unschedulable_with_the_offers_tried(
    ray_executor: RayExecutor, fake_jobs
) -> None:
    fake_jobs.cluster_nodes.append(RayNode("w1", True, {"CPU": 4.0, GPU_TYPE_RESOURCE + "l4-24g": 1.0}))
    fake_jobs.cluster_nodes.append(RayNode("w2", False, {"CPU": 4.0, GPU_TYPE_RESOURCE + "rtx4090-24g": 2.0}))
    wanted = workload(gpu=GpuResources(types=("rtx4090-24g", "l4-24g"), count=2))
    ray_executor.launch(wanted)
    assert fake_jobs.submissions == []
    seen = ray_executor.observe(PROJECT, NAME)
    assert (seen.phase, seen.reason, seen.lost) == ("Pending", Reason.UNSCHEDULABLE, False)
    assert seen.message == (
        "no Ray node fits: rtx4090-24g x2: no node has it; l4-24g x2: no node has 2 (at most 1 on one node)"
    )
    assert ray_executor.exists(PROJECT, NAME) and not ray_executor.is_alive(PROJECT, NAME)
    assert ray_executor.spec_of(PROJECT, NAME) == wanted

    # The next reconcile's launch tries again: a node with the type has joined.
    fake_jobs.cluster_nodes.append(RayNode("w3", True, {"CPU": 4.0, "GPU": 2.0}, {GPU_TYPE_LABEL: "l4-24g"}))
    ray_executor.launch(wanted)
    (submission,) = fake_jobs.submissions
    assert (submission.num_gpus, dict(submission.label_selector)) == (2, {GPU_TYPE_LABEL: "l4-24g"})
    assert ray_executor.observe(PROJECT, NAME).reason == Reason.LAUNCHED
    assert ray_executor.capabilities.gpu_types == ("l4-24g",)


def test_cpu_and_memory_per_node_are_reserved_on_a_node_big_enough_beside_its_gpus(
    ray_executor: RayExecutor, fake_jobs
) -> None:
    gib = 2**30
    fake_jobs.cluster_nodes.append(
        RayNode("small", True, {"CPU": 2.0, "memory": 8 * gib, GPU_TYPE_RESOURCE + "l4-24g": 1.0})
    )
    sized = Resources(gpu=GpuResources(types=("l4-24g",)), cpu=8, memoryBytes=32 * gib)
    ray_executor.launch(workload().with_changes(resources=sized))
    assert fake_jobs.submissions == []
    assert ray_executor.observe(PROJECT, NAME).message == (
        "no Ray node fits: l4-24g x1: no node that has it has 8 CPUs and 32Gi memory "
        "(at most 2 CPUs and 8Gi memory on one node)"
    )
    fake_jobs.cluster_nodes.append(
        RayNode("big", True, {"CPU": 16.0, "memory": 64 * gib, GPU_TYPE_RESOURCE + "l4-24g": 1.0})
    )
    ray_executor.launch(workload().with_changes(resources=sized))
    (submission,) = fake_jobs.submissions
    assert (submission.num_cpus, submission.memory_bytes) == (8.0, 32 * gib)
    assert dict(submission.resources) == {GPU_TYPE_RESOURCE + "l4-24g": 1.0}


def test_a_cpu_job_bigger_than_every_node_is_unschedulable_with_the_largest(
    ray_executor: RayExecutor, fake_jobs
) -> None:
    ray_executor.launch(workload().with_changes(resources=Resources(cpu=64)))
    assert ray_executor.observe(PROJECT, NAME).message == (
        "no Ray node fits: 64 CPUs: no node has that (at most 2 CPUs and 0Gi memory on one node)"
    )
    ray_executor.launch(workload())  # asked again for one CPU (the default): placed, Ray queues it if it must
    (submission,) = fake_jobs.submissions
    assert (submission.num_cpus, submission.memory_bytes) == (1.0, None)


def test_the_first_gpu_type_some_node_offers_is_reserved_as_its_resource(ray_executor: RayExecutor, fake_jobs) -> None:
    fake_jobs.cluster_nodes.append(RayNode("w1", True, {"CPU": 4.0, GPU_TYPE_RESOURCE + "l4-24g": 1.0}))
    ray_executor.launch(workload(gpu=GpuResources(types=("h100-80g", "l4-24g"))))
    (submission,) = fake_jobs.submissions
    assert dict(submission.resources) == {GPU_TYPE_RESOURCE + "l4-24g": 1.0}
    assert submission.num_gpus is None  # the node has no real GPU for Ray to hand out


# --- observe -----------------------------------------------------------------------------------------------


def status(phase: str, **fields: object) -> dict[str, object]:
    return {"phase": phase, "generation": 1, "attempt": 1, "costUSD": "0.01", "maxCostUSD": "1.00", **fields}


def test_observe_follows_rays_status_and_the_markers(ray_executor: RayExecutor, fake_jobs) -> None:
    ray_executor.launch(workload())
    seen = ray_executor.observe(PROJECT, NAME)
    assert (seen.phase, seen.reason, seen.lost) == ("Pending", Reason.LAUNCHED, False)
    assert seen.message == f"Ray job {FIRST} is PENDING"

    fake_jobs.set_status(FIRST, "RUNNING")
    assert ray_executor.observe(PROJECT, NAME).phase == "Pending"  # no marker yet: the session is starting
    fake_jobs.write_log(FIRST, "step 1\n" + marker("status", status("Running", step=3, totalSteps=10)))
    fake_jobs.write_log(FIRST, marker("event", {"type": "TrainerStarted", "at": 1.0}) + "step 2\n")
    seen = ray_executor.observe(PROJECT, NAME)
    assert (seen.phase, seen.step, seen.total_steps, seen.cost_usd) == ("Running", 3, 10, "0.01")
    assert [event["type"] for event in seen.events] == ["TrainerStarted"]
    assert ray_executor.is_alive(PROJECT, NAME)
    assert ray_executor.logs(PROJECT, NAME).read() == b"step 1\nstep 2\n"

    manifest = {"files": {"adapter.bin": {"sha256": "ab" * 32, "size": 3}}, "skipped": []}
    fake_jobs.write_log(FIRST, marker("outputs", manifest) + marker("final", status("Succeeded")))
    fake_jobs.set_status(FIRST, "SUCCEEDED")
    seen = ray_executor.observe(PROJECT, NAME)
    assert (seen.phase, seen.lost, seen.ended) == ("Succeeded", False, True)
    outputs = ray_executor.outputs(PROJECT, NAME)
    assert outputs is not None and outputs.to_json() == manifest["files"]
    with pytest.raises(ConfigError, match=r"come back only through executor\.ray\.registry"):
        ray_executor.open_output(PROJECT, NAME, "adapter.bin")


def test_a_final_failed_marker_is_failed_not_lost(ray_executor: RayExecutor, fake_jobs) -> None:
    ray_executor.launch(workload())
    final = status("Failed", reason="TrainerFailed", message="the trainer exited with status 3")
    fake_jobs.write_log(FIRST, marker("final", final))
    fake_jobs.set_status(FIRST, "FAILED", "Job entrypoint command failed with exit code 1")
    seen = ray_executor.observe(PROJECT, NAME)
    assert (seen.phase, seen.reason, seen.lost) == ("Failed", "TrainerFailed", False)
    assert ray_executor.outputs(PROJECT, NAME) is None


@pytest.mark.parametrize("ray_status", ["FAILED", "STOPPED", "SUCCEEDED"])
def test_a_ray_job_ended_without_a_final_marker_is_lost_and_restarts_as_the_next_attempt(
    ray_executor: RayExecutor, fake_jobs, ray_status: str
) -> None:
    ray_executor.launch(workload())
    fake_jobs.write_log(FIRST, marker("status", status("Running", step=5)) + '::nodus-status::{"pha')
    fake_jobs.set_status(FIRST, ray_status, "Job supervisor actor died: the node was lost")
    seen = ray_executor.observe(PROJECT, NAME)
    assert (seen.phase, seen.lost, seen.step) == ("Running", True, 5)
    assert "the node was lost" in str(seen.message)
    assert not ray_executor.is_alive(PROJECT, NAME)

    ray_executor.restart(PROJECT, NAME)
    ray_executor.restart(PROJECT, NAME)  # not lost any more: nothing twice
    assert [s.submission_id for s in fake_jobs.submissions] == [FIRST, "nodus_0a1b2c3d_proj_tj-1-g1-a2"]
    assert ray_executor.spec_of(PROJECT, NAME).attempt == 2
    seen = ray_executor.observe(PROJECT, NAME)
    assert (seen.phase, seen.attempt, seen.lost) == ("Pending", 2, False)


def test_abandon_records_the_controllers_reason(ray_executor: RayExecutor, fake_jobs) -> None:
    ray_executor.launch(workload())
    fake_jobs.set_status(FIRST, "FAILED", "node died")
    ray_executor.abandon(PROJECT, NAME, "SupervisorLost", "the session was lost 1 time (recovery.maxAttempts 1)")
    seen = ray_executor.observe(PROJECT, NAME)
    assert (seen.phase, seen.reason, seen.lost) == ("Failed", "SupervisorLost", False)


def test_cancel_and_suspend_stop_the_ray_job(ray_executor: RayExecutor, fake_jobs) -> None:
    ray_executor.launch(workload())
    fake_jobs.set_status(FIRST, "RUNNING")
    fake_jobs.write_log(FIRST, marker("status", status("Running", costUSD="0.10")))
    ray_executor.suspend(PROJECT, NAME)
    assert fake_jobs.stopped == [FIRST]
    seen = ray_executor.observe(PROJECT, NAME)
    assert (seen.phase, seen.reason, seen.lost) == ("Suspended", Reason.SUSPEND_REQUESTED, False)
    ray_executor.suspend(PROJECT, NAME)  # suspended already: nothing
    assert fake_jobs.stopped == [FIRST]

    with pytest.raises(ConfigError, match="can only be raised"):
        ray_executor.resume(PROJECT, NAME, "0.50")
    ray_executor.resume(PROJECT, NAME, "2.00")
    (_, resumed) = fake_jobs.submissions
    assert resumed.submission_id == f"{FIRST}-r1" and resumed.env_vars["NODUS_RUN"] == "resume"
    assert Workload.from_json(resumed.env_vars["NODUS_WORKLOAD"]).max_cost_usd == "2.00"

    fake_jobs.set_status(resumed.submission_id, "RUNNING")
    ray_executor.cancel(PROJECT, NAME)
    assert fake_jobs.stopped == [FIRST, resumed.submission_id]
    # The node session suspends its supervisor on SIGTERM; the host's cancel wins over that final marker.
    fake_jobs.write_log(resumed.submission_id, marker("final", status("Suspended")))
    seen = ray_executor.observe(PROJECT, NAME)
    assert (seen.phase, seen.reason) == ("Cancelled", Reason.CANCEL_REQUESTED)
    ray_executor.cancel(PROJECT, NAME)  # over: nothing
    with pytest.raises(ConfigError, match="is Cancelled; only a Suspended job can be resumed"):
        ray_executor.resume(PROJECT, NAME)


def test_reads_of_a_job_ray_does_not_have_name_it(ray_executor: RayExecutor) -> None:
    assert not ray_executor.exists(PROJECT, NAME)
    for read in (ray_executor.observe, ray_executor.spec_of, ray_executor.is_alive, ray_executor.logs):
        with pytest.raises(ConfigError, match="there is no job proj/tj-1 on Ray"):
            read(PROJECT, NAME)
    assert ray_executor.earlier_generations(PROJECT, NAME) == []


def test_gradings_and_events_come_from_every_run_of_the_generation(ray_executor: RayExecutor, fake_jobs) -> None:
    ray_executor.launch(workload())
    fake_jobs.write_log(FIRST, marker("grading", {"request": 1, "passed": True}) + marker("final", status("Suspended")))
    fake_jobs.set_status(FIRST, "SUCCEEDED")
    ray_executor.resume(PROJECT, NAME)
    resumed = f"{FIRST}-r1"
    fake_jobs.write_log(resumed, marker("grading", {"request": 2, "passed": False}))
    fake_jobs.write_log(resumed, marker("event", {"type": "Resumed"}))
    gradings = ray_executor.gradings(PROJECT, NAME)
    assert [record["request"] for record in gradings.records] == [1, 2]
    assert resumed in gradings.where
    assert [event["type"] for event in ray_executor.events(PROJECT, NAME)] == ["Resumed"]
    with pytest.raises(ConfigError, match=r"has no generation 2 on Ray \(generations: 1\)"):
        ray_executor.outputs(PROJECT, NAME, generation=2)
    assert json.loads(fake_jobs.submissions[1].metadata["nodus.workload"])["key"]["name"] == NAME


def test_each_run_of_a_single_node_job_is_an_attempt_of_rank_0_on_its_node(
    ray_executor: RayExecutor, fake_jobs
) -> None:
    ray_executor.launch(workload())
    fake_jobs.jobs[FIRST] = dataclasses.replace(fake_jobs.jobs[FIRST], driver_node_id="node-a", start_time_ms=1000)
    fake_jobs.write_log(FIRST, marker("final", status("Suspended", costUSD="0.30")))
    fake_jobs.set_status(FIRST, "SUCCEEDED")
    ray_executor.resume(PROJECT, NAME)
    resumed = f"{FIRST}-r1"
    fake_jobs.jobs[resumed] = dataclasses.replace(fake_jobs.jobs[resumed], driver_node_id="node-b", start_time_ms=9000)
    fake_jobs.write_log(resumed, marker("status", status("Running", costUSD="0.45")))
    fake_jobs.set_status(resumed, "RUNNING")
    rows = ray_executor.observe(PROJECT, NAME).raw["attempts"]
    assert rows == [
        {
            "rank": 0,
            "attempt": 1,
            "run": 0,
            "node": "node-a",
            "startedAt": 1.0,
            "phase": "Suspended",
            "costUSD": "0.300000",
        },
        {
            "rank": 0,
            "attempt": 1,
            "run": 1,
            "node": "node-b",
            "startedAt": 9.0,
            "phase": "Running",
            "costUSD": "0.150000",
        },
    ]


def test_every_submission_names_itself_and_a_registry_channel_travels_without_credentials(
    fake_jobs, tmp_path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from nodus.reconciler.executors.ray.channel import RegistryChannel
    from nodus.reconciler.project import Project

    monkeypatch.setenv("NODUS_REGISTRY_USERNAME", "robot")
    monkeypatch.setenv("NODUS_REGISTRY_PASSWORD", "s3cret")
    (tmp_path / "jobs").mkdir()
    (tmp_path / "jobs" / "ray-owner.json").write_text('{"owner": "0a1b2c3d"}\n')
    (tmp_path / "nodus.lock").write_text("lockfileVersion: 1\n")
    channel = RegistryChannel.parse("registry.internal:5000/nodus/ray", insecure=True)
    executor = RayExecutor(fake_jobs, tmp_path / "jobs", channel=channel, project=Project.find(tmp_path))
    executor.launch(workload())  # names no input: nothing is pushed
    (submission,) = fake_jobs.submissions
    assert submission.env_vars["NODUS_SUBMISSION_ID"] == FIRST
    assert submission.env_vars["NODUS_CHANNEL_REGISTRY"] == "registry.internal:5000/nodus/ray"
    assert submission.env_vars["NODUS_CHANNEL_INSECURE"] == "1" and "NODUS_INPUTS" not in submission.env_vars
    assert "s3cret" not in json.dumps(dict(submission.env_vars)) + json.dumps(dict(submission.metadata))
    with pytest.raises(ValueError, match="give the project"):
        RayExecutor(fake_jobs, tmp_path / "jobs", channel=channel)
