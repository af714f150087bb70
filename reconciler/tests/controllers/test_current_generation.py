"""A job's phase, health and events describe its current generation (DESIGN.md section 6, "Status describes the
current generation"), through the CLI a user types, on a FakeExecutor: a Succeeded job replaced by a generation
that cannot launch (its model is not in the local cache) is Pending (ModelNotCached) in `get`, `describe`, the
controller's HEALTH and a `wait`, never the previous generation's Succeeded; a finished run's stage is not left at
the trainer's last report; a launch's event says what launched."""

from __future__ import annotations

import dataclasses
from collections.abc import Iterator
from pathlib import Path

import pytest
from click.testing import CliRunner

from nodus.cli.main import cli
from nodus.errors import TemporaryError
from nodus.reconciler.executors.choose import bound
from nodus.reconciler.project import Project
from nodus.reconciler.refresh import refresh
from nodus.reconciler.state.records import ResourceKey
from nodus.testing.fake_executor import FakeExecutor

TJ = ResourceKey("TrainingJob", "default", "run")
REVISION = "c1899de289a04d12100db370d81485cdf75e47ca"
RUNTIME = """apiVersion: nodus.dev/v1beta1
kind: TrainingRuntime
metadata: {name: echo}
spec:
  command: [python, train.py]
  tasks: [SFT]
  parameterSchema:
    type: object
    additionalProperties: false
    properties: {steps: {type: integer, minimum: 1}}
  defaults: {steps: 3}
"""


def training_job(steps: int, model: str = "") -> str:
    return f"""apiVersion: nodus.dev/v1beta1
kind: TrainingJob
metadata: {{name: run}}
spec:
  runtime: echo
  task: SFT
  parameters: {{steps: {steps}}}
  maxCostUSD: "1.00"
{model}"""


