"""`spec.exportTo` without a trainer (a FakeExecutor holds the finished run): outputs committed as the Volume's
next revision once, a link refused, a Volume not Ready waited for, `spec.size` enforced, an output that no longer
matches its sha256 refused; the run stays Succeeded whatever the export did."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from nodus.errors import ConfigError
from nodus.reconciler.controllers.export import exported_status
from nodus.reconciler.executors import Workload, WorkloadKey
from nodus.reconciler.project import Project
from nodus.reconciler.state.records import ResourceKey, ResourceRecord, StateStore
from nodus.testing.fake_executor import FakeExecutor

JOB = ResourceKey("TrainingJob", "default", "run")
VOLUME = ResourceKey("Volume", "default", "results")


@pytest.fixture
def project(tmp_path: Path) -> Project:
    (tmp_path / ".git").mkdir()  # the project root marker: never the repository these tests run in
    found = Project.find(tmp_path)
    assert found.root == tmp_path.resolve()
    return found


@pytest.fixture
def store(project: Project) -> Iterator[StateStore]:
    opened = project.open_state()
    yield opened
    opened.close()


FILES = {"results.json": b'{"ok": true}', "adapter/weights.bin": b"\0" * 1024}


@pytest.fixture
def outputs() -> FakeExecutor:
    """The executor of a run that succeeded with two outputs."""
    fake = FakeExecutor()
    fake.launch(Workload(key=WorkloadKey(project="default", name="run"), command=("train",)))
    fake.finish("default", "run", outputs=FILES)
    return fake


def job(store: StateStore, volume_spec: dict[str, object] | None = None, *, ready: bool = True) -> ResourceRecord:
    store.put(
        VOLUME,
        {"apiVersion": "nodus.dev/v1", "kind": "Volume", "metadata": {"name": "results"}, "spec": volume_spec or {}},
    )
    if ready:
        store.set_status(VOLUME, {"phase": "Ready", "revision": 0, "files": 0, "sizeBytes": 0})
    document = {
        "kind": "TrainingJob",
        "metadata": {"name": "run"},
        "spec": {"runtime": "echo", "exportTo": {"volume": "results"}},
    }
    return store.put(JOB, document)


def test_the_outputs_become_the_next_revision_once(project: Project, store: StateStore, outputs: FakeExecutor) -> None:
    record = job(store)
    status = exported_status(record, {"phase": "Succeeded"}, outputs, project=project, store=store)
    export = status["export"]
    assert (export["phase"], export["revision"], export["files"], export["volume"]) == ("Exported", 1, 2, "results")
    volume = store.get(VOLUME)
    assert volume is not None and volume.status["revision"] == 1
    assert (Path(volume.status["path"]) / "adapter" / "weights.bin").read_bytes() == b"\0" * 1024
    store.set_status(JOB, status)
    again = exported_status(store.get(JOB), {"phase": "Succeeded"}, outputs, project=project, store=store)  # type: ignore[arg-type]
    assert again["export"] == export and store.get(VOLUME).status["revision"] == 1  # type: ignore[union-attr]


def test_only_a_succeeded_run_exports(project: Project, store: StateStore, outputs: FakeExecutor) -> None:
    record = job(store)
    assert exported_status(record, {"phase": "Running"}, outputs, project=project, store=store) == {"phase": "Running"}


def test_a_link_in_the_outputs_is_refused(project: Project, store: StateStore, outputs: FakeExecutor) -> None:
    outputs.finish("default", "run", outputs=FILES, skipped=["leak"])  # what the supervisor did not follow
    status = exported_status(job(store), {"phase": "Succeeded"}, outputs, project=project, store=store)
    assert status["phase"] == "Succeeded" and status["export"]["reason"] == "SymlinkRejected"
    assert "leak" in status["export"]["message"] and store.get(VOLUME).status["revision"] == 0  # type: ignore[union-attr]


def test_a_volume_not_ready_is_waited_for(project: Project, store: StateStore, outputs: FakeExecutor) -> None:
    record = job(store, ready=False)
    waiting = exported_status(record, {"phase": "Succeeded"}, outputs, project=project, store=store)
    assert waiting["export"]["phase"] == "Pending" and waiting["export"]["reason"] == "VolumeNotReady"
    assert waiting["stage"] == "Exporting"  # the seeds' STAGE while the outputs are still to be written
    store.set_status(JOB, waiting)
    store.set_status(VOLUME, {"phase": "Ready", "revision": 0})
    done = exported_status(store.get(JOB), {"phase": "Succeeded"}, outputs, project=project, store=store)  # type: ignore[arg-type]
    assert done["export"]["phase"] == "Exported" and done["export"]["revision"] == 1 and "stage" not in done


def test_a_volume_too_small_keeps_its_revision(project: Project, store: StateStore, outputs: FakeExecutor) -> None:
    status = exported_status(job(store, {"size": "512"}), {"phase": "Succeeded"}, outputs, project=project, store=store)
    assert status["export"]["reason"] == "SizeExceeded"
    volume = store.get(VOLUME)
    assert volume is not None and volume.status["revision"] == 0
    assert not (project.files.root / "volumes" / "default" / "results" / "rev1").exists()


def test_an_output_that_no_longer_matches_is_not_exported(
    project: Project, store: StateStore, outputs: FakeExecutor
) -> None:
    def changed(*args: object, **kwargs: object) -> list[Path]:
        raise ConfigError("outputs/results.json of TrainingJob/run no longer matches the sha256 recorded")

    outputs.copy_outputs = changed  # type: ignore[method-assign]
    status = exported_status(job(store), {"phase": "Succeeded"}, outputs, project=project, store=store)
    assert status["phase"] == "Succeeded" and status["export"]["reason"] == "CopyFailed"
    assert "no longer matches" in status["export"]["message"] and store.get(VOLUME).status["revision"] == 0  # type: ignore[union-attr]
    assert not (project.files.root / "volumes" / "default" / "results" / "rev1").exists()
