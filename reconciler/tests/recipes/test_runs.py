"""The run handle (`nodus.recipes.runs`) on a job folder made by hand: graded tasks by phase and outcome, outputs
copied only when their sha256 matches, the watch's lines, and the status read with attributes."""

from __future__ import annotations

import io
import json
from pathlib import Path
from typing import Any

import pytest

from nodus.errors import ConfigError
from nodus.recipes import rl
from nodus.recipes.runs import Record
from nodus.reconciler.apply import holding_lease
from nodus.reconciler.executors.local.job import JobFiles, JobSpec, manifest_of, write_json
from nodus.reconciler.project import Project
from nodus.reconciler.state.records import Launch, ResourceKey

NAME = "reward-run"


@pytest.fixture
def run(tmp_path: Path) -> rl.Run:
    """A finished TrainingJob in the store and its job folder, written as the executor and supervisor do."""
    root = tmp_path / "project"
    root.mkdir()
    (root / "nodus.lock").write_text("")
    project = Project.find(root)
    store = project.open_state()
    key = ResourceKey("TrainingJob", "default", NAME)
    try:
        document = {
            "apiVersion": "nodus.dev/v1beta1",
            "kind": "TrainingJob",
            "metadata": {"name": NAME, "project": "default"},
            "spec": {"runtime": "nodus/grpo-lora"},
        }
        store.put(key, document)
        summary = {
            "baselinePassRate": 0.25,
            "finalPassRate": 0.5,
            "comparison": {"comparable": True, "changePoints": 25.0, "tasks": 16},
        }
        store.set_status(key, {"phase": "Succeeded", "reason": "TrainerSucceeded", "summary": summary, "step": 2})
    finally:
        store.close()
    folder = project.jobs / "default" / NAME
    (folder / "logs").mkdir(parents=True)
    verdicts = [
        ("t1", "Incorrect", 0.0, "Baseline"),
        ("t2", "Correct", 1.0, "Baseline"),
        ("t1", "Correct", 1.0, "Training"),
        ("t1", "InvalidOutput", 0.0, "Evaluation"),
        ("t2", "InfrastructureFailure", None, "Evaluation"),
        ("t3", "Incorrect", 0.0, "Evaluation"),
        ("t3", "Correct", 1.0, "Evaluation"),  # graded again (a resumed run): the last verdict counts
    ]
    lines = [{"taskId": t, "verdict": v, "reward": r, "phase": p, "evidence": {}} for t, v, r, p in verdicts]
    (folder / "logs" / "gradings.jsonl").write_text("".join(json.dumps(line) + "\n" for line in lines) + '{"taskId"')
    events: list[dict[str, Any]] = [
        {"type": "Launched"},
        {"type": "Progress", "stage": "Baseline"},
        {"type": "Progress", "stage": "Training", "step": 1, "totalSteps": 2, "metrics": {"reward": 0.5, "loss": 0.01}},
        {"type": "Progress", "stage": "Training", "step": 2, "totalSteps": 2, "metrics": {"reward": 0.75, "kl": 0.002}},
        {"type": "Progress", "stage": "Evaluating"},
    ]
    (folder / "logs" / "events.jsonl").write_text("".join(json.dumps(e) + "\n" for e in events))
    outputs = folder / "outputs"
    (outputs / "adapter").mkdir(parents=True)
    (outputs / "adapter" / "adapter_model.safetensors").write_bytes(b"\x00weights")
    (outputs / "results.json").write_text('{"finalPassRate": 0.5}')
    write_json(folder / "outputs.json", manifest_of(outputs))
    write_json(folder / "spec.json", JobSpec(name=NAME, project="default", command=("train",)).to_json())
    return rl.Run(NAME, "default", rl.Options(path=root))


def job_folder(run: rl.Run) -> JobFiles:
    """The run's folder in the local executor's layout (the handle itself reads it only through the executor)."""
    return JobFiles.of(run.options.project().jobs, "default", NAME)


def test_tasks_lists_the_last_verdict_of_each_task_in_each_phase(run: rl.Run) -> None:
    every = run.tasks()
    assert [(t.taskId, t.phase, t.outcome) for t in every] == [
        ("t1", "Baseline", "Failed"),
        ("t2", "Baseline", "Passed"),
        ("t1", "Training", "Passed"),
        ("t1", "Evaluation", "Failed"),
        ("t2", "Evaluation", "Unscored"),
        ("t3", "Evaluation", "Passed"),
    ]
    failed = run.tasks(phase="Evaluation", outcome="Failed")
    assert [(t.task_id, t.verdict, t.reward) for t in failed] == [("t1", "InvalidOutput", 0.0)]
    assert [t.taskId for t in run.tasks(phase="Evaluation", outcome="Unscored")] == ["t2"]
    assert [t.taskId for t in run.tasks(phase="Evaluation", outcome="Passed")] == ["t3"]
    assert [t.taskId for t in run.tasks(outcome="Passed")] == ["t2", "t1", "t3"]
    with pytest.raises(ConfigError, match="a phase is one of Baseline, Training, Evaluation"):
        run.tasks(phase="Final")
    with pytest.raises(ConfigError, match="Passed, Failed or Unscored"):
        run.tasks(outcome="Correct")


