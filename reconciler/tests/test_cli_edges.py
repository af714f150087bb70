"""Edges of `nodus plan` and `apply` through the CLI: kinds no controller runs say so (plan, apply, get, describe)
and never look Healthy; an evaluation AgentGroup naming a missing Environment, a misspelt runtime and a job
holding out too few tasks for its comparison are refused before anything is written, naming file, resource
and field.

No job runs: the TrainingJobs here are refused, or `state: Suspended` (admitted and recorded only).
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from click.testing import CliRunner

from nodus.cli.main import cli
from nodus.reconciler.controllers.coverage import CONTROLLED_KINDS, has_controller
from nodus.specs.registry import BY_KIND

RUNTIME = """apiVersion: nodus.dev/v1beta1
kind: TrainingRuntime
metadata: {name: grpo-lora, project: nodus}
spec:
  command: [python, -m, nodus.runtimes.grpo_lora]
  tasks: [GRPO]
  environmentTasks: AttemptAPI
  managed: true
  parameterSchema: {type: object}
"""
ENVIRONMENT = """apiVersion: nodus.dev/v1
kind: Environment
metadata: {name: arithmetic, project: nodus}
spec:
  version: 2.0.0
  package: {path: ., loader: "arithmetic_env:load_environment"}
"""
ENDPOINT = """apiVersion: nodus.dev/v1
kind: InferenceEndpoint
metadata: {name: support-bot}
spec: {model: nodus/gpt-oss-120b, rpm: 120}
"""
AGENT = """apiVersion: nodus.dev/v1
kind: Agent
metadata: {name: worker}
spec: {system: "Answer briefly."}
"""
EVALUATION = """apiVersion: nodus.dev/v1
kind: AgentGroup
metadata: {{name: worker-eval}}
spec:
  agent: worker
  evaluation: {{environment: {environment}, tasks: 2}}
