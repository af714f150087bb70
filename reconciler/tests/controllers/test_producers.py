"""Jobs that feed each other, and names that do not exist, on a FakeExecutor through the apply path the CLI takes.

A missing Volume or Secret, or a pinned revision nothing will make, is refused at plan time naming the file, the
resource and the field, with "did you mean"; a Volume declared in the same repo, or a revision a job of the plan
exports, is not missing. A DPO job reading the Volume an SFT job of the same apply exports to is planned after it
(`# waits for tj/...`), waits Pending (WaitingFor, naming the producer) while the producer runs, launches on the
exported revision once it lands (in the same `apply --wait` loop: `Requeues`), and fails (DependencyFailed, naming the
producer) when the producer fails. No supervisor or subprocess: a real SQLite store in tmp_path, the fake bound.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import pytest
from click.testing import CliRunner

from nodus.cli.main import cli
from nodus.errors import PlanError
from nodus.reconciler.apply import ApplyReport, apply_plan, operations_of, refusals
from nodus.reconciler.controllers.base import ApplyOptions
from nodus.reconciler.executors.choose import bound
from nodus.reconciler.planning.diff import Plan, plan
from nodus.reconciler.planning.managed import read_desired
from nodus.reconciler.planning.render import render_table
from nodus.reconciler.project import Project
from nodus.reconciler.refresh import refresh
from nodus.reconciler.state.records import ResourceKey, StateStore
from nodus.reconciler.waiting import Requeues, blocked_by
from nodus.testing.fake_executor import FakeExecutor

SFT = ResourceKey("TrainingJob", "default", "sft-full")
DPO = ResourceKey("TrainingJob", "default", "a-dpo")  # sorts before its producer: only the dependency orders them
RUNTIME = """apiVersion: nodus.dev/v1beta1
kind: TrainingRuntime
metadata: {name: echo}
spec:
  command: [python, train.py]
  tasks: [SFT]
  outputs: [{name: outputs, path: /nodus/outputs}]
  parameterSchema: {type: object}
"""
VOLUMES = """apiVersion: nodus.dev/v1
kind: Volume
metadata: {name: sft-full-out}
spec: {}
---
apiVersion: nodus.dev/v1
kind: Volume
metadata: {name: chats}
spec: {}
"""
PRODUCER = """apiVersion: nodus.dev/v1beta1
kind: TrainingJob
metadata: {name: sft-full}
spec:
  runtime: echo
  exportTo: {volume: sft-full-out}
"""
CONSUMER = """apiVersion: nodus.dev/v1beta1
kind: TrainingJob
metadata: {name: a-dpo}
spec:
  runtime: echo
  model: {volume: {name: sft-full-out, revision: 1}}
