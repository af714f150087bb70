"""Admission is a hook of each kind's controller (`Controller.admit`), asked through the registry before anything
of a plan is written: apply itself knows no kind (no comparison with a kind's name, no `.kind ==`)."""

from __future__ import annotations

import ast
from collections.abc import Iterator
from pathlib import Path
from types import ModuleType

import pytest

from nodus.errors import SpecError
from nodus.reconciler import apply, refresh, waiting
from nodus.reconciler.controllers import registry as registry_module
from nodus.reconciler.controllers.agentgroup_controller import AgentGroupController
from nodus.reconciler.controllers.base import AdmissionContext, Context, ControllerBase, Done, Refusal
from nodus.reconciler.controllers.coverage import has_controller
from nodus.reconciler.controllers.registry import REGISTRY, Registry
from nodus.reconciler.controllers.stored_only import StoredOnlyController
from nodus.reconciler.project import Project
from nodus.reconciler.state.records import JSONObject, ResourceKey, ResourceRecord, StateStore
from nodus.specs.registry import BY_KIND

KEY = ResourceKey("Agent", "default", "token")


def document(value: str) -> JSONObject:
    return {"apiVersion": "nodus.dev/v1", "kind": "Agent", "metadata": {"name": "token"}, "spec": {"value": value}}


class Picky(ControllerBase):
    """An Agent controller that refuses a value it does not like, and remembers what it was asked."""

    kind = "Agent"

    def __init__(self) -> None:
        self.asked: list[tuple[ResourceRecord | None, str]] = []

    def reconcile(self, record: ResourceRecord, context: Context) -> Done:
        return Done({"phase": "Ready"})

    def admit(self, record: ResourceRecord | None, desired: JSONObject, context: AdmissionContext) -> list[Refusal]:
        self.asked.append((record, context.action))
        if desired["spec"]["value"] == "bad":
            return [Refusal("BadValue", "spec.value: not this one")]
        return []


@pytest.fixture
def store(tmp_path: Path) -> Iterator[StateStore]:
    (tmp_path / "nodus.lock").write_text("")
    opened = Project.find(tmp_path).open_state()
    try:
        yield opened
    finally:
        opened.close()


@pytest.fixture
def picky(monkeypatch: pytest.MonkeyPatch) -> Picky:
    registry = Registry(StoredOnlyController())
    for registered in REGISTRY:
        registry.register(registered)
    controller = Picky()
    registry.register(controller)
    monkeypatch.setattr(registry_module, "REGISTRY", registry)
    return controller


def test_apply_refuses_what_the_kinds_controller_refuses_and_writes_nothing(
    store: StateStore, picky: Picky, tmp_path: Path
) -> None:
    operations = [apply.Operation("create", KEY, document("bad"), "agent.yaml:1")]
    (refusal,) = apply.refusals(operations, store)
    assert refusal.line() == "agent.yaml:1: Agent/token: BadValue: spec.value: not this one"
    assert refusal.plan_line() == "agent.yaml: Agent/token: spec.value: not this one"
    with pytest.raises(SpecError, match="BadValue"):
        apply.apply_operations(operations, project=Project.find(tmp_path), store=store)
    assert store.get(KEY) is None
    assert picky.asked == [(None, "create"), (None, "create")]


def test_the_hook_gets_the_stored_record_and_is_not_asked_about_noops_or_deletes(
    store: StateStore, picky: Picky
) -> None:
    store.put(KEY, document("good"))
    assert apply.refusals([apply.Operation("update", KEY, document("bad"))], store)[0].reason == "BadValue"
    (stored, action) = picky.asked[-1]
    assert stored is not None and stored.spec["spec"]["value"] == "good" and action == "update"
    picky.asked.clear()
    assert (
        apply.refusals([apply.Operation("noop", KEY, document("bad")), apply.Operation("delete", KEY, None)], store)
        == []
    )
    assert picky.asked == []


def test_a_kind_without_admission_admits_everything(store: StateStore) -> None:
    assert not has_controller("Agent")
    assert apply.refusals([apply.Operation("create", KEY, document("bad"))], store) == []


def test_agent_groups_are_admitted_by_their_controller_and_stay_stored_only() -> None:
    assert isinstance(REGISTRY.for_kind("AgentGroup"), AgentGroupController)
    assert not has_controller("AgentGroup") and "AgentGroup" not in REGISTRY.kinds()
    assert all(controller.kind != "AgentGroup" for controller in REGISTRY)  # refresh observes nothing of it


@pytest.mark.parametrize("module", [apply, refresh, waiting], ids=lambda m: m.__name__.rsplit(".", 1)[-1])
def test_apply_refresh_and_waits_compare_no_kind(module: ModuleType) -> None:
    """No `kind == "TrainingJob"`, no `key.kind in (...)`: each kind's behaviour is its controller's (admission,
    observing, what blocks a wait), asked through the registry."""
    path = Path(str(module.__file__))
    tree = ast.parse(path.read_text())
    found = []
    for node in ast.walk(tree):
        if not isinstance(node, ast.Compare):
            continue
        for operand in [node.left, *node.comparators]:
            names = {sub.value for sub in ast.walk(operand) if isinstance(sub, ast.Constant)} & set(BY_KIND)
            # The kind itself compared (`op.key.kind`, `kind`), not a value computed from it (`wave(kind)`).
            about_kind = (isinstance(operand, ast.Attribute) and operand.attr == "kind") or (
                isinstance(operand, ast.Name) and operand.id == "kind"
            )
            if names or about_kind:
                found.append(f"{path.name}:{node.lineno}: {ast.unparse(node)}")
    assert found == []
