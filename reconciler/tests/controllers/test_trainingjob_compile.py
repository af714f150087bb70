"""What a TrainingJob compiles into: its runtime's command as written (the local executor makes a host runtime's
`python` the host's interpreter when it resolves the workload), and params.json's
provenance (runtime name, digest, managed, image; the Environment's version and image; the pinned model);
and the executor's status copied into the TrainingJob, diagnostics included."""

from __future__ import annotations

import hashlib
import sys
from pathlib import Path
from typing import Any

import pytest

from nodus.reconciler.controllers.admission import admit
from nodus.reconciler.controllers.trainingjob import compile_workload, job_status
from nodus.reconciler.executors.local.executor import LocalExecutor
from nodus.reconciler.executors.local.job import write_json
from nodus.reconciler.executors.local.resolve import host_command, resolve
from nodus.reconciler.state.records import ResourceKey, ResourceRecord, spec_hash
from nodus.testing.fake_executor import FakeExecutor

MODEL = "hf://Qwen/Qwen3-0.6B@c1899de289a04d12100db370d81485cdf75e47ca"


def record(
    kind: str, project: str, name: str, spec: dict[str, Any], status: dict[str, Any] | None = None
) -> ResourceRecord:
    document = {"apiVersion": "nodus.dev/v1beta1", "kind": kind, "metadata": {"name": name, "project": project}}
    document["spec"] = spec
    return ResourceRecord(ResourceKey(kind, project, name), document, spec_hash(document), status=status or {})


RUNTIME = record(
    "TrainingRuntime",
    "nodus",
    "grpo-lora",
    {
        "command": ["python", "-m", "nodus.runtimes.grpo_lora"],
        "tasks": ["GRPO"],
        "modes": ["Train"],
        "environmentTasks": "AttemptAPI",
        "managed": True,
        "defaults": {"steps": 2},
    },
)
ENVIRONMENT = record(
    "Environment",
    "nodus",
    "arithmetic",
    {"version": "2.0.0", "package": {"path": "arithmetic", "loader": "arithmetic_env"}},
    {
        "phase": "Ready",
        "image": "sha256:" + "a" * 64,
        "graderImage": "localhost/nodus-env/arithmetic:2.0.0",
        "graderImageId": "sha256:" + "b" * 64,
    },
)
JOB = record(
    "TrainingJob",
    "default",
    "run",
    {
        "runtime": "nodus/grpo-lora",
        "model": {"uri": MODEL},
        "environment": {"name": "nodus/arithmetic@2.0.0", "seed": 42, "heldOutTasks": 16},
        "evaluation": {"baseline": True, "final": True, "minComparisonTasks": 8},
    },
)


def compiled(runtime: ResourceRecord = RUNTIME, job: ResourceRecord = JOB) -> Any:
    verdict = admit(job.spec, runtime.spec, {ENVIRONMENT.key: ENVIRONMENT.spec})
    assert verdict.admitted, verdict.message
    return compile_workload(job, verdict, runtime, ENVIRONMENT)


def test_params_say_which_runtime_environment_and_model_ran() -> None:
    params = compiled().params
    assert params["runtime"] == {
        "name": "nodus/grpo-lora",
        "digest": spec_hash(RUNTIME.spec),
        "managed": True,
        "image": None,
    }
    assert params["runtime"]["digest"].startswith("sha256:") and len(params["runtime"]["digest"]) == 71
    assert params["environment"] == {
        "name": "nodus/arithmetic@2.0.0",
        "seed": 42,
        "heldOutTasks": 16,
        "version": "2.0.0",
        "image": "sha256:" + "b" * 64,
    }
    assert params["modelRevision"] == MODEL
    assert params["evaluation"]["minComparisonTasks"] == 8


def test_evaluation_defaults_carry_the_seeds_minimum() -> None:
    job = record("TrainingJob", "default", "run", {**JOB.spec["spec"], "evaluation": None})
    assert compiled(job=job).params["evaluation"] == {"baseline": True, "final": True, "minComparisonTasks": 16}


def test_a_changed_runtime_document_is_a_new_digest() -> None:
    changed = record("TrainingRuntime", "nodus", "grpo-lora", {**RUNTIME.spec["spec"], "defaults": {"steps": 3}})
    assert compiled(changed).params["runtime"]["digest"] != compiled().params["runtime"]["digest"]


@pytest.mark.parametrize(
    ("spec", "first"),
    [
        ({"command": ["python", "-m", "x"]}, sys.executable),
        ({"command": ["python3", "x.py"]}, sys.executable),
        ({"command": ["/usr/bin/python3", "x.py"]}, "/usr/bin/python3"),
        ({"command": ["torchrun", "x.py"]}, "torchrun"),
        ({"command": ["python", "-m", "x"], "image": "ghcr.io/a/b@sha256:" + "c" * 64}, "python"),
    ],
)
def test_a_host_runtimes_python_is_the_interpreter_nodus_runs_in(spec: dict[str, Any], first: str) -> None:
    command = host_command(tuple(spec["command"]), spec.get("image"))
    assert command[0] == first and command[1:] == tuple(spec["command"][1:])


