"""The Executor protocol: the FakeExecutor and the LocalExecutor both satisfy it, the local one's reads (observe,
spec_of, logs, outputs, open_output, copy_outputs, events, gradings) on a real run of the echo trainer, the
project setting that picks the executor, and the import-linter contract's list of the modules it covers."""

from __future__ import annotations

import hashlib
import json
import sys
import tomllib
from pathlib import Path
from typing import Any

import pytest

from nodus.errors import ConfigError
from nodus.reconciler.controllers.trainingjob import executor
from nodus.reconciler.executors import (
    SUCCEEDED,
    Capabilities,
    Executor,
    JobSpec,
    LocalExecutor,
    LogReader,
    Workload,
    WorkloadKey,
    choose_executor,
    wait_for,
)
from nodus.reconciler.executors.local import gpus
from nodus.reconciler.executors.local.job import write_json
from nodus.reconciler.executors.protocol import HostGpus
from nodus.reconciler.project import Project
from nodus.testing.fake_executor import FakeExecutor

REPO = Path(__file__).resolve().parents[3]


def spec(generation: int = 1, attempt: int = 1, **fields: Any) -> Workload:
    key = WorkloadKey(project="default", name="run")
    return Workload(key=key, command=("train",), generation=generation, attempt=attempt, **fields)


# --- the fake ------------------------------------------------------------------------------------------