"""


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


def planned(project: Project, store: StateStore, *documents: str) -> Plan:
    spec_file = project.root / "specs.yaml"
    spec_file.write_text("---\n".join(documents), encoding="utf-8")
    return plan(read_desired([spec_file], hint=""), store.list(), observed_serial=store.serial())


def apply(project: Project, store: StateStore, *documents: str) -> ApplyReport:
    """`nodus apply --yes` of these documents: read, planned and applied under the lease as the CLI does."""
    made = planned(project, store, *documents)
    _, report = apply_plan(lambda opened: made, project=project, store=store, options=ApplyOptions(keep_going=True))
    return report


def refused(project: Project, store: StateStore, *documents: str) -> list[str]:
    made = planned(project, store, *documents)
    return [refusal.plan_line() for refusal in refusals(operations_of(made.actions), store, project.root)]


def status_of(store: StateStore, key: ResourceKey) -> dict[str, object]:
    record = store.get(key)
    assert record is not None
    return dict(record.status)


# --- names that do not exist, refused at plan time ------------------------------------------------------------


def test_a_misspelt_data_volume_is_refused_at_plan_time_with_did_you_mean(project: Project, store: StateStore) -> None:
    job = CONSUMER.replace("model: {volume: {name: sft-full-out, revision: 1}}", "data: {volume: chatz}")
    lines = refused(project, store, RUNTIME, VOLUMES, job)
    assert lines == [
        f"{project.root / 'specs.yaml'}: TrainingJob/a-dpo: spec.data.volume: Volume chatz does not exist; did you mean chats? "
        "(or add a Volume chatz (kind: Volume) to the repo, nodus apply it and upload: nodus cp -r DIR vol/chatz:)"
    ]


def test_nodus_plan_refuses_the_missing_volume_in_one_line(project: Project) -> None:
    job = CONSUMER.replace("model: {volume: {name: sft-full-out, revision: 1}}", "data: {volume: chatz}")
    (project.root / "job.yaml").write_text("---\n".join([RUNTIME, VOLUMES, job]), encoding="utf-8")
    result = CliRunner().invoke(cli, ["plan", str(project.root)])
    assert result.exit_code == 1
    assert "job.yaml: TrainingJob/a-dpo: spec.data.volume: Volume chatz does not exist; did you mean chats?" in (
        result.stderr
    )


def test_a_missing_secret_is_refused_with_what_makes_it(project: Project, store: StateStore) -> None:
    job = PRODUCER.replace(
        "  exportTo: {volume: sft-full-out}\n",
        "  tracking: {mlflow: {uri: 'http://127.0.0.1:1', secret: mlflow-tokn}}\n",
    )
    lines = refused(project, store, RUNTIME, job)
    assert (
        len(lines) == 1 and "spec.tracking.mlflow.secret: Secret mlflow-tokn does not exist: add a Secret" in lines[0]
    )


def test_a_volume_declared_in_the_same_repo_is_not_missing(project: Project, store: StateStore) -> None:
    job = CONSUMER.replace("model: {volume: {name: sft-full-out, revision: 1}}", "data: {volume: chats}")
    assert refused(project, store, RUNTIME, VOLUMES, job) == []


def test_a_revision_a_job_of_the_plan_exports_is_not_missing(
    project: Project, store: StateStore, fake: FakeExecutor
) -> None:
    apply(project, store, RUNTIME, VOLUMES)  # the Volume is Ready at revision 0: revision 1 is still to come
    assert refused(project, store, RUNTIME, VOLUMES, PRODUCER, CONSUMER) == []
    lines = refused(project, store, RUNTIME, VOLUMES, CONSUMER)  # nothing exports it: only an upload could
    assert len(lines) == 1
    assert "spec.model.volume.revision: Volume sft-full-out has no revision 1 (its latest is 0)" in lines[0]
    assert "nodus cp -r DIR vol/sft-full-out:" in lines[0]


# --- jobs that feed each other ------------------------------------------------------------------------------


def test_the_plan_orders_the_consumer_after_its_producer_and_says_so(project: Project, store: StateStore) -> None:
    made = planned(project, store, RUNTIME, VOLUMES, CONSUMER, PRODUCER)
    jobs = [action.key for action in made.actions if action.key.kind == "TrainingJob"]
    assert jobs == [SFT, DPO]
    consumer = next(action for action in made.actions if action.key == DPO)
    assert consumer.waits_for == (SFT,)
    assert "      # waits for tj/sft-full" in render_table(made).splitlines()
    assert Plan.from_json(made.to_json()).actions == made.actions  # plan.json keeps it


def test_the_consumer_waits_then_launches_on_the_exported_revision(
    project: Project, store: StateStore, fake: FakeExecutor
) -> None:
    report = apply(project, store, RUNTIME, VOLUMES, CONSUMER, PRODUCER)
    assert report.launched == ["TrainingJob/default/sft-full/gen1/attempt1"] and not report.failed
    waiting = status_of(store, DPO)
    assert (waiting["phase"], waiting["reason"]) == ("Pending", "WaitingFor")
    assert waiting["message"] == (
        "spec.model.volume: waits for TrainingJob sft-full to export Volume sft-full-out revision 1 (it is Pending)"
    )
    assert any(key == DPO and why == "WaitingFor" for key, _, why in report.requeued)
    dpo = store.get(DPO)
    assert dpo is not None and blocked_by(dpo, store) is None  # a wait goes on while the producer may still export

    fake.finish("default", "sft-full", outputs={"model/config.json": b"{}"})
    refresh(project, store)  # what each look of `apply --wait` does: the producer's outputs are exported
    assert status_of(store, SFT)["export"]["revision"] == 1  # type: ignore[index]
    now = [100.0]
    requeues = Requeues(clock=lambda: now[0])
    first = requeues.look(project, store, [DPO])  # first seen: said, and due after the short WaitingFor delay
    assert first == [f"{DPO}: Pending (WaitingFor: {waiting['message']})"] and status_of(store, DPO) == waiting
    now[0] += 5
    lines = requeues.look(project, store, [DPO])
    assert f"{DPO}: launched TrainingJob/default/a-dpo/gen1/attempt1" in lines
    workload = fake.spec_of("default", "a-dpo")
    assert workload.model is not None and workload.model.volume is not None
    assert (workload.model.volume.name, workload.model.volume.revision) == ("sft-full-out", 1)


def test_the_consumer_fails_when_its_producer_fails(project: Project, store: StateStore, fake: FakeExecutor) -> None:
    apply(project, store, RUNTIME, VOLUMES, CONSUMER, PRODUCER)
    fake.finish("default", "sft-full", "Failed", message="out of memory")
    refresh(project, store)
    dpo = store.get(DPO)
    assert dpo is not None
    why = blocked_by(dpo, store)  # a wait ends at once rather than at its timeout
    assert why is not None and why.startswith(
        "TrainingJob sft-full, which was to export Volume sft-full-out, is Failed"
    )
    report = apply(project, store, RUNTIME, VOLUMES, CONSUMER, PRODUCER)  # the next pass over the consumer
    failed = status_of(store, DPO)
    assert (failed["phase"], failed["reason"]) == ("Failed", "DependencyFailed")
    assert str(failed["message"]).startswith(
        "spec.model.volume: TrainingJob sft-full, which was to export Volume sft-full-out revision 1, is Failed "
        "(TrainerFailed: out of memory)"
    )
    assert (DPO, "DependencyFailed", failed["message"]) in report.failed
    assert ("default", "a-dpo") not in fake.jobs  # never launched


def test_a_pinned_revision_that_exists_waits_for_nothing(
    project: Project, store: StateStore, fake: FakeExecutor
) -> None:
    apply(project, store, RUNTIME, VOLUMES, PRODUCER)
    fake.finish("default", "sft-full", outputs={"model/config.json": b"{}"})
    refresh(project, store)
    replaced = PRODUCER.replace("runtime: echo", "runtime: echo\n  parameters: {steps: 2}")
    made = planned(project, store, RUNTIME, VOLUMES, replaced, CONSUMER)
    assert next(action for action in made.actions if action.key == DPO).waits_for == ()  # the plan says so too
    report = apply(project, store, RUNTIME, VOLUMES, replaced, CONSUMER)  # revision 1 is there; gen 2 makes 2
    assert "TrainingJob/default/a-dpo/gen1/attempt1" in report.launched


def test_the_dry_run_names_the_revision_the_consumer_pins(
    project: Project, store: StateStore, fake: FakeExecutor
) -> None:
    apply(project, store, RUNTIME, VOLUMES)  # Ready at revision 0; the producer of the same files will export 1
    (project.root / "jobs.yaml").write_text("---\n".join([RUNTIME, VOLUMES, PRODUCER, CONSUMER]), encoding="utf-8")
    result = CliRunner().invoke(cli, ["apply", "-f", str(project.root / "jobs.yaml"), "--dry-run", "-o", "json"])
    printed = json.loads(result.stdout)
    documents = printed["items"] if isinstance(printed, dict) else printed
    dpo = next(document for document in documents if document["metadata"]["name"] == "a-dpo")
    assert dpo["status"]["workload"]["model"]["volume"] == {"name": "sft-full-out", "revision": 1}


def test_jobs_that_wait_for_each_other_are_refused_at_plan_time(project: Project, store: StateStore) -> None:
    other = PRODUCER.replace(
        "exportTo: {volume: sft-full-out}", "exportTo: {volume: chats}\n  data: {volume: sft-full-out}"
    )
    consumer = CONSUMER.replace(
        "model: {volume: {name: sft-full-out, revision: 1}}",
        "data: {volume: chats}\n  exportTo: {volume: sft-full-out}",
    )
    with pytest.raises(PlanError) as refused_plan:
        planned(project, store, RUNTIME, VOLUMES, other, consumer)
    assert "TrainingJob/a-dpo: waits for itself (TrainingJob/a-dpo -> TrainingJob/sft-full -> TrainingJob/a-dpo)" in (
        refused_plan.value.message
    )


def test_a_jobs_missing_secret_is_refused_naming_its_item(project: Project, store: StateStore) -> None:
    secret = "apiVersion: nodus.dev/v1\nkind: Secret\nmetadata: {name: hf-token}\nspec: {keys: [HF_TOKEN]}\n"
    job = (
        "apiVersion: nodus.dev/v1beta1\nkind: Job\nmetadata: {name: task}\n"
        "spec: {command: [python, -c, pass], secrets: [hf-token, hf-tokn]}\n"
    )
    lines = refused(project, store, secret, job)
    assert len(lines) == 1, lines
    assert lines[0].endswith(
        "Job/task: spec.secrets[1]: Secret hf-tokn does not exist; did you mean hf-token? (or add a Secret hf-tokn "
        "(kind: Secret, spec.keys) to the repo and nodus apply it)"
    )


def test_the_dry_run_does_not_block_on_a_volume_a_job_of_the_same_files_exports(project: Project) -> None:
    (project.root / "jobs.yaml").write_text("---\n".join([RUNTIME, VOLUMES, PRODUCER, CONSUMER]), encoding="utf-8")
    result = CliRunner().invoke(cli, ["apply", "-f", str(project.root / "jobs.yaml"), "--dry-run", "-o", "json"])
    assert result.exit_code == 0, result.stderr  # nothing blocks: apply would run both, in order
    printed = json.loads(result.stdout)
    documents = printed["items"] if isinstance(printed, dict) else printed
    dpo = next(document for document in documents if document["metadata"]["name"] == "a-dpo")
    assert dpo["status"]["blockingReasons"] == []
    assert dpo["status"]["notes"] == [
        "waits for tj/sft-full: apply starts it once their exports are committed (WaitingFor)"
    ]