def test_the_workload_keeps_the_command_as_written_and_the_local_executor_runs_it_with_its_python() -> None:
    workload = compiled()
    assert workload.command == ("python", "-m", "nodus.runtimes.grpo_lora")
    without_model = workload.with_changes(model=None)  # a model is resolved against a project: not here
    assert resolve(without_model, None).command == (sys.executable, "-m", "nodus.runtimes.grpo_lora")


def test_job_status_copies_summary_and_diagnostics(tmp_path: Path) -> None:
    jobs = LocalExecutor(tmp_path / "jobs")
    files = jobs.files("default", "run")
    write_json(files.spec, {"name": "run", "project": "default", "command": ["true"]})  # launched before workloads
    summary = {"comparison": {"comparable": True, "changePoints": 12.5, "tasks": 16}}
    diagnostics = {"rewardSignal": {"groups": 4, "flatGroups": 4, "warning": "flat"}}
    write_json(files.status, {"phase": "Running", "summary": summary, "diagnostics": diagnostics})
    status = job_status(jobs, JOB)
    assert status["summary"] == summary and status["diagnostics"] == diagnostics


def test_a_succeeded_job_lists_its_outputs_by_path_with_their_sha256(tmp_path: Path) -> None:
    """The seeds' `nodus get tj/NAME -o jsonpath='{.status.outputs[*].name}'`: every file under the outputs."""
    jobs = FakeExecutor()
    jobs.launch(compiled().with_changes(model=None))
    key = compiled().key
    assert "outputs" not in job_status(jobs, JOB)  # running: nothing recorded yet
    jobs.finish(key.project, key.name, outputs={"results.json": b"{}", "adapter/adapter_model.safetensors": b"w"})
    outputs = job_status(jobs, JOB)["outputs"]
    assert [entry["name"] for entry in outputs] == ["adapter/adapter_model.safetensors", "results.json"]
    assert outputs[1] == {"name": "results.json", "size": 2, "sha256": hashlib.sha256(b"{}").hexdigest()}


SFT_RESULTS = {
    "runtime": "nodus/sft",
    "heldOut": {
        "metric": "heldOutLoss",
        "better": "lower",
        "description": "mean token loss on the held-out rows",
        "before": {"heldOutLoss": 2.3125, "heldOutRows": 30},
        "after": {"heldOutLoss": 1.875, "heldOutRows": 30},
        "improved": True,
    },
}


@pytest.mark.parametrize(
    ("results", "cell", "line"),
    [
        (SFT_RESULTS, "loss 2.31→1.88", "held-out loss 2.3125 before, 1.875 after (lower is better: improved)"),
        (
            {
                "heldOut": {
                    "metric": "heldOutPreferenceAccuracy",
                    "better": "higher",
                    "improved": False,
                    "before": {"heldOutPreferenceAccuracy": 0.5},
                    "after": {"heldOutPreferenceAccuracy": 0.5},
                }
            },
            "accuracy 50.0%→50.0%",
            "held-out preference accuracy 50.0% before, 50.0% after (higher is better: did not improve)",
        ),
        (
            {
                "heldOut": {
                    "metric": "heldOutKL",
                    "better": "lower",
                    "improved": True,
                    "before": {"heldOutKL": 0.5},
                    "after": {"heldOutKL": 0.25},
                }
            },
            "KL 0.5→0.25",
            "held-out KL 0.5 before, 0.25 after (lower is better: improved)",
        ),
        ({"runtime": "nodus/evaluate", "tasks": 8, "passRate": 0.625}, "pass 62.5%", "pass rate 62.5%"),
    ],
)
def test_a_succeeded_job_s_headline_result_is_in_get_and_describe(
    results: dict[str, Any], cell: str, line: str
) -> None:
    """The metric of each runtime's README row, read once from results.json when the generation succeeded:
    `nodus get tj` shows it under CHANGE and `describe` under Results, without `nodus cp`."""
    import json

    from nodus.reconciler.views import columns
    from nodus.reconciler.views import results as results_view

    jobs = FakeExecutor()
    jobs.launch(compiled().with_changes(model=None))
    key = compiled().key
    jobs.finish(key.project, key.name, outputs={"results.json": json.dumps(results).encode()})
    status = job_status(jobs, JOB)
    shown = ResourceRecord(JOB.key, JOB.spec, JOB.spec_hash, status=status)
    titles, rows = columns.rows("TrainingJob", [shown])
    assert rows[0][titles.index("CHANGE")] == cell
    assert f"{'Result:':<15}{line}" in results_view.result_lines(status)

    # Read once per generation: the next look keeps it without opening results.json again.
    jobs.finish(key.project, key.name, outputs={"results.json": b"not json"})
    again = ResourceRecord(JOB.key, JOB.spec, JOB.spec_hash, status=status)
    assert job_status(jobs, again)["headline"] == status["headline"]
