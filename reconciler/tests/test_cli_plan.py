"""`nodus plan` and `apply` through the CLI: a managed runtime (`runtime: nodus/grpo-lora`) joins the plan from
the runtimes catalog (a folder of our own here, through NODUS_RUNTIMES_DIR), a parameter typo fails the plan
with one located line and a suggestion, and a job's summary reads well in `get` and `describe`.

No job runs: the TrainingJobs applied here are `state: Suspended`, which admits and records them only.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from click.testing import CliRunner

from nodus.cli.main import cli
from nodus.reconciler.planning.managed import catalog_folders, read_catalog
from nodus.reconciler.project import Project
from nodus.reconciler.state.records import ResourceKey

CATALOG_RUNTIME = """apiVersion: nodus.dev/v1beta1
kind: TrainingRuntime
metadata: {name: grpo-lora, project: nodus}
spec:
  command: [python, -m, nodus.runtimes.grpo_lora]
  tasks: [GRPO]
  environmentTasks: AttemptAPI
  managed: true
  parameterSchema:
    type: object
    additionalProperties: false
    properties:
      steps: {type: integer, minimum: 1}
      learningRate: {type: number}
      lora:
        type: object
        additionalProperties: false
        properties: {r: {type: integer}, alpha: {type: integer}}
  defaults: {steps: 2, learningRate: 0.0001}
"""
NOT_MANAGED = CATALOG_RUNTIME.replace("name: grpo-lora", "name: homemade").replace("managed: true", "managed: false")
JOB = """apiVersion: nodus.dev/v1beta1
kind: TrainingJob
metadata: {{name: quickstart}}
spec:
  runtime: {runtime}
  state: Suspended
  parameters: {parameters}
