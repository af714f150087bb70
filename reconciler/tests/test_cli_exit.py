"""Exit codes a CI can trust, waits that end, and `nodus get` output for scripts, through the CLI.

No podman and no model: the Environment here is never built (so jobs on it are blocked), and the jobs that run
are host commands that fail at once (a Job, and a TrainingJob of a runtime whose trainer exits 3). Before these
behaviours, `apply --wait` exited 0 on a Failed job, and waits on a job that could no longer succeed ran to
their timeout, which is why every wait below that must end early has a timeout that would end it otherwise
with a different message.
"""

from __future__ import annotations

import json
import shutil
import sys
from pathlib import Path

import pytest
from click.testing import CliRunner

from nodus.cli.main import cli
from nodus.reconciler.project import Project
from nodus.reconciler.state.records import ResourceKey

REPO = Path(__file__).resolve().parents[2]
QUICKSTART = REPO / "examples" / "quickstart"
FAILING_RUNTIME = f"""apiVersion: nodus.dev/v1beta1
kind: TrainingRuntime
metadata: {{name: failing}}
spec:
  command: [{sys.executable}, -c, "import sys; print('the trainer gives up'); sys.exit(3)"]
  tasks: [GRPO]
"""
FAILING_JOB = """apiVersion: nodus.dev/v1beta1
kind: TrainingJob
metadata: {name: doomed}
spec:
  runtime: failing
"""


def nodus(*args: str) -> tuple[int, str, str]:
    result = CliRunner().invoke(cli, list(args), catch_exceptions=False)
    return result.exit_code, result.stdout, result.stderr