@pytest.fixture
def project(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Project:
    root = tmp_path / "repo"
    root.mkdir()
    (root / ".git").mkdir()  # the project root marker: never the repository these tests run in
    (root / "runtime.yaml").write_text(RUNTIME)
    monkeypatch.chdir(root)
    monkeypatch.setenv("HF_HUB_CACHE", str(tmp_path / "hub"))  # empty: no model is cached
    return Project.find(root)


@pytest.fixture
def fake(project: Project) -> Iterator[FakeExecutor]:
    with bound(project.jobs, FakeExecutor()) as executor:
        assert isinstance(executor, FakeExecutor)
        yield executor


def nodus(*args: str) -> tuple[int, str, str]:
    result = CliRunner().invoke(cli, list(args))
    return result.exit_code, result.stdout, result.stderr


def succeeded_then_replaced(project: Project, fake: FakeExecutor) -> None:
    """The issue's reproduction: a job that Succeeded, then `steps` changed and `model.uri` pointed at a revision
    that is not cached, applied with `nodus apply . --yes`."""
    (project.root / "job.yaml").write_text(training_job(3))
    code, out, err = nodus("apply", ".", "--yes")
    assert code == 0, out + err
    fake.finish("default", "run", stage="Exporting")
    assert nodus("refresh")[0] == 0
    code, out, _ = nodus("get", "tj", "run", "-o", "jsonpath={.status.phase}")
    assert out.strip() == "Succeeded"
    model = f"  model: {{uri: 'hf://tiny/model@{REVISION}'}}\n"
    (project.root / "job.yaml").write_text(training_job(5, model))
    code, out, err = nodus("apply", ".", "--yes")
    assert code == 0, out + err


def test_a_replacement_that_cannot_launch_is_pending_not_the_old_success(project: Project, fake: FakeExecutor) -> None:
    succeeded_then_replaced(project, fake)
    code, out, err = nodus("wait", "tj/run", "--for=jsonpath={.status.phase}=Succeeded", "--timeout=20s")
    assert code == 1 and "condition met" not in out, out + err
    assert "ModelNotCached" in err and len(err.strip().splitlines()) <= 2, err
    code, out, _ = nodus("get", "tj", "-o", "wide")
    titles, row = (line.split() for line in out.strip().splitlines())
    shown = dict(zip(titles, row, strict=False))
    assert shown["PHASE"] == "Pending" and shown["REASON"] == "ModelNotCached", out
    assert shown["GENERATION"] == "2" and shown["HEALTH"] == "Progressing", out
    code, out, _ = nodus("get", "tj", "run", "-o", "jsonpath={.status.phase} {.status.reason} {.sync.health}")
    assert out.split()[:2] == ["Pending", "ModelNotCached"], out
    code, out, _ = nodus("describe", "tj/run")
    assert "phase: Pending" in out and "phase: Succeeded" not in out, out


def test_refresh_leaves_an_unlaunched_generation_as_its_controller_wrote_it(
    project: Project, fake: FakeExecutor
) -> None:
    succeeded_then_replaced(project, fake)
    store = project.open_state()
    try:
        assert refresh(project, store) == []
        record = store.get(TJ)
        assert record is not None and record.generation == 2
        assert (record.status["phase"], record.status["reason"]) == ("Pending", "ModelNotCached")
        assert "outputs" not in record.status and "cost" not in record.status  # nothing of generation 1
    finally:
        store.close()
    # The old run is still there, for `nodus logs` and `cp` of generation 1: it was not launched again.
    assert [run.spec.generation for run in fake.jobs[("default", "run")]] == [1]


def test_the_controller_shows_an_unlaunched_replacement_as_progressing(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """`nodus controller` syncing the same change from git: its HEALTH and SYNC view (`get -o wide`, its summary
    line) say generation 2 is Pending and Progressing, not the first generation's Succeeded and Healthy."""
    import subprocess

    repo, service = tmp_path / "git", tmp_path / "service"
    repo.mkdir()
    service.mkdir()
    monkeypatch.setenv("NODUS_HOME", str(service / ".nodus"))
    monkeypatch.delenv("NODUS_STATE", raising=False)
    monkeypatch.setenv("HF_HUB_CACHE", str(tmp_path / "hub"))
    monkeypatch.chdir(service)

    def git(*args: str) -> None:
        subprocess.run(["git", "-c", "user.email=t@example.com", "-c", "user.name=t", *args], cwd=repo, check=True)

    def commit(job: str) -> None:
        (repo / "runtime.yaml").write_text(RUNTIME)
        (repo / "job.yaml").write_text(job)
        git("add", "-A")
        git("commit", "-q", "-m", "job")

    git("init", "-q", "-b", "main")
    commit(training_job(3))
    with bound(Project.find(service).jobs, FakeExecutor()) as fake:
        assert isinstance(fake, FakeExecutor)
        code, out, err = nodus("controller", "--repo", str(repo), "--once")
        assert code == 0, out + err
        fake.finish("default", "run")
        code, out, err = nodus("controller", "--repo", str(repo), "--once")
        assert code == 0 and "2 Synced, 2 Healthy" in out, out + err  # the runtime and the job
        commit(training_job(5, f"  model: {{uri: 'hf://tiny/model@{REVISION}'}}\n"))
        code, out, err = nodus("controller", "--repo", str(repo), "--once")
        assert "2 Synced, 1 Healthy, 1 Progressing" in out, out + err  # the runtime Healthy, the job not
        code, out, _ = nodus("get", "tj", "-o", "wide")
        titles, row = (line.split() for line in out.strip().splitlines())
        shown = dict(zip(titles, row, strict=False))
        assert (shown["PHASE"], shown["REASON"], shown["GENERATION"]) == ("Pending", "ModelNotCached", "2"), out
        assert (shown["SYNC"], shown["HEALTH"]) == ("Synced", "Progressing"), out


def test_the_sdk_wait_ends_on_a_replacement_that_cannot_launch(project: Project, fake: FakeExecutor) -> None:
    from nodus.errors import ConfigError
    from nodus.recipes.apply import Options
    from nodus.recipes.runs import Run

    succeeded_then_replaced(project, fake)
    run = Run("run", "default", Options(path=project.root))
    assert (run.status()["phase"], run.status()["reason"]) == ("Pending", "ModelNotCached")
    with pytest.raises(ConfigError, match="TrainingJob/run will not end: it is Pending \\(ModelNotCached\\)"):
        run.wait(timeout=600)


def test_a_succeeded_run_has_no_stage_and_its_launch_event_says_what_launched(
    project: Project, fake: FakeExecutor
) -> None:
    (project.root / "job.yaml").write_text(training_job(3))
    assert nodus("apply", ".", "--yes")[0] == 0
    fake.set_phase("default", "run", "Running", stage="Exporting")
    assert nodus("refresh")[0] == 0
    code, out, _ = nodus("get", "tj", "run")
    assert code == 0 and out.split()[-5:-3] == ["Running", "Exporting"], (
        out
    )  # STAGE while the trainer writes its outputs
    fake.finish("default", "run", stage="Exporting")
    assert nodus("refresh")[0] == 0
    code, out, _ = nodus("get", "tj", "run")
    titles, row = (line.split() for line in out.strip().splitlines())
    assert dict(zip(titles, row, strict=False))["PHASE"] == "Succeeded" and "Exporting" not in row, out
    code, out, _ = nodus("describe", "tj/run")
    assert code == 0, out
    launched, running = [line for line in out.splitlines() if " Launched " in line]
    assert launched.endswith("Launched                generation 1 launched (attempt 1)"), out
    assert running.endswith("TrainingJob is Running"), out  # the reason kept while it runs: said as the phase
    assert "is Pending" not in out, out


def test_a_running_generation_replaced_by_one_that_cannot_launch_is_stopped(
    project: Project, fake: FakeExecutor
) -> None:
    """The status shows generation 2 Pending: generation 1 must not go on running (and costing) out of sight."""
    (project.root / "job.yaml").write_text(training_job(3))
    assert nodus("apply", ".", "--yes")[0] == 0
    fake.set_phase("default", "run", "Running", stage="Training")
    model = f"  model: {{uri: 'hf://tiny/model@{REVISION}'}}\n"
    (project.root / "job.yaml").write_text(training_job(5, model))
    code, out, err = nodus("apply", ".", "--yes")
    assert code == 0, out + err
    assert ("cancel", "default", "run") in fake.calls
    assert fake.observe("default", "run", generation=1).phase == "Cancelled"
    code, out, _ = nodus(
        "get", "tj", "run", "-o", "jsonpath={.status.phase} {.status.reason} {.status.launchGeneration}"
    )
    assert out.split() == ["Pending", "ModelNotCached", "2"], out


def test_an_in_place_update_that_waits_keeps_the_running_generation(project: Project, fake: FakeExecutor) -> None:
    """A cap raised while the job runs is no replacement: a pass that waits keeps the launch generation, and the
    run goes on."""
    from nodus.reconciler.controllers.trainingjob import reconcile_trainingjob

    (project.root / "job.yaml").write_text(training_job(3))
    assert nodus("apply", ".", "--yes")[0] == 0
    fake.set_phase("default", "run", "Running", stage="Training")
    (project.root / "job.yaml").write_text(training_job(3).replace('"1.00"', '"2.00"'))
    assert nodus("apply", ".", "--yes")[0] == 0
    store = project.open_state()
    try:
        record = store.get(TJ)
        assert record is not None and record.generation == 2 and record.status["launchGeneration"] == 1
        waiting = record.spec["spec"] | {"model": {"uri": f"hf://tiny/model@{REVISION}"}}
        changed = dataclasses.replace(record, spec={**record.spec, "spec": waiting})
        status, launched = reconcile_trainingjob(changed, project=project, store=store)
    finally:
        store.close()
    assert launched is None and status["reason"] == "ModelNotCached" and status["launchGeneration"] == 1
    assert ("cancel", "default", "run") not in fake.calls


def test_a_suspension_asked_in_place_keeps_the_running_generation(project: Project, fake: FakeExecutor) -> None:
    """`nodus patch` of spec.state to Suspended is an in-place update: the pass that suspends the job launches
    nothing, and its status keeps the generation that runs (else refresh would take the patched record's generation
    for a replacement not launched and never read the job again: `nodus wait ...=Suspended` ran to its timeout)."""
    (project.root / "job.yaml").write_text(training_job(3))
    assert nodus("apply", ".", "--yes")[0] == 0
    fake.set_phase("default", "run", "Running", stage="Training")
    code, out, err = nodus("patch", "tj/run", "-p", '{"spec": {"state": "Suspended"}}')
    assert code == 0, out + err
    store = project.open_state()
    try:
        record = store.get(TJ)
    finally:
        store.close()
    assert record is not None and record.generation == 2 and record.status["launchGeneration"] == 1, record.status
    assert ("suspend", "default", "run") in fake.calls


class ResumeRefused(FakeExecutor):
    """A fake whose cluster does not answer a resume (a raised cap cannot reach the running job for now)."""

    def resume(self, project: str, name: str, max_cost_usd: str | None = None) -> None:
        raise TemporaryError("Ray at http://127.0.0.1:9: Failed to connect", delay=15)


def test_a_pass_that_raised_keeps_the_generation_its_run_is(project: Project) -> None:
    """An in-place update whose pass raised launched nothing: the run it has is still its current generation, so a
    refresh goes on following it (not frozen at the failed pass, nor taken for a replacement later)."""
    with bound(project.jobs, ResumeRefused()) as fake:
        assert isinstance(fake, FakeExecutor)
        (project.root / "job.yaml").write_text(training_job(3))
        assert nodus("apply", ".", "--yes")[0] == 0
        fake.set_phase("default", "run", "Running", stage="Training")
        (project.root / "job.yaml").write_text(training_job(3).replace('"1.00"', '"2.00"'))
        code, out, err = nodus("apply", ".", "--yes")
        assert code != 0 and "Failed to connect" in out + err, out + err
        code, out, _ = nodus("get", "tj", "run", "-o", "jsonpath={.status.launchGeneration} {.metadata.generation}")
        assert out.split() == ["1", "2"], out
        assert nodus("refresh")[0] == 0
        code, out, _ = nodus("get", "tj", "run", "-o", "jsonpath={.status.phase}")
        assert out.strip() == "Running", out
        assert [run.spec.generation for run in fake.jobs[("default", "run")]] == [1]
