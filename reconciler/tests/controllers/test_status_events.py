"""Events are recorded once per change, whichever command looks at a job and however often.

A finished job's folder is written by hand (spec.json and a status.json with the stage reports a supervisor
leaves), so no process runs: `refresh` (what `get`, `describe`, `wait` and `nodus controller` call) copies it in,
and `write_status` with a status built the way an apply pass builds it (without the events watermark) stands in
for `nodus apply`. Before the watermark was `write_status`'s own, each apply dropped it and the next look added
every stage again (6, then 7, then 8 `stage Baseline` events).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from nodus.reconciler.controllers.status import write_status
from nodus.reconciler.executors.local.job import JobFiles, JobSpec, write_json
from nodus.reconciler.project import Project
from nodus.reconciler.refresh import refresh
from nodus.reconciler.state.records import Launch, ResourceKey, StateStore

KEY = ResourceKey("TrainingJob", "default", "quickstart")
DOCUMENT = {
    "apiVersion": "nodus.dev/v1beta1",
    "kind": "TrainingJob",
    "metadata": {"name": "quickstart", "namespace": "default"},
    "spec": {"runtime": "nodus/grpo-lora", "parameters": {"steps": 2}},
}
STAGES = ("Baseline", "Training", "Training", "Evaluating", "Exporting")


def reports(start: float, generation: int = 1) -> list[dict[str, Any]]:
    """The events a supervisor leaves in status.json: its own, then one per progress report of the trainer."""
    events: list[dict[str, Any]] = [{"at": start, "type": "Launched", "generation": generation, "phase": "Pending"}]
    events += [{"at": start + 1 + i, "type": "Progress", "stage": stage} for i, stage in enumerate(STAGES)]
    events.append({"at": start + 10, "type": "TrainerSucceeded", "phase": "Succeeded"})
    return events


def finish_job(project: Project, generation: int, start: float) -> None:
    files = JobFiles.of(project.jobs, KEY.project, KEY.name)
    spec = JobSpec(name=KEY.name, project=KEY.project, command=("true",), generation=generation)
    write_json(files.spec, spec.to_json())
    status = {"phase": "Succeeded", "reason": "TrainerSucceeded", "generation": generation, "attempt": 1}
    write_json(files.status, {**status, "stage": "Exporting", "events": reports(start, generation)})


@pytest.fixture
def project(tmp_path: Path) -> Project:
    (tmp_path / "nodus.lock").write_text("")
    return Project.find(tmp_path)


@pytest.fixture
def store(project: Project) -> Any:
    opened = project.open_state()
    opened.put(KEY, DOCUMENT)
    opened.record_launch(Launch("TrainingJob/default/quickstart/gen1/attempt1", KEY, job=KEY.name))
    try:
        yield opened
    finally:
        opened.close()


def stage_events(store: StateStore) -> list[str]:
    return [event.message for event in store.events(KEY, limit=1000) if event.reason == "Stage"]


def apply_pass(store: StateStore) -> None:
    """What an apply pass writes for a launched job: the job's status and the controller's own fields, no
    watermark (`reconcile_trainingjob` never knew of it)."""
    record = store.get(KEY)
    assert record is not None
    generation = record.status.get("launchGeneration", 1)
    status = {"phase": "Succeeded", "reason": "TrainerSucceeded", "stage": "Exporting", "launchGeneration": generation}
    write_status(store, record, {**status, "price": {"perHourUSD": "0"}, "attempt": 1})


def test_applies_and_looks_in_any_order_record_each_stage_once(project: Project, store: StateStore) -> None:
    finish_job(project, 1, start=1000.0)
    refresh(project, store)
    once = ["stage Baseline", "stage Training", "stage Evaluating", "stage Exporting"]
    assert stage_events(store) == once
    for _ in range(3):
        apply_pass(store)
        refresh(project, store)
        refresh(project, store)
    assert stage_events(store) == once
    record = store.get(KEY)
    assert record is not None and record.status["eventsSeenAt"] == 1010.0 and record.status["stageSeen"] == "Exporting"


def test_a_look_from_a_stale_record_adds_nothing_twice(project: Project, store: StateStore) -> None:
    """Two commands that read the record before either wrote (`nodus get` beside `nodus controller`)."""
    finish_job(project, 1, start=1000.0)
    stale = store.get(KEY)
    assert stale is not None
    events = reports(1000.0)
    assert write_status(store, stale, {"phase": "Succeeded"}, events)
    assert not write_status(store, stale, {"phase": "Succeeded"}, events)  # the store has it all already
    assert stage_events(store) == ["stage Baseline", "stage Training", "stage Evaluating", "stage Exporting"]
    succeeded = [event for event in store.events(KEY) if event.reason == "Succeeded"]
    assert len(succeeded) == 1 and succeeded[0].count == 1


def test_a_replacement_records_its_own_stages_and_none_of_the_earlier_generation(
    project: Project, store: StateStore
) -> None:
    finish_job(project, 1, start=1000.0)
    refresh(project, store)
    # A replace writes a fresh status; until generation 2 launches, the folder still holds generation 1.
    store.put(KEY, {**DOCUMENT, "spec": {**DOCUMENT["spec"], "parameters": {"steps": 3}}})
    store.set_status(KEY, {"phase": "Pending", "reason": "Replaced", "launchGeneration": 2})
    store.record_launch(Launch("TrainingJob/default/quickstart/gen2/attempt1", KEY, job=KEY.name))
    refresh(project, store)
    assert stage_events(store).count("stage Baseline") == 1
    finish_job(project, 2, start=2000.0)
    refresh(project, store)
    apply_pass(store)
    refresh(project, store)
    assert stage_events(store) == ["stage Baseline", "stage Training", "stage Evaluating", "stage Exporting"] * 2
