"""The reads of stored state through the CLI (`wait`, `get`, `describe`): a resource that does not exist is one
line at once, with a "did you mean"; a read never needs the executor (DESIGN.md section 6, "Reads need no
executor"): with it unreachable, stored state is printed and one line says live state could not be read."""

from __future__ import annotations

from pathlib import Path

import pytest
from click.testing import CliRunner

from nodus.cli.main import cli
from nodus.errors import TemporaryError
from nodus.reconciler.executors.choose import bound
from nodus.reconciler.project import Project
from nodus.reconciler.state.records import Launch, ResourceKey
from nodus.testing.fake_executor import FakeExecutor

JOB = {
    "apiVersion": "nodus.dev/v1beta1",
    "kind": "TrainingJob",
    "metadata": {"name": "echo-run"},
    "spec": {"runtime": "echo", "task": "SFT", "parameters": {"steps": 3}},
}
KEY = ResourceKey("TrainingJob", "default", "echo-run")


@pytest.fixture
def project(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Project:
    """A project whose store holds one finished TrainingJob (its status as the last refresh wrote it)."""
    (tmp_path / ".git").mkdir()  # the project root marker: never the repository these tests run in
    monkeypatch.chdir(tmp_path)
    found = Project.find(tmp_path)
    store = found.open_state()
    try:
        store.put(KEY, JOB)
        store.record_launch(Launch("TrainingJob/default/echo-run/gen1/attempt1", KEY, job="echo-run"))
        store.set_status(
            KEY,
            {
                "phase": "Succeeded",
                "reason": "TrainerSucceeded",
                "launchGeneration": 1,
                "cost": {"totalUSD": "0.42"},
                "startedAt": 1796243000.5,
                "endedAt": 1796243113.825876,
            },
        )
    finally:
        store.close()
    return found


def nodus(*args: str) -> tuple[int, str, str]:
    result = CliRunner().invoke(cli, list(args))
    return result.exit_code, result.stdout, result.stderr


def test_a_wait_on_a_resource_that_does_not_exist_ends_at_once_with_did_you_mean(project: Project) -> None:
    # A long timeout: the wait ends because there is nothing to wait for, not because the time is up.
    code, out, err = nodus("wait", "tj/echo-rn", "--for=jsonpath={.status.phase}=Succeeded", "--timeout=1h")
    assert code == 1 and out == "", out
    lines = err.strip().splitlines()
    assert "TrainingJob/echo-rn not found (did you mean echo-run?)" in lines[0], err
    assert len(lines) <= 2 and "nodus get trainingjob" in err, err  # the line, then its hint
    code, _, err = nodus("wait", "tj/zzz", "--for=jsonpath={.status.phase}=Succeeded", "--timeout=1h")
    assert code == 1 and "TrainingJob/zzz not found" in err and "did you mean" not in err, err


def test_get_and_describe_of_a_missing_name_say_did_you_mean(project: Project) -> None:
    code, _, err = nodus("get", "tj", "echo-rn")
    assert code == 1 and "did you mean echo-run?" in err, err
    code, _, err = nodus("describe", "tj/echo-rn")
    assert code == 1 and "did you mean echo-run?" in err, err


def test_describe_shows_times_as_rfc3339_utc(project: Project) -> None:
    code, out, _ = nodus("describe", "tj/echo-run")
    assert code == 0, out
    assert "endedAt: '2026-12-02T20:25:13Z'" in out and "startedAt: '2026-12-02T20:23:20Z'" in out, out
    assert "1796243113" not in out
    code, out, _ = nodus("get", "tj", "echo-run", "-o", "jsonpath={.status.endedAt}")
    assert out.strip() == "1796243113.825876"  # what scripts read stays the stored number


RAY = "executor: {ray: {address: 'http://127.0.0.1:9'}}\n"
"""A project on the Ray executor, run with no token (RAY_AUTH_TOKEN unset): the executor cannot even be made."""


def set_phase(project: Project, phase: str) -> None:
    store = project.open_state()
    try:
        record = store.get(KEY)
        assert record is not None
        store.set_status(KEY, {**record.status, "phase": phase, "reason": ""})
    finally:
        store.close()


def test_get_and_describe_of_a_finished_run_need_no_executor(project: Project, monkeypatch: pytest.MonkeyPatch) -> None:
    (project.root / "nodus.yaml").write_text(RAY)
    monkeypatch.delenv("RAY_AUTH_TOKEN", raising=False)
    monkeypatch.delenv("RAY_ADDRESS", raising=False)
    code, out, err = nodus("get", "tj")
    assert code == 0 and "echo-run" in out and "Succeeded" in out and err == "", out + err
    code, out, err = nodus("get", "tj", "-o", "wide")
    assert code == 0 and "Succeeded" in out and err == "", out + err
    code, out, err = nodus("describe", "tj/echo-run")
    assert code == 0 and "phase: Succeeded" in out and err == "", out + err


def test_a_live_run_with_the_executor_unreachable_is_shown_from_the_store_with_one_line(
    project: Project, monkeypatch: pytest.MonkeyPatch
) -> None:
    (project.root / "nodus.yaml").write_text(RAY)
    monkeypatch.delenv("RAY_AUTH_TOKEN", raising=False)
    monkeypatch.delenv("RAY_ADDRESS", raising=False)
    set_phase(project, "Running")
    for args in (("get", "tj"), ("get", "tj", "-o", "wide"), ("describe", "tj/echo-run")):
        code, out, err = nodus(*args)
        assert code == 0 and "Running" in out, out + err
        [said] = err.strip().splitlines()
        assert said.startswith("note: live state could not be read (") and "no token" in said, err
        assert said.endswith("showing the stored status"), err


class Unreachable(FakeExecutor):
    """An executor whose cluster does not answer (what the Ray executor raises when its dashboard is down)."""

    def exists(self, project: str, name: str) -> bool:
        raise TemporaryError("Ray at http://127.0.0.1:9: Failed to connect to the dashboard", delay=15)


def test_a_cluster_that_does_not_answer_is_one_line_too(project: Project) -> None:
    set_phase(project, "Running")
    with bound(project.jobs, Unreachable()):
        code, out, err = nodus("get", "tj", "-o", "wide")
    assert code == 0 and "Running" in out, out + err
    assert err.strip().splitlines() == [
        "note: live state could not be read (Ray at http://127.0.0.1:9: Failed to connect to the dashboard); "
        "showing the stored status"
    ], err


def test_plan_reads_no_executor_either(project: Project, monkeypatch: pytest.MonkeyPatch) -> None:
    (project.root / "nodus.yaml").write_text(RAY)
    monkeypatch.delenv("RAY_AUTH_TOKEN", raising=False)
    monkeypatch.delenv("RAY_ADDRESS", raising=False)
    set_phase(project, "Running")
    (project.root / "secret.yaml").write_text(
        "apiVersion: nodus.dev/v1\nkind: Secret\nmetadata: {name: a}\nspec: {keys: [A]}\n"
    )
    code, out, err = nodus("plan")
    assert code == 2 and "Secret/a" in out and "no token" in err and "Traceback" not in out + err, out + err
    assert [line for line in err.splitlines() if line.startswith("note: live state could not be read (")], err


def test_a_job_never_launched_asks_no_executor(project: Project, monkeypatch: pytest.MonkeyPatch) -> None:
    (project.root / "nodus.yaml").write_text(RAY)
    monkeypatch.delenv("RAY_AUTH_TOKEN", raising=False)
    monkeypatch.delenv("RAY_ADDRESS", raising=False)
    store = project.open_state()
    try:
        other = ResourceKey("TrainingJob", "default", "waiting")
        store.put(other, {**JOB, "metadata": {"name": "waiting"}})
        store.set_status(other, {"phase": "Pending", "reason": "ModelNotCached"})
    finally:
        store.close()
    code, out, err = nodus("get", "tj", "waiting", "-o", "wide")
    assert code == 0 and "ModelNotCached" in out and err == "", out + err