@pytest.fixture
def project(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """An empty project (a nodus.lock with nothing built), with the host's price at 0 and no hub cache."""
    root = tmp_path / "project"
    root.mkdir()
    (root / "nodus.lock").write_text("lockfileVersion: 1\nenvironments: {}\n")
    monkeypatch.setenv("HF_HUB_CACHE", str(tmp_path / "empty-hub"))
    monkeypatch.setenv("NODUS_ACCOUNTING_INTERVAL", "0.5")
    for name in ("NODUS_PRICES", "NODUS_STATE", "NODUS_HOME", "NODUS_LOCAL_PRICE_PER_HOUR"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.chdir(root)
    return root


def quickstart(root: Path) -> None:
    """The quickstart's Environment (not built) and TrainingJob, on the catalog's grpo-lora runtime."""
    for name in ("environment.yaml", "env/reverse_words.py", "trainingjob.yaml"):
        (root / name).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy(QUICKSTART / name, root / name)


def test_apply_wait_on_a_job_on_an_environment_nothing_builds_ends_at_once_with_exit_1(project: Path) -> None:
    quickstart(project)
    code, out, err = nodus("apply", ".", "--yes", "--wait", "--timeout", "45s")
    assert code == 1, out + err
    assert "Apply complete" in out  # the apply itself did what was asked
    (summary,) = [text for text in err.splitlines() if text.startswith("Wait failed: ")]
    assert "Environment/reverse-words: Pending: ImageNotBuilt: reverse-words@1.0.0 is not in nodus.lock" in summary
    assert (
        "TrainingJob/quickstart: Pending: EnvironmentNotReady: Environment/reverse-words is not built (ImageNotBuilt)"
        in summary
    )
    assert "timed out" not in err

    # `nodus wait` ends the same way, and plain `get` says why it is Pending.
    code, out, err = nodus("wait", "tj/quickstart", "--for=jsonpath={.status.phase}=Succeeded", "--timeout", "45s")
    assert code == 1 and "timed out" not in err, err
    assert "TrainingJob/quickstart will not reach {.status.phase}=Succeeded: Pending: EnvironmentNotReady" in err
    code, out, _ = nodus("get", "tj")
    assert code == 0
    assert out.splitlines()[1].split()[:4] == ["quickstart", "nodus/grpo-lora", "Pending", "(EnvironmentNotReady)"]
    code, out, _ = nodus("get", "env")
    assert out.splitlines()[1].split()[2:4] == ["Pending", "(ImageNotBuilt)"], out
    code, out, _ = nodus("get", "tj", "-o", "wide")
    header, row = out.splitlines()[:2]
    assert "REASON" in header and row.split()[2] == "Pending" and "EnvironmentNotReady" in row.split()


def test_apply_wait_exits_1_when_the_trainingjob_it_waited_for_fails(project: Path) -> None:
    (project / "runtime.yaml").write_text(FAILING_RUNTIME)
    (project / "job.yaml").write_text(FAILING_JOB)
    code, out, err = nodus("apply", ".", "--yes", "--wait", "--timeout", "2m")
    assert code == 1, out + err
    assert "TrainingJob/doomed: launched" in err and "TrainingJob/doomed: Failed" in err
    (summary,) = [text for text in err.splitlines() if text.startswith("Wait failed: ")]
    assert summary.startswith("Wait failed: TrainingJob/doomed: Failed"), summary
    assert "TrainingRuntime" not in summary  # only what did not succeed is named

    # Waiting for it to succeed ends at once: a Failed job never changes phase again.
    code, _, err = nodus("wait", "tj/doomed", "--for=jsonpath={.status.phase}=Succeeded", "--timeout", "45s")
    assert code == 1 and "timed out" not in err, err
    assert "TrainingJob/doomed will not reach {.status.phase}=Succeeded: Failed" in err
    # ... and a condition it meets is met.
    code, out, _ = nodus("wait", "tj/doomed", "--for=jsonpath={.status.phase}=Failed", "--timeout", "45s")
    assert code == 0 and "condition met" in out
    # A second apply changes nothing and fails nothing: the run that failed before is not this apply's failure.
    code, out, err = nodus("apply", ".", "--yes")
    assert code == 0 and "Apply complete: 0 changed, 0 launched" in out, out + err


def test_apply_wait_exits_1_when_a_job_fails(project: Path) -> None:
    (project / "boom.yaml").write_text(
        "apiVersion: nodus.dev/v1beta1\nkind: Job\nmetadata: {name: boom}\nspec:\n"
        f"  command: [{sys.executable}, -c, 'raise SystemExit(7)']\n"
    )
    code, out, err = nodus("apply", ".", "--yes", "--wait", "--timeout", "2m")
    assert code == 1, out + err
    assert any(text.startswith("Wait failed: Job/boom: Failed") for text in err.splitlines()), err


def test_apply_exits_1_naming_a_launch_that_failed_and_still_applies_the_others(
    project: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from nodus.errors import TemporaryError
    from nodus.reconciler.executors.local.executor import LocalExecutor

    def refuse(self: LocalExecutor, spec: object) -> None:
        raise TemporaryError("all 4 runner uid blocks are taken by running jobs")

    monkeypatch.setattr(LocalExecutor, "launch", refuse)
    (project / "runtime.yaml").write_text(FAILING_RUNTIME)
    (project / "job.yaml").write_text(FAILING_JOB)
    (project / "volume.yaml").write_text("apiVersion: nodus.dev/v1\nkind: Volume\nmetadata: {name: data}\nspec: {}\n")
    code, out, err = nodus("apply", ".", "--yes")
    assert code == 1, out + err
    assert err.splitlines()[-1].startswith(
        "Apply failed: TrainingJob/doomed: LaunchFailed: all 4 runner uid blocks are taken by running jobs"
    ), err
    code, out, _ = nodus("get", "tj", "doomed", "-o", "json")
    status = json.loads(out)["status"]
    assert (status["phase"], status["reason"]) == ("Failed", "LaunchFailed")
    assert json.loads(nodus("get", "volume", "data", "-o", "json")[1])["status"]["phase"] == "Ready"

    monkeypatch.undo()  # the executor takes it now: the next apply launches it
    monkeypatch.chdir(project)
    code, out, err = nodus("apply", ".", "--yes")
    assert code == 0, out + err
    status = json.loads(nodus("get", "tj", "doomed", "-o", "json")[1])["status"]
    assert status.get("reason") != "LaunchFailed", status


def test_piped_get_prints_whole_rows(project: Path) -> None:
    quickstart(project)
    long_name = "a-trainingjob-whose-name-pushes-the-other-columns-past-eighty"
    text = (project / "trainingjob.yaml").read_text().replace("name: quickstart", f"name: {long_name}")
    (project / "trainingjob.yaml").write_text(text)
    assert nodus("apply", ".", "--yes")[0] == 0
    store = Project.find(project).open_state()
    try:
        key = ResourceKey("TrainingJob", "default", long_name)
        record = store.get(key)
        assert record is not None
        store.set_status(key, {**record.status, "phase": "Succeeded", "stage": "Evaluating", "reason": ""})
    finally:
        store.close()
    code, out, _ = nodus("get", "tj")
    assert code == 0
    header, row = out.splitlines()
    assert header.split() == ["NAME", "RUNTIME", "PHASE", "STAGE", "CHANGE", "COST", "AGE"]
    assert row.split()[:4] == [long_name, "nodus/grpo-lora", "Succeeded", "Evaluating"], out
    assert "…" not in out and len(row) > 80


def test_apply_build_exits_1_naming_the_environment_whose_build_failed(
    project: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The build itself is nodus-build's (its own tests make real builds fail); what apply does with a failed
    one is this: the Environment is Failed/BuildFailed, the rest is applied, and the apply exits 1 naming it."""
    from nodus.builder import build as builder

    error = "reverse-words@1.0.0: the freeze step failed: SyntaxError: invalid syntax (reverse_words.py, line 49)"

    def failing_build(paths: list[Path], **options: object) -> list[builder.BuildResult]:
        return [builder.BuildResult("reverse-words", "1.0.0", str(paths[0]), "failed", error=error)]

    monkeypatch.setattr(builder, "build_paths", failing_build)
    quickstart(project)
    code, out, err = nodus("apply", ".", "--build", "--yes")
    assert code == 1, out + err
    assert "Apply complete" not in out
    assert f"Apply failed: Environment/reverse-words: BuildFailed: {error} (3 changed, 0 launched, " in err
    assert "TrainingJob/quickstart: created" in err  # the others were applied

    code, out, err = nodus("apply", ".", "--build", "--yes", "--wait", "--timeout", "45s")
    assert code == 1 and "timed out" not in err, out + err
    summary = err.splitlines()[-1]
    assert summary.startswith(f"Wait failed: Environment/reverse-words: Failed: BuildFailed: {error}; ")
    assert (
        "TrainingJob/quickstart: Pending: EnvironmentNotReady: Environment/reverse-words is Failed (BuildFailed: "
        in (summary)
    )


def test_a_gang_on_the_local_executor_fails_at_apply_and_launches_nothing(project: Path) -> None:
    """The local executor starts no gangs: a Job of two nodes is refused, not run as one process."""
    (project / "gang.yaml").write_text(
        "apiVersion: nodus.dev/v1beta1\nkind: Job\nmetadata: {name: gang}\nspec:\n"
        f"  command: [{sys.executable}, -c, 'print(1)']\n  distributed: {{nodes: 2}}\n"
    )
    code, out, err = nodus("apply", ".", "--yes", "--wait", "--timeout", "1m")
    assert code == 1, out + err
    assert "Job/gang: Failed" in out + err and "ExecutorLacksGangs" in out + err, out + err
    assert "spec.distributed.nodes: 2 nodes need an executor that starts gangs" in out + err, out + err
    assert not (project / ".nodus" / "jobs" / "default" / "gang").exists()  # nothing was launched
