"""`nodus plan` is a pure read, like `get`: with a job's supervisor killed, it plans from the stored status and
starts nothing, writes nothing (the store's serial, the status version and the supervisor's pid stay as they
were); `nodus refresh`, `wait` and `apply --wait` recover it under the lease. Set up as `test_pure_reads.py`."""

from __future__ import annotations

import os
import signal
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner

from nodus.cli import plan_apply
from nodus.cli import resources as cli_resources
from nodus.cli.main import cli
from nodus.reconciler import refresh as refresh_module
from nodus.reconciler.controllers import registry as registry_module
from nodus.reconciler.controllers.base import Context, ControllerBase, Done, Heartbeat
from nodus.reconciler.controllers.registry import Registry
from nodus.reconciler.controllers.stored_only import StoredOnlyController
from nodus.reconciler.executors.local.job import read_json
from nodus.reconciler.project import Project
from nodus.reconciler.state.records import Launch, ResourceKey, ResourceRecord, StateStore

NAME = "planned"
KEY = ResourceKey("TrainingJob", "default", NAME)
SECRET = "apiVersion: nodus.dev/v1\nkind: Secret\nmetadata:\n  name: token\nspec:\n  keys: [TOKEN]\n"


def nodus(*args: str) -> tuple[int, str, str]:
    result = CliRunner().invoke(cli, list(args))
    return result.exit_code, result.stdout, result.stderr


def stored(root: Path) -> tuple[int, int, dict[str, Any]]:
    """The store's serial, the record's status version and its status."""
    store = Project.find(root).open_state()
    try:
        record = store.get(KEY)
        assert record is not None
        return store.serial(), record.status_version, record.status
    finally:
        store.close()


def test_plan_of_a_lost_job_changes_nothing(tmp_path: Path, make_jobs: Callable[..., Any]) -> None:
    root = tmp_path / "project"
    (root / ".nodus").mkdir(parents=True)
    (root / "nodus.lock").write_text("lockfileVersion: 1\n")
    (root / "specs").mkdir()
    (root / "specs" / "secret.yaml").write_text(SECRET)
    (tmp_path / "jobs").mkdir()
    (root / ".nodus" / "jobs").symlink_to(tmp_path / "jobs", target_is_directory=True)
    store = Project.find(root).open_state()
    try:
        document = {"apiVersion": "nodus.dev/v1beta1", "kind": "TrainingJob", "metadata": {"name": NAME}}
        store.put(KEY, {**document, "spec": {"runtime": "echo"}})
        store.record_launch(Launch(f"TrainingJob/default/{NAME}/gen1/attempt1", KEY, job=NAME))
    finally:
        store.close()
    jobs = make_jobs()
    launched = jobs.spec(NAME, parameters={"steps": 40, "sleepS": 0.1})
    spec = launched.with_changes(key=launched.key.model_copy(update={"project": "default"}))
    files = jobs.launch(spec)
    executor = jobs.executor
    jobs.until(lambda: (read_json(files.state / "checkpoint.json") or {}).get("step", -1) >= 1, "a checkpoint")
    code, out, err = nodus("refresh", str(root))
    assert code == 0 and f"TrainingJob/{NAME}: - -> Running" in out.splitlines()[0], out + err
    os.kill(executor.status("default", NAME)["supervisorPid"], signal.SIGKILL)
    jobs.until(lambda: not executor.is_alive("default", NAME), "the lost supervisor to be noticed")
    supervisor = (read_json(files.supervisor) or {}).get("pid")
    before = stored(root)
    assert before[2]["phase"] == "Running"

    code, out, err = nodus("plan", str(root / "specs"))
    assert code == 2, out + err
    assert "  + Secret/token" in out.splitlines()[0] and f"TrainingJob/{NAME}" in out, out

    assert stored(root) == before  # serial, status version and status: nothing was written
    assert not executor.is_alive("default", NAME)  # nothing was started
    assert (read_json(files.supervisor) or {}).get("pid") == supervisor
    code, out, err = nodus("refresh", str(root))
    assert code == 0 and "its supervisor was lost: restarted it (attempt 2)" in out, out + err
    assert executor.wait("default", NAME, timeout_s=120)["phase"] == "Succeeded"


class Beating(ControllerBase):
    """A TrainingJob controller whose job reports step 5 while its stored status says step 2."""

    kind = "TrainingJob"
    heartbeats = True

    def reconcile(self, record: ResourceRecord, context: Context) -> Done:
        raise AssertionError("plan reconciles nothing")

    def observe(self, record: ResourceRecord, context: Context) -> Done | None:
        raise AssertionError("plan observes nothing")

    def heartbeat(self, record: ResourceRecord, project: Project) -> Heartbeat | None:
        return Heartbeat(at=float(record.updated_at or 0) + 1, phase="Running", step=5)


def test_plan_says_when_a_status_is_older_than_its_heartbeat(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    (tmp_path / "nodus.lock").write_text("")
    project = Project.find(tmp_path)
    store = project.open_state()
    try:
        store.put(KEY, {"apiVersion": "nodus.dev/v1beta1", "kind": "TrainingJob", "metadata": {"name": NAME}})
        store.set_status(KEY, {"phase": "Running", "step": 2})
        # A launched job (one that never launched has no heartbeat to ask an executor for).
        store.record_launch(Launch(f"TrainingJob/default/{NAME}/gen1/attempt1", KEY, job=NAME))
        registry = Registry(StoredOnlyController())
        registry.register(Beating())
        monkeypatch.setattr(registry_module, "REGISTRY", registry)
        monkeypatch.setattr(cli_resources, "REGISTRY", registry)  # read_heartbeats holds its own name for it
        serial = store.serial()
        plan_apply._note_statuses_behind(project, store)
        assert store.serial() == serial
    finally:
        store.close()
    assert capsys.readouterr().err.strip() == (
        f"note: the status of TrainingJob/{NAME} is older than its job's heartbeat: run nodus refresh"
    )


def test_apply_wait_refreshes_under_the_apply_lease_and_skips_a_look_while_another_holds_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    (tmp_path / "nodus.lock").write_text("")
    project = Project.find(tmp_path)
    store = project.open_state()
    seen: list[str | None] = []

    def refresh(project: Project, store: StateStore, registry: Registry = registry_module.REGISTRY) -> list[Any]:
        lease = store.current_lease("apply")
        seen.append(None if lease is None else lease.operation)
        store.set_status(KEY, {"phase": "Succeeded"})  # what the look found: the job ended
        return []

    monkeypatch.setattr(refresh_module, "refresh", refresh)
    try:
        store.put(KEY, {"apiVersion": "nodus.dev/v1beta1", "kind": "TrainingJob", "metadata": {"name": NAME}})
        store.set_status(KEY, {"phase": "Running"})
        other = store.acquire_lease("apply", "someone@elsewhere pid 1", "apply elsewhere", 60)
        monkeypatch.setattr(plan_apply.time, "sleep", lambda seconds: store.release_lease(other))
        assert plan_apply.wait_for(project, store, [KEY], "1m") == []
        assert store.current_lease("apply") is None
    finally:
        store.close()
    assert seen == ["apply --wait"]  # the first look was skipped (another held the lease), the second held it
