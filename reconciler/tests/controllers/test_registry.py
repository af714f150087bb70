"""The controllers' registry: every kind routes to its controller or to the one stored-only controller; an error
a controller raises becomes a result (TemporaryError: Requeue after its delay; PermanentError: Failed), and apply
records it in status and in `failed` as it recorded a refused launch before."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from nodus.errors import ConfigError, PermanentError, TemporaryError
from nodus.reconciler import apply
from nodus.reconciler.controllers import registry as registry_module
from nodus.reconciler.controllers.base import ApplyOptions, Context, ControllerBase, Done, Requeue
from nodus.reconciler.controllers.budget_controller import BudgetController
from nodus.reconciler.controllers.coverage import CONTROLLED_KINDS, has_controller
from nodus.reconciler.controllers.environment_controller import EnvironmentController
from nodus.reconciler.controllers.inferenceendpoint_controller import InferenceEndpointController
from nodus.reconciler.controllers.job_controller import JobController
from nodus.reconciler.controllers.registry import REGISTRY, Registry, reconcile
from nodus.reconciler.controllers.runtime_controller import TrainingRuntimeController
from nodus.reconciler.controllers.secret_controller import SecretController
from nodus.reconciler.controllers.stored_only import StoredOnlyController
from nodus.reconciler.controllers.trainingjob_controller import TrainingJobController
from nodus.reconciler.controllers.volume_controller import VolumeController
from nodus.reconciler.project import Project
from nodus.reconciler.state.records import JSONObject, ResourceKey, ResourceRecord, StateStore
from nodus.specs.registry import BY_KIND

KEY = ResourceKey("Agent", "default", "token")
DOCUMENT: JSONObject = {"apiVersion": "nodus.dev/v1", "kind": "Agent", "metadata": {"name": "token"}, "spec": {}}


class Raising(ControllerBase):
    """A controller whose every pass raises `error` (the host refused, the environment cannot load)."""

    kind = "Agent"

    def __init__(self, error: Exception) -> None:
        self.error = error

    def reconcile(self, record: ResourceRecord, context: Context) -> Done:
        raise self.error


@pytest.fixture
def project(tmp_path: Path) -> Project:
    (tmp_path / "nodus.lock").write_text("")
    return Project.find(tmp_path)


@pytest.fixture
def store(project: Project) -> Iterator[StateStore]:
    opened = project.open_state()
    try:
        yield opened
    finally:
        opened.close()


def with_controller(monkeypatch: pytest.MonkeyPatch, controller: ControllerBase) -> None:
    """The real registry plus `controller` for its kind, where apply looks it up."""
    registry = Registry(StoredOnlyController())
    for registered in REGISTRY:
        registry.register(registered)
    registry.register(controller)
    monkeypatch.setattr(registry_module, "REGISTRY", registry)


def test_every_kind_of_the_specs_routes_to_its_controller_or_the_stored_only_one() -> None:
    expected = {
        "Volume": VolumeController,
        "Environment": EnvironmentController,
        "TrainingRuntime": TrainingRuntimeController,
        "TrainingJob": TrainingJobController,
        "Job": JobController,
        "InferenceEndpoint": InferenceEndpointController,
        "Secret": SecretController,
        "Budget": BudgetController,
    }
    for kind in BY_KIND:
        assert isinstance(REGISTRY.for_kind(kind), expected.get(kind, StoredOnlyController)), kind
        assert has_controller(kind) == (kind in expected)
    assert CONTROLLED_KINDS == REGISTRY.kinds() == frozenset(expected)
    assert {"Agent", "AgentRun", "AgentGroup"} <= set(BY_KIND) - CONTROLLED_KINDS


def test_registering_a_controller_takes_its_kind_out_of_the_stored_only_set(monkeypatch: pytest.MonkeyPatch) -> None:
    with_controller(monkeypatch, Raising(ConfigError("unused")))
    assert has_controller("Agent") and isinstance(registry_module.REGISTRY.for_kind("Agent"), Raising)
    with pytest.raises(ValueError, match="registered already"):
        registry_module.REGISTRY.register(Raising(ConfigError("twice")))


def test_a_stored_only_kind_is_unsupported_and_said_once_per_change(project: Project, store: StateStore) -> None:
    record = store.put(KEY, DOCUMENT)
    said: list[tuple[str, str]] = []
    result = reconcile(record, Context(project, store, report=lambda *line: said.append(line), action="create"))
    assert isinstance(result, Done) and result.status["phase"] == "Unsupported"
    assert said == [("Agent/token", "stored only: nodus has no controller for Agent yet (nothing runs it)")]
    reconcile(record, Context(project, store, report=lambda *line: said.append(line), action="noop"))
    assert len(said) == 1


def test_a_temporary_error_is_a_requeue_after_its_delay(
    project: Project, store: StateStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    with_controller(monkeypatch, Raising(TemporaryError("all 4 runner uid blocks are taken", delay=7)))
    record = store.put(KEY, DOCUMENT)
    result = reconcile(record, Context(project, store))
    assert isinstance(result, Requeue) and (result.after_s, result.reason) == (7, "LaunchFailed")
    assert result.status == {
        "phase": "Failed",
        "reason": "LaunchFailed",
        "message": "all 4 runner uid blocks are taken",
    }

    operation = apply.Operation("create", KEY, DOCUMENT, "secret.yaml:1")
    report = apply.apply_operations([operation], project=project, store=store, options=ApplyOptions(keep_going=True))
    assert report.requeued == [(KEY, 7, "LaunchFailed")]
    assert report.failed == [(KEY, "LaunchFailed", "all 4 runner uid blocks are taken")]
    stored = store.get(KEY)
    assert stored is not None and (stored.status["phase"], stored.status["reason"]) == ("Failed", "LaunchFailed")


def test_a_permanent_error_is_recorded_as_failed_and_ends_an_apply_without_keep_going(
    project: Project, store: StateStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    with_controller(monkeypatch, Raising(PermanentError("the environment does not load")))
    record = store.put(KEY, DOCUMENT)
    result = reconcile(record, Context(project, store))
    assert isinstance(result, Done) and result.failed_now() and isinstance(result.error, PermanentError)

    operation = apply.Operation("create", KEY, DOCUMENT, "secret.yaml:1")
    with pytest.raises(PermanentError, match="the environment does not load"):
        apply.apply_operations([operation], project=project, store=store)  # the controller's pass: it ends
    stored = store.get(KEY)
    assert stored is not None
    assert (stored.status["phase"], stored.status["reason"], stored.status["message"]) == (
        "Failed",
        "LaunchFailed",
        "the environment does not load",
    )
    assert stored.status["source"] == "secret.yaml:1"


def test_any_other_error_is_raised_as_it_is(
    project: Project, store: StateStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    with_controller(monkeypatch, Raising(ConfigError("spec.x: not a thing")))
    record = store.put(KEY, DOCUMENT)
    with pytest.raises(ConfigError, match=r"spec\.x"):
        reconcile(record, Context(project, store))
    operation = apply.Operation("create", KEY, DOCUMENT, None)
    report = apply.apply_operations([operation], project=project, store=store, options=ApplyOptions(keep_going=True))
    assert report.failed == [(KEY, "LaunchFailed", "spec.x: not a thing")]