"""
JOB = """apiVersion: nodus.dev/v1beta1
kind: TrainingJob
metadata: {{name: run}}
spec:
  runtime: {runtime}
  state: Suspended
  environment: {{name: nodus/arithmetic@2.0.0{held_out}}}
{extra}"""


def nodus(*args: str) -> tuple[int, str, str]:
    result = CliRunner().invoke(cli, list(args))
    return result.exit_code, result.stdout, result.stderr


@pytest.fixture
def project(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    catalog = tmp_path / "catalog"
    catalog.mkdir()
    (catalog / "grpo-lora.yaml").write_text(RUNTIME)
    monkeypatch.setenv("NODUS_RUNTIMES_DIR", str(catalog))
    monkeypatch.delenv("NODUS_HOME", raising=False)
    monkeypatch.delenv("NODUS_STATE", raising=False)
    root = tmp_path / "project"
    root.mkdir()
    (root / "nodus.lock").write_text("lockfileVersion: 1\n")
    monkeypatch.chdir(root)
    return root


def test_every_kind_either_has_a_controller_or_is_stored_only() -> None:
    assert set(BY_KIND) >= CONTROLLED_KINDS
    stored_only = {kind for kind in BY_KIND if not has_controller(kind)}
    assert {"Agent", "AgentRun", "AgentGroup"} <= stored_only


def test_a_kind_nothing_runs_says_so_at_plan_apply_get_and_describe(project: Path) -> None:
    (project / "agent.yaml").write_text(AGENT)
    note = "stored only: nodus has no controller for Agent yet (nothing runs it)"
    code, out, err = nodus("plan", ".")
    assert code == 2, err
    assert f"Agent/worker: {note}" in out.splitlines()

    code, out, err = nodus("plan", ".", "-o", "markdown")
    assert "### Stored only" in out and f"- Agent/worker: {note}" in out

    code, out, err = nodus("apply", ".", "--yes")
    assert code == 0, out + err
    assert "Agent/worker: created" in err
    assert f"Agent/worker: {note}" in err

    code, out, _ = nodus("get", "agent", "worker", "-o", "json")
    status = json.loads(out)["status"]
    assert (status["phase"], status["reason"]) == ("Unsupported", "NoController")
    assert status["message"] == "nodus has no controller for Agent yet (nothing runs it)"
    code, out, _ = nodus("get", "agent", "-o", "wide")
    header, row = out.splitlines()[:2]
    cells = dict(zip(header.split(), row.split(), strict=True))
    assert cells["PHASE"] == "Unsupported" and cells["HEALTH"] == "Unknown"
    assert "Healthy" not in out

    code, out, _ = nodus("describe", "agent/worker")
    assert code == 0
    assert f"Warning:     {note}; the spec below is what was asked for" in out
    assert "phase: Unsupported" in out and "Warning  NoController" in out

    # Applying the same files again changes nothing and repeats nothing; --wait does not wait for what never runs,
    # and does not pass it off as done either: it ends at once, exit 1, naming it.
    code, out, err = nodus("apply", ".", "--yes", "--wait", "--timeout", "1h")
    assert code == 1 and note not in err, err
    assert "Wait failed: Agent/worker: Unsupported: NoController" in err


def test_an_evaluation_group_naming_a_missing_environment_is_refused(project: Path) -> None:
    (project / "agent.yaml").write_text(AGENT)
    (project / "group.yaml").write_text(EVALUATION.format(environment="nodus/arithmetic-v2@2.0.0"))
    code, out, err = nodus("plan", ".")
    assert code == 1 and out == ""
    assert err.splitlines()[0] == (
        "error: group.yaml: AgentGroup/worker-eval: spec.evaluation.environment: "
        "Environment nodus/arithmetic-v2 does not exist"
    )
    code, out, err = nodus("apply", ".", "--yes")
    assert code == 1
    assert (
        "group.yaml:1: AgentGroup/worker-eval: EnvironmentNotFound: spec.evaluation.environment: "
        "Environment nodus/arithmetic-v2 does not exist" in err
    )
    code, out, _ = nodus("get", "ag")
    assert "No AgentGroup resources found." in out  # nothing was written

    (project / "group.yaml").write_text(EVALUATION.format(environment="nodus/arithmetic@1.0.0"))
    (project / "environment.yaml").write_text(ENVIRONMENT)
    code, out, err = nodus("plan", ".")
    assert code == 1 and "spec.evaluation.environment: Environment arithmetic is at version 2.0.0, not 1.0.0" in err

    (project / "group.yaml").write_text(EVALUATION.format(environment="nodus/arithmetic@2.0.0"))
    code, out, err = nodus("plan", ".")
    assert code == 2, err  # an Environment of the same plan counts


def test_a_misspelt_runtime_gets_a_did_you_mean(project: Path) -> None:
    (project / "environment.yaml").write_text(ENVIRONMENT)
    (project / "job.yaml").write_text(JOB.format(runtime="nodus/grpo-lor", held_out="", extra=""))
    code, out, err = nodus("plan", ".")
    assert code == 1 and out == ""
    assert err.splitlines()[0] == (
        "error: job.yaml: TrainingJob/run: spec.runtime: TrainingRuntime nodus/grpo-lor does not exist; "
        "did you mean nodus/grpo-lora?"
    )
    # Nothing close: no guess.
    (project / "job.yaml").write_text(JOB.format(runtime="nodus/something-else", held_out="", extra=""))
    code, _, err = nodus("plan", ".")
    assert code == 1 and err.splitlines()[0].endswith("TrainingRuntime nodus/something-else does not exist")


def test_too_few_held_out_tasks_for_the_comparison_is_refused_at_plan(project: Path) -> None:
    (project / "environment.yaml").write_text(ENVIRONMENT)
    (project / "job.yaml").write_text(JOB.format(runtime="nodus/grpo-lora", held_out=", heldOutTasks: 8", extra=""))
    code, out, err = nodus("plan", ".")
    assert code == 1 and out == ""
    assert err.splitlines()[0] == (
        "error: job.yaml: TrainingJob/run: spec.environment.heldOutTasks: 8 held-out tasks are fewer than "
        "spec.evaluation.minComparisonTasks (16), so baseline and final could never be compared (TooFewTasks); "
        "hold out at least 16, or lower evaluation.minComparisonTasks"
    )
    code, out, err = nodus("apply", ".", "--yes")
    assert code == 1 and "TrainingJob/run: TooFewHeldOutTasks: spec.environment.heldOutTasks" in err

    # The default 64 held out, and a minimum above it: the minimum is the field named.
    extra = "  evaluation: {minComparisonTasks: 100}\n"
    (project / "job.yaml").write_text(JOB.format(runtime="nodus/grpo-lora", held_out="", extra=extra))
    code, out, err = nodus("plan", ".")
    assert code == 1 and "TrainingJob/run: spec.evaluation.minComparisonTasks: 100 is more than the 64 tasks" in err

    # Lowered to what is held out, or no comparison asked for: admitted.
    extra = "  evaluation: {minComparisonTasks: 8}\n"
    (project / "job.yaml").write_text(JOB.format(runtime="nodus/grpo-lora", held_out=", heldOutTasks: 8", extra=extra))
    code, out, err = nodus("plan", ".")
    assert code == 2, err
    extra = "  evaluation: {final: false}\n"
    (project / "job.yaml").write_text(JOB.format(runtime="nodus/grpo-lora", held_out=", heldOutTasks: 8", extra=extra))
    code, out, err = nodus("plan", ".")
    assert code == 2, err


def test_reads_in_a_folder_that_is_no_project_create_nothing(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("NODUS_HOME", raising=False)
    monkeypatch.delenv("NODUS_STATE", raising=False)
    folder = tmp_path / "not-a-project"
    folder.mkdir()
    monkeypatch.chdir(folder)
    code, out, _ = nodus("get", "tj")
    assert code == 0 and "No TrainingJob resources found." in out
    code, out, _ = nodus("get", "ep", "-o", "wide")
    assert code == 0
    code, _, err = nodus("describe", "tj/x")
    assert code == 1 and "TrainingJob/x not found" in err
    code, _, err = nodus("wait", "tj/x", "--for=jsonpath={.status.phase}=Succeeded", "--timeout=1s")
    assert code == 1
    (folder / "endpoint.yaml").write_text(ENDPOINT)
    code, out, _ = nodus("plan", ".")
    assert code == 2 and "+ InferenceEndpoint/support-bot" in out
    assert sorted(path.name for path in folder.iterdir()) == ["endpoint.yaml"]  # no .nodus/

    # A write creates the state folder, which git then ignores as a whole.
    code, out, err = nodus("apply", ".", "--yes")
    assert code == 0, err
    assert "*" in (folder / ".nodus" / ".gitignore").read_text().splitlines()
    code, out, _ = nodus("get", "ep")
    assert "support-bot" in out  # the real store, once there is one


def test_code_edited_without_a_version_bump_is_said_at_plan(project: Path) -> None:
    from nodus.builder.lockfile import Lock, LockEntry
    from nodus.builder.plan import source_digest

    package = project / "env"
    package.mkdir()
    (package / "environment.yaml").write_text(ENVIRONMENT.replace("project: nodus", "project: default"))
    (package / "arithmetic_env.py").write_text("def load_environment():\n    return None\n")
    digest = "sha256:" + "1" * 64
    lock = Lock.load(project / "nodus.lock")
    built = source_digest(package, skip=["environment.yaml"])  # as nodus-build hashes it
    lock.record("arithmetic", "2.0.0", LockEntry(digest, digest, digest, digest, builder="0.1.0", source=built))
    lock.save()
    code, _, err = nodus("plan", ".")
    assert code == 2 and "warning" not in err, err

    (package / "arithmetic_env.py").write_text("def load_environment():\n    return 42\n")
    code, _out, err = nodus("plan", ".")
    assert code == 2  # the plan itself is unchanged: the spec did not change
    warning = next(line for line in err.splitlines() if line.startswith("warning:"))
    assert warning.startswith("warning: env/environment.yaml: Environment/arithmetic: spec.version: ")
    assert "changed since arithmetic@2.0.0 was built" in warning and "bump spec.version" in warning
    _, _, err = nodus("apply", ".", "--yes")
    assert "Environment/arithmetic: spec.version: the package's files" in err
