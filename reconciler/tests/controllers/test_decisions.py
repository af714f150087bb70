"""The TrainingJob and Job controllers' decisions on a FakeExecutor, through the apply path the CLI takes: one
launch under repeated and interrupted applies, an in-place update that keeps the run, a replace that launches the
next generation, a cap that suspends and a raised cap that resumes, a lost run restarted up to
`spec.recovery.maxAttempts` then Failed with SupervisorLost, and a job blocked on a dependency that requeues and
that `nodus wait`'s loop reports and looks at again. No podman, supervisor or subprocess: a real SQLite store in
tmp_path, and `executors.choose.bound` handing the controllers the fake."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from click.testing import CliRunner

from nodus.cli.main import cli
from nodus.reconciler.apply import ApplyReport, apply_plan
from nodus.reconciler.controllers.base import ApplyOptions
from nodus.reconciler.executors import JobSpec
from nodus.reconciler.executors.choose import bound
from nodus.reconciler.gitops.loop import Stop, between_passes
from nodus.reconciler.planning.diff import Plan, plan
from nodus.reconciler.planning.managed import read_desired
from nodus.reconciler.project import Project
from nodus.reconciler.refresh import refresh
from nodus.reconciler.state.records import ResourceKey, StateStore
from nodus.reconciler.waiting import Requeues
from nodus.testing.fake_executor import FakeExecutor

TJ = ResourceKey("TrainingJob", "default", "run")
JOB = ResourceKey("Job", "default", "task")
ENV = ResourceKey("Environment", "default", "words")
RUNTIME = """apiVersion: nodus.dev/v1beta1
kind: TrainingRuntime
metadata: {name: echo}
spec:
  command: [python, train.py]
  tasks: [SFT]
  environmentTasks: AttemptAPI
  parameterSchema:
    type: object
    additionalProperties: false
    properties: {steps: {type: integer, minimum: 1}}
  defaults: {steps: 3}
"""


def training_job(*, cap: str = "1.00", steps: int = 3, label: str = "a", recovery: int | None = None) -> str:
    extra = f"  recovery: {{maxAttempts: {recovery}}}\n" if recovery is not None else ""
    return f"""apiVersion: nodus.dev/v1beta1