def test_download_copies_every_output_checked_against_its_sha256(run: rl.Run, tmp_path: Path) -> None:
    copied = run.outputs.download(tmp_path / "out")
    assert sorted(p.relative_to(tmp_path / "out").as_posix() for p in copied) == [
        "adapter/adapter_model.safetensors",
        "results.json",
    ]
    assert (tmp_path / "out" / "adapter" / "adapter_model.safetensors").read_bytes() == b"\x00weights"
    assert set(run.outputs.files()) == {"adapter/adapter_model.safetensors", "results.json"}


def test_a_changed_output_is_refused_and_nothing_is_copied(run: rl.Run, tmp_path: Path) -> None:
    (job_folder(run).outputs / "results.json").write_text('{"finalPassRate": 1.0}')
    with pytest.raises(ConfigError) as refused:
        run.outputs.download(tmp_path / "out")
    assert "outputs/results.json of TrainingJob/reward-run no longer matches the sha256" in refused.value.message
    assert not [p for p in (tmp_path / "out").rglob("*") if p.is_file()]


def test_a_run_without_outputs_says_so(run: rl.Run, tmp_path: Path) -> None:
    job_folder(run).outputs_manifest.unlink()
    with pytest.raises(ConfigError, match="has no outputs yet"):
        run.outputs.download(tmp_path / "out")


def test_watch_prints_each_stage_then_the_steps_until_the_end(run: rl.Run) -> None:
    out = io.StringIO()
    status = run.watch(out=out, poll=0.01)
    assert status.phase == "Succeeded"
    assert out.getvalue().splitlines() == [
        "stage Baseline",
        "stage Training",
        "step 1/2: reward 0.5, loss 0.01",
        "step 2/2: reward 0.75, kl 0.002",
        "stage Evaluating",
        "TrainingJob/reward-run: Succeeded (TrainerSucceeded); held-out pass rate 25% -> 50%, +25.0 points",
    ]


def test_wait_returns_the_status_read_with_attributes(run: rl.Run) -> None:
    status = run.wait(timeout=5)
    assert status.summary.comparison.change_points == 25.0
    assert status.summary.comparison["comparable"] is True
    assert status.phase == "Succeeded" and status.step == 2
    with pytest.raises(AttributeError, match="no field 'cost' here"):
        _ = status.cost


def test_records_read_nested_fields_in_either_case() -> None:
    record = Record({"totalSteps": 4, "items": [{"taskId": "t1"}]})
    assert record.total_steps == 4 and record.totalSteps == 4
    assert record["items"][0]["taskId"] == "t1"
    assert "total_steps" not in dir(record) and "totalSteps" in dir(record)


def test_a_run_that_is_not_in_the_store_is_one_line(tmp_path: Path) -> None:
    (tmp_path / "nodus.lock").write_text("")
    with pytest.raises(ConfigError, match="TrainingJob/ghost is not in the project's state store"):
        rl.Run("ghost", "default", rl.Options(path=tmp_path)).status()


def test_watch_ends_with_the_grading_failures_and_the_flat_reward_warning(run: rl.Run) -> None:
    store = run.options.project().open_state()
    try:
        record = store.get(run.key)
        assert record is not None
        failures = {"failed": 5, "gradings": 960, "phases": {"Training": {"failed": 5, "gradings": 960}}}
        signal = {"groups": 4, "flatGroups": 4, "warning": "every one of the 4 training groups got the same reward"}
        summary = {**record.status["summary"], "gradingFailures": failures}
        store.set_status(run.key, {**record.status, "summary": summary, "diagnostics": {"rewardSignal": signal}})
    finally:
        store.close()
    out = io.StringIO()
    run.watch(out=out, poll=0.01)
    assert out.getvalue().splitlines()[-2:] == [
        "warning: 5 of 960 training gradings failed (InfrastructureFailure): excluded from rewards; "
        "see nodus logs tj/reward-run",
        "warning: every one of the 4 training groups got the same reward",
    ]


def test_status_refreshes_only_under_the_lease(run: rl.Run) -> None:
    """The SDK refreshes only under the apply lease, as `nodus wait` does: with an apply holding it, `status()`
    reads what is stored and moves nothing beside the apply; once the lease is free, it refreshes."""
    project = run.options.project()
    key = ResourceKey("TrainingJob", "default", NAME)
    store = project.open_state()
    try:
        store.record_launch(Launch(f"TrainingJob/default/{NAME}/gen1/attempt1", key, job=NAME))
        store.set_status(key, {"phase": "Running", "reason": "TrainerStarted", "launchGeneration": 1, "step": 1})
        write_json(job_folder(run).status, {"phase": "Succeeded", "reason": "TrainerSucceeded", "step": 2})
        with holding_lease(store, "apply"):
            assert run.status().phase == "Running"
            assert store.get(key).status["phase"] == "Running"
        assert run.status().phase == "Succeeded"
    finally:
        store.close()