def test_both_executors_satisfy_the_protocol(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    fake = FakeExecutor()
    assert isinstance(fake, Executor) and isinstance(LocalExecutor(tmp_path), Executor)
    # This machine's GPUs, as declared here (the test does not depend on the host having any).
    gpus.host_gpus.cache_clear()
    monkeypatch.setenv(gpus.VARIABLE, "l4-24g")
    try:
        local = LocalExecutor(tmp_path).capabilities
    finally:
        gpus.host_gpus.cache_clear()
    host = HostGpus(("l4-24g",), "$NODUS_LOCAL_GPUS")
    assert local == Capabilities(gangs=False, gpu_types=("l4-24g",), services=True, host_gpus=host)
    fake.launch(spec())
    assert isinstance(fake.logs("default", "run"), LogReader)


def test_the_fake_launches_once_per_generation_and_attempt_and_records_every_call() -> None:
    fake = FakeExecutor()
    for _ in range(5):
        fake.launch(spec())
    assert fake.calls == [("launch", "default", "run", 1, 1)] * 5
    assert len(fake.jobs["default", "run"]) == 1
    seen = fake.observe("default", "run")
    assert (seen.phase, seen.reason, seen.generation, seen.attempt) == ("Pending", "Launched", 1, 1)
    assert seen.heartbeat_age_s is not None and seen.heartbeat_age_s < 60


def test_a_test_drives_phases_and_the_observation_is_typed() -> None:
    fake = FakeExecutor()
    fake.launch(spec(max_cost_usd="5"))
    fake.set_phase("default", "run", "Running", stage="Training", step=3, total_steps=10, cost_usd="0.25")
    seen = fake.observe("default", "run")
    assert (seen.phase, seen.stage, seen.step, seen.total_steps, seen.cost_usd) == (
        "Running",
        "Training",
        3,
        10,
        "0.25",
    )
    assert seen.max_cost_usd == "5" and not seen.ended and seen.raw["stage"] == "Training"
    assert [event["type"] for event in fake.events("default", "run")] == ["Launched", "Running"]
    fake.finish("default", "run", outputs={"results.json": b'{"ok": true}'})
    assert fake.observe("default", "run").ended
    listing = fake.outputs("default", "run")
    assert listing is not None
    assert listing.files["results.json"].sha256 == hashlib.sha256(b'{"ok": true}').hexdigest()
    assert fake.open_output("default", "run", "results.json").read() == b'{"ok": true}'


def test_the_fake_keeps_the_contracts_for_a_missing_job_and_a_job_that_is_over(tmp_path: Path) -> None:
    fake = FakeExecutor()
    assert not fake.exists("default", "run")
    for read in (fake.observe, fake.spec_of, fake.is_alive, fake.outputs, fake.gradings, fake.logs):
        with pytest.raises(ConfigError, match="no job default/run"):
            read("default", "run")
    fake.launch(spec())
    fake.finish("default", "run", "Failed")
    fake.cancel("default", "run")
    fake.suspend("default", "run")
    assert fake.observe("default", "run").phase == "Failed"  # nothing done to a job that is over
    assert fake.outputs("default", "run") is None
    with pytest.raises(ConfigError, match="no outputs yet"):
        fake.copy_outputs("default", "run", [("results.json", tmp_path / "r.json")], label="TrainingJob/run")


def test_a_lost_session_is_observed_and_restart_or_abandon_act_only_on_a_lost_job() -> None:
    fake = FakeExecutor()
    fake.launch(spec())
    fake.set_phase("default", "run", "Running")
    fake.restart("default", "run")  # alive: nothing to restart
    assert not fake.observe("default", "run").lost and fake.spec_of("default", "run").attempt == 1
    fake.lose("default", "run")
    assert not fake.is_alive("default", "run") and fake.observe("default", "run").lost
    fake.restart("default", "run")
    seen = fake.observe("default", "run")
    assert (seen.phase, seen.reason, seen.attempt, seen.lost) == ("Pending", "SupervisorLost", 2, False)
    fake.restart("default", "run")  # a second call finds it alive: no attempt 3
    assert fake.spec_of("default", "run").attempt == 2
    fake.lose("default", "run")
    fake.abandon("default", "run", "SupervisorLost", "given up")
    seen = fake.observe("default", "run")
    assert (seen.phase, seen.reason, seen.message, seen.lost) == ("Failed", "SupervisorLost", "given up", False)
    fake.restart("default", "run")  # over: nothing
    assert fake.observe("default", "run").phase == "Failed"


def test_a_new_generation_keeps_the_earlier_ones_readable_and_wait_for_observes() -> None:
    fake = FakeExecutor()
    fake.launch(spec())
    fake.finish("default", "run", outputs={"a": b"1"})
    fake.launch(spec(generation=2))
    assert fake.earlier_generations("default", "run") == [1]
    assert fake.outputs("default", "run") is None and fake.outputs("default", "run", 1) is not None
    assert fake.observe("default", "run", 1).phase == "Succeeded"
    with pytest.raises(ConfigError, match=r"no generation 7 \(generations: 1, 2\)"):
        fake.outputs("default", "run", 7)
    fake.finish("default", "run", "Cancelled", reason="CancelRequested")
    assert wait_for(fake, "default", "run", timeout_s=1).phase == "Cancelled"


# --- the local executor's reads on a real run --------------------------------------------------------------


def test_the_local_reads_of_a_finished_run(jobs: Any, tmp_path: Path) -> None:
    local: LocalExecutor = jobs.executor
    workload = jobs.spec(parameters={"steps": 2}, max_cost_usd="100")
    jobs.launch(workload)
    status = jobs.wait()
    assert status["phase"] == SUCCEEDED, status.get("message")
    seen = local.observe("proj", "tj")
    assert (seen.phase, seen.reason, seen.generation, seen.attempt) == (SUCCEEDED, "TrainerSucceeded", 1, 1)
    assert seen.step == 2 and seen.total_steps == 2 and seen.cost_usd == status["costUSD"]
    assert seen.heartbeat_age_s is not None and seen.heartbeat_age_s >= 0 and seen.summary is not None
    assert [dict(event) for event in seen.events] == status["events"] and seen.raw == status
    assert local.spec_of("proj", "tj") == workload  # exactly as launched (workload.json), not the resolved spec
    resolved = local.files("proj", "tj").read_spec()
    assert resolved.command[0] == sys.executable and workload.command[0] == "python"

    reader = local.logs("proj", "tj")
    text = reader.read()
    assert b"echo-trainer: step 0 done" in text and reader.read() == b"" and reader.ended()

    listing = local.outputs("proj", "tj")
    assert listing is not None and sorted(listing.files) == ["adapter/weights.bin", "results.json"]
    with local.open_output("proj", "tj", "results.json") as handle:
        data = handle.read()
    assert listing.files["results.json"].sha256 == hashlib.sha256(data).hexdigest()
    assert listing.files["results.json"].size == len(data) and json.loads(data)["steps"] == 2
    with pytest.raises(ConfigError, match=r"no output 'outputs/nothing\.bin'"):
        local.open_output("proj", "tj", "nothing.bin")

    done = local.copy_outputs("proj", "tj", [("results.json", tmp_path / "out" / "r.json")], label="TrainingJob/tj")
    assert done == [tmp_path / "out" / "r.json"] and done[0].read_bytes() == data
    with pytest.raises(ConfigError, match="no output 'outputs/gone'"):
        local.copy_outputs("proj", "tj", [("gone", tmp_path / "gone")], label="TrainingJob/tj")

    types = [event["type"] for event in local.events("proj", "tj")]
    assert types[0] == "Launched" and "TrainerStarted" in types and types[-1] == "TrainerSucceeded"
    gradings = local.gradings("proj", "tj")
    assert gradings.records and all("verdict" in record for record in gradings.records)
    assert gradings.where.endswith("gradings.jsonl")
    assert local.earlier_generations("proj", "tj") == []


def test_a_job_launched_before_workloads_reads_as_the_spec_it_was_given(tmp_path: Path) -> None:
    """A folder with only spec.json (a job a nodus before workloads launched) still answers spec_of."""
    local = LocalExecutor(tmp_path / "jobs")
    files = local.files("proj", "old")
    legacy = JobSpec(name="old", project="proj", command=("/usr/bin/python3", "t.py"), generation=2, max_cost_usd="3")
    write_json(files.spec, legacy.to_json())
    seen = local.spec_of("proj", "old")
    assert (seen.key.name, seen.generation, seen.max_cost_usd, seen.command) == ("old", 2, "3", legacy.command)
    assert seen.environment is None and seen.model is None


def test_the_local_reads_of_a_missing_job_name_it(tmp_path: Path) -> None:
    local = LocalExecutor(tmp_path / "jobs")
    assert not local.exists("proj", "nothing")
    for read in (local.observe, local.spec_of, local.logs, local.outputs, local.events, local.gradings):
        with pytest.raises(ConfigError, match="no job proj/nothing"):
            read("proj", "nothing")
    assert local.earlier_generations("proj", "nothing") == []


# --- choosing the executor -------------------------------------------------------------------------------


def test_the_project_setting_picks_the_executor(tmp_path: Path) -> None:
    (tmp_path / ".git").mkdir()
    project = Project.find(tmp_path)
    assert isinstance(executor(project), LocalExecutor)  # no nodus.yaml: local
    (tmp_path / "nodus.yaml").write_text("executor: local\n")
    assert isinstance(executor(project), LocalExecutor)
    (tmp_path / "nodus.yaml").write_text("executor: slurm\n")
    with pytest.raises(ConfigError, match=r"nodus.yaml: executor: ") as caught:
        executor(project)
    assert "Project settings: executor" in str(caught.value.hint)
    with pytest.raises(ConfigError, match="'slurm' is not an executor nodus has"):
        choose_executor("slurm", tmp_path)


# --- the contract covers every module outside the executors ----------------------------------------------


def test_the_job_folder_contract_lists_every_module_outside_the_executors() -> None:
    config = tomllib.loads((REPO / "pyproject.toml").read_text())["tool"]["importlinter"]["contracts"]
    (contract,) = [c for c in config if c.get("forbidden_modules") == ["nodus.reconciler.executors.local"]]
    reconciler = REPO / "reconciler" / "src" / "nodus" / "reconciler"
    modules = {
        f"nodus.reconciler.{entry.stem if entry.suffix == '.py' else entry.name}"
        for entry in reconciler.iterdir()
        if (entry.suffix == ".py" and entry.stem != "__init__") or (entry / "__init__.py").is_file()
    }
    nodus = reconciler.parent
    others = {f"nodus.{entry.name}" for entry in nodus.iterdir() if (entry / "__init__.py").is_file()}
    wanted = (modules - {"nodus.reconciler.executors"}) | (others - {"nodus.reconciler", "nodus.testing"})
    assert wanted <= set(contract["source_modules"]), sorted(wanted - set(contract["source_modules"]))