kind: TrainingJob
metadata: {{name: run, labels: {{team: {label}}}}}
spec:
  runtime: echo
  task: SFT
  parameters: {{steps: {steps}}}
  maxCostUSD: "{cap}"
{extra}"""


@pytest.fixture
def project(tmp_path: Path) -> Project:
    (tmp_path / ".git").mkdir()  # the project root marker: never the repository these tests run in
    return Project.find(tmp_path)


@pytest.fixture
def store(project: Project) -> Iterator[StateStore]:
    opened = project.open_state()
    yield opened
    opened.close()


@pytest.fixture
def fake(project: Project) -> Iterator[FakeExecutor]:
    with bound(project.jobs, FakeExecutor()) as executor:
        assert isinstance(executor, FakeExecutor)
        yield executor


def apply(project: Project, store: StateStore, *documents: str, keep_going: bool = True) -> ApplyReport:
    """`nodus apply --yes` of these documents: read, planned and applied under the lease as the CLI does."""
    spec_file = project.root / "specs.yaml"
    spec_file.write_text("---\n".join(documents), encoding="utf-8")
    desired = read_desired([spec_file], hint="")

    def make_plan(opened: StateStore) -> Plan:
        return plan(desired, opened.list(), prune=False, refresh_only=False, observed_serial=opened.serial())

    _, report = apply_plan(make_plan, project=project, store=store, options=ApplyOptions(keep_going=keep_going))
    return report


def launches(fake: FakeExecutor) -> list[tuple[object, ...]]:
    return [call for call in fake.calls if call[0] == "launch" and fake.jobs[(call[1], call[2])]]


def status_of(store: StateStore, key: ResourceKey = TJ) -> dict[str, object]:
    record = store.get(key)
    assert record is not None
    return dict(record.status)


def started(fake: FakeExecutor, name: str = "run") -> list[tuple[int, int]]:
    """The (generation, attempt) of every run the fake holds for the job, as launched."""
    return [(run.spec.generation, run.spec.attempt) for run in fake.jobs.get(("default", name), [])]


def test_twenty_applies_launch_once(project: Project, store: StateStore, fake: FakeExecutor) -> None:
    reports = [apply(project, store, RUNTIME, training_job()) for _ in range(20)]
    assert [len(report.launched) for report in reports] == [1] + [0] * 19
    assert started(fake) == [(1, 1)]
    assert status_of(store)["phase"] == "Pending" and status_of(store)["launchGeneration"] == 1


class LaunchThenDie(FakeExecutor):
    """A fake whose first launch goes through and then raises, as an apply killed between the executor's launch
    and the status write would leave things."""

    def __init__(self) -> None:
        super().__init__()
        self.died = False

    def launch(self, spec: JobSpec) -> None:
        super().launch(spec)
        if not self.died:
            self.died = True
            raise KeyboardInterrupt("killed after the launch")


def test_an_apply_interrupted_after_the_launch_launches_nothing_again(project: Project, store: StateStore) -> None:
    with bound(project.jobs, LaunchThenDie()) as dying:
        assert isinstance(dying, LaunchThenDie)
        with pytest.raises(KeyboardInterrupt):
            apply(project, store, RUNTIME, training_job())
        assert "launchGeneration" not in status_of(store)  # the status write never happened
        for _ in range(3):
            apply(project, store, RUNTIME, training_job())
        assert started(dying) == [(1, 1)]
        assert status_of(store)["launchGeneration"] == 1


def test_an_in_place_update_keeps_the_run(project: Project, store: StateStore, fake: FakeExecutor) -> None:
    apply(project, store, RUNTIME, training_job())
    fake.set_phase("default", "run", "Running", stage="Training", step=1)
    report = apply(project, store, RUNTIME, training_job(cap="2.00", label="b"))
    assert report.written == [("update", TJ)] and report.launched == []
    assert started(fake) == [(1, 1)] and ("cancel", "default", "run") not in fake.calls
    assert status_of(store)["phase"] == "Running" and status_of(store)["launchGeneration"] == 1
    assert fake.spec_of("default", "run").max_cost_usd == "2.00"  # the running job takes the raised cap


def test_a_replace_cancels_the_run_and_launches_the_next_generation(
    project: Project, store: StateStore, fake: FakeExecutor
) -> None:
    apply(project, store, RUNTIME, training_job())
    fake.set_phase("default", "run", "Running")
    report = apply(project, store, RUNTIME, training_job(steps=5))
    assert report.written == [("replace", TJ)] and len(report.launched) == 1
    assert ("cancel", "default", "run") in fake.calls
    assert started(fake) == [(1, 1), (2, 1)]
    assert fake.observe("default", "run", generation=1).phase == "Cancelled"
    assert status_of(store)["launchGeneration"] == 2 and status_of(store)["phase"] == "Pending"
    assert fake.spec_of("default", "run").params["parameters"] == {"steps": 5}


def test_a_cap_suspends_and_a_raised_cap_resumes(project: Project, store: StateStore, fake: FakeExecutor) -> None:
    apply(project, store, RUNTIME, training_job(cap="1.00"))
    fake.set_phase("default", "run", "Suspended", reason="MaxCostReached", cost_usd="1.00")
    refresh(project, store)
    assert (status_of(store)["phase"], status_of(store)["reason"]) == ("Suspended", "MaxCostReached")
    apply(project, store, RUNTIME, training_job(cap="1.00", label="b"))  # any other change: still Suspended
    assert status_of(store)["phase"] == "Suspended" and not any(call[0] == "resume" for call in fake.calls)
    apply(project, store, RUNTIME, training_job(cap="3.00"))
    assert ("resume", "default", "run", "3.00") in fake.calls
    assert (status_of(store)["phase"], status_of(store)["reason"]) == ("Pending", "Resumed")
    assert started(fake) == [(1, 1)]  # the same run goes on from its state


@pytest.mark.parametrize("allowed", [0, 2])
def test_a_lost_run_is_restarted_up_to_max_attempts_then_fails_supervisor_lost(
    project: Project, store: StateStore, fake: FakeExecutor, allowed: int
) -> None:
    apply(project, store, RUNTIME, training_job(recovery=allowed))
    for attempt in range(1, allowed + 1):
        fake.set_phase("default", "run", "Running")
        fake.lose("default", "run")
        [change] = refresh(project, store)
        assert change.notes == [f"its supervisor was lost: restarted it (attempt {attempt + 1})"]
        assert (status_of(store)["phase"], status_of(store)["attempt"]) == ("Pending", attempt + 1)
    fake.set_phase("default", "run", "Running")
    fake.lose("default", "run")
    refresh(project, store)
    status = status_of(store)
    assert (status["phase"], status["reason"]) == ("Failed", "SupervisorLost")
    assert f"maxAttempts {allowed} allows no more restarts" in str(status["message"])
    assert [call[0] for call in fake.calls].count("restart") == allowed
    assert refresh(project, store) == [] and [call[0] for call in fake.calls].count("abandon") == 1


def test_a_lost_job_is_recovered_by_the_default_recovery(
    project: Project, store: StateStore, fake: FakeExecutor
) -> None:
    document = "apiVersion: nodus.dev/v1beta1\nkind: Job\nmetadata: {name: task}\nspec:\n  command: [echo, hi]\n"
    apply(project, store, document)
    fake.lose("default", "task")
    refresh(project, store)
    assert (status_of(store, JOB)["phase"], status_of(store, JOB)["attempt"]) == ("Pending", 2)
    assert started(fake, "task") == [(1, 2)]


def test_a_job_blocked_on_an_environment_requeues_and_wait_reports_and_retries_it(
    project: Project, store: StateStore, fake: FakeExecutor
) -> None:
    document = training_job().replace("  task: SFT\n", "  task: SFT\n  environment: {name: words@1.0.0}\n")
    store.put(ENV, ENVIRONMENT)
    store.set_status(ENV, {"phase": "Pending", "reason": "Building", "message": "nodus-build is running"})
    report = apply(project, store, RUNTIME, document)  # as blocked() does, keeping the report
    assert report.requeued == [(TJ, 30.0, "EnvironmentNotReady")] and report.launched == []
    assert fake.calls == []

    now = [1000.0]
    requeues = Requeues(clock=lambda: now[0])
    lines = requeues.look(project, store, [TJ])
    assert lines == ["TrainingJob/run: Pending (EnvironmentNotReady: Environment words is not Ready (Building))"]
    assert requeues.look(project, store, [TJ]) == []  # said once; not looked at again before the delay
    store.set_status(ENV, READY)
    now[0] += 29.0
    requeues.look(project, store, [TJ])
    assert fake.calls == []  # no spinning: the delay is not over
    now[0] += 1.0
    lines = requeues.look(project, store, [TJ])
    assert started(fake) == [(1, 1)] and status_of(store)["phase"] == "Pending"
    assert lines == [
        "TrainingJob/run: launched TrainingJob/default/run/gen1/attempt1",
        "TrainingJob/run: Pending (Launched)",
    ]


ENVIRONMENT = {
    "apiVersion": "nodus.dev/v1",
    "kind": "Environment",
    "metadata": {"name": "words"},
    "spec": {"version": "1.0.0", "package": {"path": "words", "loader": "words:load"}},
}
READY = {"phase": "Ready", "graderImage": "localhost/words:1.0.0", "graderImageId": "sha256:" + "0" * 64}


def blocked(project: Project, store: StateStore) -> None:
    """A TrainingJob applied while its Environment is still being built elsewhere (not Ready, not failed)."""
    document = training_job().replace("  task: SFT\n", "  task: SFT\n  environment: {name: words@1.0.0}\n")
    store.put(ENV, ENVIRONMENT)
    store.set_status(ENV, {"phase": "Pending", "reason": "Building", "message": "nodus-build is running"})
    apply(project, store, RUNTIME, document)


def test_nodus_wait_reports_what_a_requeued_job_waits_on(
    project: Project, store: StateStore, fake: FakeExecutor
) -> None:
    blocked(project, store)
    result = CliRunner().invoke(
        cli, ["wait", "tj/run", "--for=jsonpath={.status.phase}=Running", "--timeout=1s", "--path", str(project.root)]
    )
    assert result.exit_code == 1, result.output
    assert "TrainingJob/run: Pending (EnvironmentNotReady: Environment words is not Ready (Building))" in result.stderr
    assert "timed out waiting for TrainingJob/run" in result.stderr and fake.calls == []


def test_the_controller_loop_reconciles_a_requeued_job_between_passes(
    project: Project, store: StateStore, fake: FakeExecutor
) -> None:
    blocked(project, store)
    store.set_status(ENV, READY)
    said: list[str] = []
    between_passes(Stop(), Requeues(first_after_s=0.0), project, store, 0.0, lambda _, text: said.append(text))
    assert started(fake) == [(1, 1)] and said == ["TrainingJob/run: launched TrainingJob/default/run/gen1/attempt1"]