"""
USER_RUNTIME = CATALOG_RUNTIME.replace("managed: true", "managed: false").replace(", project: nodus", "")


def nodus(*args: str) -> tuple[int, str, str]:
    result = CliRunner().invoke(cli, list(args))
    return result.exit_code, result.stdout, result.stderr


@pytest.fixture
def project(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    catalog = tmp_path / "catalog"
    catalog.mkdir()
    (catalog / "grpo-lora.yaml").write_text(CATALOG_RUNTIME)
    (catalog / "homemade.yaml").write_text(NOT_MANAGED)
    monkeypatch.setenv("NODUS_RUNTIMES_DIR", str(catalog))
    root = tmp_path / "project"
    root.mkdir()
    (root / "nodus.lock").write_text("lockfileVersion: 1\n")
    (root / "job.yaml").write_text(JOB.format(runtime="nodus/grpo-lora", parameters="{steps: 3}"))
    monkeypatch.chdir(root)
    return root


def test_a_managed_runtime_joins_the_plan_when_a_job_names_it(project: Path) -> None:
    code, out, err = nodus("plan", ".")
    assert code == 2, err
    assert "+ TrainingRuntime/nodus/grpo-lora  (managed:runtimes/grpo-lora.yaml)" in out
    assert "+ TrainingJob/quickstart" in out and "Plan: 2 to add" in out

    code, out, err = nodus("plan", ".", "-o", "json")
    actions = {action["ref"]: action for action in json.loads(out)["actions"]}
    runtime = actions["TrainingRuntime/nodus/grpo-lora"]
    assert runtime["source"] == "managed:runtimes/grpo-lora.yaml" and runtime["desired"]["spec"]["managed"] is True

    # Applied (the job is Suspended: admitted and recorded, nothing runs), the same files plan to nothing.
    code, out, err = nodus("apply", ".", "--yes")
    assert code == 0, out + err
    code, out, err = nodus("get", "trainingruntimes", "-n", "nodus")
    assert code == 0 and "grpo-lora" in out and "Ready" in out
    code, out, err = nodus("get", "tj", "quickstart", "-o", "json")
    assert json.loads(out)["status"]["phase"] == "Suspended"
    code, out, err = nodus("plan", ".")
    assert code == 0 and "No changes: 2 unchanged." in out, out + err


def test_the_users_own_runtime_wins_over_the_catalog(project: Path) -> None:
    (project / "runtime.yaml").write_text(USER_RUNTIME.replace("name: grpo-lora", "name: grpo-lora, project: nodus"))
    code, out, _ = nodus("plan", ".")
    assert code == 2 and "+ TrainingRuntime/nodus/grpo-lora  (runtime.yaml:1)" in out
    assert "managed:" not in out


def test_only_managed_runtimes_of_the_nodus_project_come_from_the_catalog(project: Path) -> None:
    (project / "job.yaml").write_text(JOB.format(runtime="nodus/homemade", parameters="{}"))
    code, out, err = nodus("plan", ".")
    assert code == 1 and "Plan:" not in out
    assert err.splitlines()[0] == (
        "error: job.yaml: TrainingJob/quickstart: spec.runtime: TrainingRuntime nodus/homemade does not exist"
    )


def test_a_parameter_typo_fails_the_plan_with_the_file_the_job_the_field_and_a_suggestion(project: Path) -> None:
    parameters = "{learning_rate: 0.1, lora: {alhpa: 8}}"
    (project / "job.yaml").write_text(JOB.format(runtime="nodus/grpo-lora", parameters=parameters))
    code, out, err = nodus("plan", ".")
    assert code == 1
    assert out == ""  # nothing shown as planned
    lines = err.splitlines()
    assert lines[0] == (
        "error: job.yaml: TrainingJob/quickstart: spec.parameters.learning_rate: unknown parameter; "
        "did you mean 'learningRate'?"
    )
    # Every problem at once, as the dry run lists them: the nested typo too, not only once the first is fixed.
    assert lines[1] == "job.yaml: TrainingJob/quickstart: spec.parameters.lora.alhpa: unknown parameter; " + (
        "did you mean 'alpha'?"
    )
    assert lines[2] == "hint: nothing was planned; fix the specs and plan again"

    # A path given from elsewhere is named as given.
    code, out, err = nodus("plan", str(project))
    assert code == 1 and err.startswith(f"error: {project / 'job.yaml'}: TrainingJob/quickstart: spec.parameters.")

    # A parameter's problem does not hide another field's: a missing export Volume is said beside it.
    parameters = "{learningRate: 0.1, lora: {alhpa: 8}}"
    job = JOB.format(runtime="nodus/grpo-lora", parameters=parameters)
    (project / "job.yaml").write_text(job + "  exportTo: {volume: nowhere}\n")
    code, _, err = nodus("plan", ".")
    assert code == 1 and "spec.parameters.lora.alhpa: unknown parameter; did you mean 'alpha'?" in err
    assert "spec.exportTo.volume: Volume default/nowhere does not exist" in err

    # apply keeps its own wording (with the reason) and writes nothing.
    code, out, err = nodus("apply", ".", "--yes")
    assert code == 1
    assert "job.yaml:1: TrainingJob/quickstart: InvalidParameters: spec.parameters.lora.alhpa" in err
    assert "nothing was applied" in err
    code, out, _ = nodus("get", "tj")
    assert "No TrainingJob resources found." in out


def test_a_cap_raised_by_nodus_patch_is_drift_that_blocks_nothing(project: Path) -> None:
    job = JOB.format(runtime="nodus/grpo-lora", parameters="{}")
    (project / "job.yaml").write_text(job + '  maxCostUSD: "2.00"\n')
    assert nodus("apply", ".", "--yes")[0] == 0
    code, _, err = nodus("patch", "tj/quickstart", "--type", "merge", "-p", '{"spec":{"maxCostUSD":"40"}}')
    assert code == 0, err
    drift = (
        "warning: job.yaml: TrainingJob/quickstart: spec.maxCostUSD is 40.00 live (raised by nodus patch or an "
        'earlier apply); the file says 2.00 and a cap can only be raised, so 40.00 stays: set maxCostUSD: "40.00" '
        "in job.yaml to keep it"
    )
    # The job is unchanged (its live cap stays), and a second job of the repo still plans.
    other = JOB.format(runtime="nodus/grpo-lora", parameters="{}").replace("name: quickstart", "name: second")
    (project / "second.yaml").write_text(other)
    code, out, err = nodus("plan", ".")
    assert code == 2, out + err
    assert drift in err.splitlines(), err
    assert "+ TrainingJob/second" in out and "Plan: 1 to add, 0 to change" in out, out
    # The dry run says the same, as a note: the run keeps its live cap.
    code, out, err = nodus("apply", "-f", "job.yaml", "--dry-run")
    assert "TrainingJob/quickstart: warning: spec.maxCostUSD is 40.00 live" in err, out + err
    # Another in-place field of the job still updates; the live cap is kept, not lowered.
    (project / "job.yaml").write_text(job + '  maxCostUSD: "2.00"\n  expectedDuration: 10m\n')
    code, out, err = nodus("apply", ".", "--yes")
    assert code == 0, out + err
    assert drift in err.splitlines(), err
    code, out, _ = nodus("get", "tj", "quickstart", "-o", "json")
    spec = json.loads(out)["spec"]
    assert spec["maxCostUSD"] == "40.00" and spec["expectedDuration"] == "10m"
    # A file that agrees says nothing more.
    (project / "job.yaml").write_text(job + '  maxCostUSD: "40.00"\n  expectedDuration: 10m\n')
    code, out, err = nodus("plan", ".")
    assert code == 0 and "warning" not in err, out + err


def test_get_shows_the_change_and_describe_the_comparison(project: Path) -> None:
    assert nodus("apply", ".", "--yes")[0] == 0
    key = ResourceKey("TrainingJob", "default", "quickstart")
    store = Project.find(project).open_state()
    try:
        record = store.get(key)
        assert record is not None
        status = {
            **record.status,
            "summary": {
                "baselinePassRate": 0.4062,
                "finalPassRate": 0.7031,
                "baseline": {"tasks": 64, "scored": 64, "passed": 26, "unscored": 0},
                "final": {"tasks": 64, "scored": 63, "passed": 45, "unscored": 1},
                "comparison": {"comparable": True, "changePoints": 29.7, "tasks": 63},
            },
            "diagnostics": {"rewardSignal": {"groups": 120, "flatGroups": 30}},
            "timing": {
                "steps": 60,
                "stepSeconds": 0.3312,
                "evaluationTaskSeconds": 0.0207,
                "fixedSeconds": 6.82,
                "seconds": 29.3,
            },
        }
        store.set_status(key, status)
    finally:
        store.close()
    code, out, _ = nodus("get", "tj")
    assert code == 0 and "CHANGE" in out and "+29.7pp" in out
    code, out, _ = nodus("describe", "tj/quickstart")
    assert code == 0
    results = out.split("Results:\n", 1)[1].split("Events:", 1)[0].splitlines()
    assert results == [
        "  Baseline:      40.6% (26/64 scored tasks passed)",
        "  Final:         70.3% (45/63 scored tasks passed, 1 unscored)",
        "  Change:        +29.7 percentage points on 63 tasks scored before and after",
        "  Reward signal: 30 of 120 training groups had the same reward throughout",
        "  Timing:        0.331 s per step (60 steps), 0.0207 s per held-out task, 6.8 s start-up and export on this "
        "host (later estimates of this shape use it)",
    ]


def test_describe_says_why_a_comparison_is_not_comparable(project: Path) -> None:
    assert nodus("apply", ".", "--yes")[0] == 0
    key = ResourceKey("TrainingJob", "default", "quickstart")
    store = Project.find(project).open_state()
    try:
        record = store.get(key)
        assert record is not None
        comparison = {"comparable": False, "reason": "TooFewTasks", "message": "8 tasks scored on both sides"}
        warning = "every one of the 4 training groups got the same reward"
        status = {
            **record.status,
            "summary": {"comparison": comparison},
            "diagnostics": {"rewardSignal": {"groups": 4, "flatGroups": 4, "warning": warning}},
        }
        store.set_status(key, status)
    finally:
        store.close()
    code, out, _ = nodus("get", "tj")
    assert code == 0 and "+" not in out.splitlines()[1]  # no change shown without a comparison
    code, out, _ = nodus("describe", "tj/quickstart")
    assert code == 0
    assert "  Change:        not comparable (TooFewTasks): 8 tasks scored on both sides" in out
    assert f"  Warning:       {warning}" in out


def test_the_catalog_is_found_without_importing_the_trainers(monkeypatch: pytest.MonkeyPatch) -> None:
    import sys

    monkeypatch.delenv("NODUS_RUNTIMES_DIR", raising=False)
    loaded = "nodus.runtimes" in sys.modules
    folders = catalog_folders()
    assert ("nodus.runtimes" in sys.modules) is loaded  # find_spec locates it, never imports it
    repo_runtimes = Path(__file__).resolve().parents[2] / "runtimes"
    assert folders and folders[0] == repo_runtimes  # the editable workspace's live files come first
    catalog, problems = read_catalog(folders)
    assert problems == []
    assert all(key.project == "nodus" and item.document["spec"]["managed"] for key, item in catalog.items())
    # Every YAML file there is a managed runtime of the nodus project (else a plan would never find it).
    assert len(catalog) == len(list(repo_runtimes.glob("*.yaml")))


def test_a_broken_catalog_file_is_named_when_the_runtime_is_not_found(project: Path, tmp_path: Path) -> None:
    (tmp_path / "catalog" / "grpo-lora.yaml").write_text(CATALOG_RUNTIME.replace("tasks: [GRPO]", "tasks: GRPO"))
    code, _, err = nodus("plan", ".")
    assert code == 1 and "grpo-lora.yaml:6" in err and "TrainingRuntime/grpo-lora: spec.tasks" in err
