"""The planner's edge cases: which action a change gets, field paths, order, staleness and plan.json."""

from __future__ import annotations

import copy
import json
from typing import Any

import pytest

from nodus.errors import PlanError
from nodus.reconciler.planning import Desired, Plan, desired_from, plan, stale_reasons, wave_of
from nodus.reconciler.planning.diff import WAVES, diff_documents, format_path
from nodus.reconciler.state.records import ResourceKey, ResourceRecord, spec_hash
from nodus.specs.parse import parse_text
from nodus.specs.registry import KINDS

SECRET = """apiVersion: nodus.dev/v1
kind: Secret
metadata:
  name: hf-token
  labels: {team: support}
spec:
  keys: [HF_TOKEN]
"""
ENVIRONMENT = """apiVersion: nodus.dev/v1
kind: Environment
metadata:
  name: reverse-words
spec:
  version: 1.0.0
  package:
    path: ./reverse-words
  description: Reverse each word.
"""


def _desired(*texts: str) -> list[Desired]:
    result = parse_text("---\n".join(texts), "specs.yaml")
    assert result.ok, [str(problem) for problem in result.errors]
    return desired_from(result.resources)


def _stored(item: Desired, edit: Any = None, *, generation: int = 1, deleting: bool = False) -> ResourceRecord:
    """The record apply would have stored, optionally as an earlier version (`edit` changes the document)."""
    document = copy.deepcopy(item.document)
    if edit is not None:
        edit(document)
    return ResourceRecord(item.key, document, spec_hash(document), generation=generation, deleting=deleting)


def _only(desired: list[Desired], observed: list[ResourceRecord], **options: Any) -> Any:
    (action,) = plan(desired, observed, **options).actions
    return action


def test_every_kind_has_a_wave() -> None:
    assert sorted(WAVES) == sorted(cls.KIND for cls in KINDS)
    assert wave_of("Secret") < wave_of("TrainingJob") < wave_of("AgentRun") < wave_of("Retired")


def test_a_removed_field_is_an_in_place_update() -> None:
    (env,) = _desired(ENVIRONMENT.replace("  description: Reverse each word.\n", ""))
    record = _stored(env, lambda doc: doc["spec"].update(description="Reverse each word."), generation=2)
    action = _only([env], [record])
    assert action.type == "update"
    assert [(c.path, c.op, c.before, c.after) for c in action.changes] == [
        ("spec.description", "remove", "Reverse each word.", None)
    ]
    assert action.expected_generation == 2


def test_a_list_of_another_length_is_one_change_and_may_force_replacement() -> None:
    (env,) = _desired(ENVIRONMENT.replace("  description:", "  modes: [Train]\n  description:"))
    action = _only([env], [_stored(env, lambda doc: doc["spec"].update(modes=["Train", "Evaluate"]))])
    assert action.type == "replace"
    assert action.forced_by == "spec.modes"
    assert [(c.path, c.before, c.after) for c in action.changes] == [("spec.modes", ["Train", "Evaluate"], ["Train"])]


def test_a_list_item_changed_in_place() -> None:
    (secret,) = _desired(SECRET.replace("[HF_TOKEN]", "[HF_TOKEN, WANDB_KEY]"))
    action = _only([secret], [_stored(secret, lambda doc: doc["spec"].update(keys=["HF_TOKEN", "OLD_KEY"]))])
    assert action.type == "update"
    assert [(c.path, c.op, c.before, c.after) for c in action.changes] == [
        ("spec.keys[1]", "change", "OLD_KEY", "WANDB_KEY")
    ]


def test_labels_and_annotations_change_in_place() -> None:
    (env,) = _desired(
        ENVIRONMENT.replace("  name: reverse-words\n", "  name: reverse-words\n  labels: {nodus.dev/team: a}\n")
    )

    def earlier(doc: dict[str, Any]) -> None:
        doc["metadata"]["labels"] = {"nodus.dev/team": "b"}
        doc["metadata"]["annotations"] = {"note": "x"}

    action = _only([env], [_stored(env, earlier)])
    assert action.type == "update"
    assert [(c.path, c.op) for c in action.changes] == [
        ('metadata.labels["nodus.dev/team"]', "change"),
        ("metadata.annotations.note", "remove"),
    ]
    assert action.forced_by is None


def test_a_nested_in_place_path_is_in_place_and_its_sibling_is_not() -> None:
    (env,) = _desired(ENVIRONMENT)
    in_place = _only([env], [_stored(env, lambda doc: doc["spec"]["grading"].update(maxParallel=2))])
    assert (in_place.type, in_place.changes[0].path) == ("update", "spec.grading.maxParallel")
    replaced = _only([env], [_stored(env, lambda doc: doc["spec"]["grading"].update(grader="ExactMatch"))])
    assert (replaced.type, replaced.forced_by) == ("replace", "spec.grading.grader")


def test_json_types_are_told_apart() -> None:
    """true, 1 and 1.0 are equal in Python and different in JSON (and in the spec hash)."""
    before = {"spec": {"parameters": {"a": True, "b": 1, "c": [1]}}}
    after = {"spec": {"parameters": {"a": 1, "b": 1.0, "c": [True]}}}
    assert [(c.path, c.before, c.after) for c in diff_documents(before, after)] == [
        ("spec.parameters.a", True, 1),
        ("spec.parameters.b", 1, 1.0),
        ("spec.parameters.c[0]", 1, True),
    ]


def test_an_object_added_whole_is_shown_field_by_field_and_an_empty_one_as_itself() -> None:
    changes = diff_documents({"spec": {"e": {}}}, {"spec": {"tracking": {"project": "p", "tags": []}}})
    assert [(c.path, c.op) for c in changes] == [
        ("spec.tracking.project", "add"),
        ("spec.tracking.tags", "add"),
        ("spec.e", "remove"),
    ]


def test_odd_keys_are_quoted_in_paths() -> None:
    assert format_path(("spec", "env", "MY_VAR")) == "spec.env.MY_VAR"
    assert format_path(("spec", "parameters", "a b", 0, "c.d")) == 'spec.parameters["a b"][0]["c.d"]'


def test_two_projects_with_the_same_name_are_two_resources() -> None:
    team_a = SECRET.replace("  name: hf-token\n", "  name: hf-token\n  project: team-a\n")
    team_b = SECRET.replace("  name: hf-token\n", "  name: hf-token\n  project: team-b\n")
    a, b = _desired(team_a, team_b)
    planned = plan([a, b], [_stored(a)])
    assert [(action.type, str(action.key)) for action in planned.actions] == [
        ("noop", "Secret/team-a/hf-token"),
        ("create", "Secret/team-b/hf-token"),
    ]
    assert planned.summary == "Plan: 1 to add, 0 to change, 0 to replace, 0 to destroy, 1 unchanged."


def test_a_key_planned_twice_is_refused() -> None:
    (secret,) = _desired(SECRET)
    with pytest.raises(PlanError, match="Secret/hf-token: defined twice"):
        plan([secret, secret], [])


def test_a_resource_being_deleted_is_replaced() -> None:
    (secret,) = _desired(SECRET)
    action = _only([secret], [_stored(secret, deleting=True)])
    assert action.type == "replace"
    assert action.forced_by is None and action.expected_deleting
    assert "being deleted" in action.reason


def test_a_record_being_deleted_is_neither_unmanaged_nor_deleted_again() -> None:
    (secret,) = _desired(SECRET)
    gone = ResourceRecord(ResourceKey("Volume", "default", "old"), {}, spec_hash({}), deleting=True)
    for prune in (False, True):
        planned = plan([secret], [_stored(secret), gone], prune=prune)
        assert planned.unmanaged == () and not planned.has_changes


def test_deletes_come_last_in_reverse_waves() -> None:
    (secret,) = _desired(SECRET)
    records = [
        ResourceRecord(ResourceKey(kind, "default", "old"), {}, spec_hash({}))
        for kind in ("Volume", "Retired", "AgentRun", "TrainingJob")
    ]
    planned = plan([secret], records, prune=True)
    assert [(action.type, action.key.kind) for action in planned.actions] == [
        ("create", "Secret"),
        ("delete", "Retired"),
        ("delete", "AgentRun"),
        ("delete", "TrainingJob"),
        ("delete", "Volume"),
    ]


def test_refresh_only_plans_nothing() -> None:
    (secret,) = _desired(SECRET)
    planned = plan([secret], [_stored(secret, lambda doc: doc["spec"].update(keys=[]))], refresh_only=True)
    assert planned.actions == () and planned.exit_code == 0
    assert planned.summary == "Refresh only: 1 resource observed, no changes planned."
    assert Plan.from_json(planned.to_json()) == planned


def test_stale_when_marked_for_deletion_or_when_a_pruning_plan_would_miss_a_record() -> None:
    (secret,) = _desired(SECRET)
    record = _stored(secret, generation=7)
    planned = plan([secret], [record], prune=True, observed_serial=3)
    marked = ResourceRecord(record.key, record.spec, record.spec_hash, generation=7, deleting=True)
    newcomer = ResourceRecord(ResourceKey("Volume", "default", "late"), {}, spec_hash({}))
    assert stale_reasons(planned, [marked, newcomer]) == [
        "Secret/hf-token was marked for deletion since the plan",
        "Volume/late was created since the plan",
    ]
    # A plan that does not prune does not care about records it never touches.
    assert stale_reasons(plan([secret], [record]), [record, newcomer]) == []


def test_status_writes_do_not_make_a_plan_stale() -> None:
    (secret,) = _desired(SECRET)
    record = _stored(secret)
    planned = plan([secret], [record], observed_serial=10)
    busy = ResourceRecord(record.key, record.spec, record.spec_hash, status={"phase": "Ready"}, status_version=9)
    assert stale_reasons(planned, [busy]) == []


def _saved() -> dict[str, Any]:
    (secret, env) = _desired(SECRET, ENVIRONMENT)
    return dict(json.loads(plan([secret, env], [_stored(secret, lambda doc: doc["spec"].update(keys=[]))]).to_json()))


@pytest.mark.parametrize(
    ("damage", "message"),
    [
        (lambda data: "{not json", r"^plan\.json: not a nodus plan: invalid JSON at line 1 column 2$"),
        (lambda data: {**data, "format": "terraform"}, r'^plan\.json: not a nodus plan \(no "format": "nodus-plan"\)$'),
        (
            lambda data: {**data, "version": 2},
            r"^plan\.json: plan format version 2 is not readable here \(this nodus reads 1\)$",
        ),
        (lambda data: {**data, "observedSerial": "7"}, r'^plan\.json: observedSerial: must be an integer \(got "7"\)$'),
        (
            lambda data: _edit_action(data, 1, lambda a: a["desired"]["spec"].update(version="9.9.9")),
            r"^plan\.json: actions\[1\] \(Environment/reverse-words\): desired: the document does not match desiredHash",
        ),
        (
            lambda data: _edit_action(data, 0, lambda a: a.update(action="upsert")),
            r"^plan\.json: actions\[0\] \(Secret/hf-token\): action: must be one of create, update, replace, delete, noop",
        ),
        (
            lambda data: _edit_action(data, 0, lambda a: a.update(name="other")),
            r"^plan\.json: actions\[0\] \(Secret/other\): desired: the document's kind, project and name are not",
        ),
        (
            lambda data: _edit_action(data, 0, lambda a: a["changes"][0].update(op="move")),
            r"^plan\.json: actions\[0\] \(Secret/hf-token\)\.changes\[0\]: op: must be one of add, remove, change",
        ),
    ],
)
def test_a_damaged_plan_file_is_named_in_one_line(damage: Any, message: str) -> None:
    damaged = damage(_saved())
    text = damaged if isinstance(damaged, str) else json.dumps(damaged)
    with pytest.raises(PlanError, match=message) as caught:
        Plan.from_json(text, "plan.json")
    assert len(caught.value.message.splitlines()) == 1
    assert caught.value.hint == "make a new plan with `nodus plan --out plan.json`"


def _edit_action(data: dict[str, Any], index: int, edit: Any) -> dict[str, Any]:
    edit(data["actions"][index])
    return data


def test_exit_codes() -> None:
    (secret,) = _desired(SECRET)
    assert plan([secret], []).exit_code == 2
    assert plan([secret], [_stored(secret)]).exit_code == 0


def test_what_the_sdk_created_is_never_unmanaged_nor_pruned() -> None:
    (secret,) = _desired(SECRET)
    document = {"metadata": {"name": "reward-0123456789", "labels": {"nodus.dev/created-by": "sdk"}}, "spec": {}}
    sdk = ResourceRecord(ResourceKey("TrainingJob", "default", "reward-0123456789"), document, spec_hash(document))
    other = ResourceRecord(ResourceKey("TrainingJob", "default", "by-hand"), {}, spec_hash({}))
    kept = plan([secret], [_stored(secret), sdk, other])
    assert kept.unmanaged == (other.key,)
    pruned = plan([secret], [_stored(secret), sdk, other], prune=True)
    assert [(a.type, a.key.name) for a in pruned.actions if a.type != "noop"] == [("delete", "by-hand")]


JOB = """apiVersion: nodus.dev/v1beta1
kind: TrainingJob
metadata: {name: quickstart}
spec:
  runtime: nodus/grpo-lora
  environment: {name: reverse-words@1.0.0}
  parameters: {steps: 3}
"""


@pytest.mark.parametrize(
    ("status", "kept"),
    [
        ({"phase": "Succeeded", "launchGeneration": 2}, {"generation": 2, "what": "outputs"}),
        ({"phase": "Failed", "reason": "TrainerFailed", "launchGeneration": 1}, {"generation": 1, "what": "logs"}),
        ({"phase": "Failed", "reason": "InvalidParameters"}, None),  # refused at admission: never launched
    ],
)
def test_a_replaced_job_keeps_what_its_observed_run_left(status: dict[str, Any], kept: dict[str, Any] | None) -> None:
    from dataclasses import replace

    from nodus.reconciler.planning.render import render_table

    (item,) = _desired(JOB.replace("steps: 3", "steps: 5"))
    stored = _stored(item, lambda d: d["spec"]["environment"].update(name="reverse-words@0.9.0"))
    action = _only([item], [replace(stored, status=status)])
    assert action.type == "replace"
    assert (action.keeps.to_dict() if action.keeps else None) == kept
    text = render_table(Plan((action,)))
    if kept and kept["what"] == "logs":
        assert "# keeps generation 1's logs: nodus logs tj/quickstart --generation 1" in text
    elif kept:
        assert "# keeps generation 2's outputs: nodus cp tj/quickstart:outputs/... --generation 2" in text
    else:
        assert "keeps" not in text


JOB_WITH_CAP = """apiVersion: nodus.dev/v1beta1
kind: TrainingJob
metadata: {name: capped}
spec:
  runtime: nodus/grpo-lora
  maxCostUSD: "2.00"
"""


def test_a_cap_higher_live_than_in_the_file_is_drift_kept_live() -> None:
    (item,) = _desired(JOB_WITH_CAP)
    raised = _stored(item, lambda document: document["spec"].update(maxCostUSD="40.00"))
    action = _only([item], [raised])
    # The live cap stays: nothing else differs, so nothing is done, and the drift says what to edit.
    assert action.type == "noop" and action.desired["spec"]["maxCostUSD"] == "40.00"
    assert [(drift.path, drift.live, drift.file) for drift in action.drift] == [("spec.maxCostUSD", "40.00", "2.00")]
    assert item.document["spec"]["maxCostUSD"] == "2.00"  # the file's document is not changed under it
    # A saved plan carries it, and its desired document still matches its hash.
    again = Plan.from_json(plan([item], [raised]).to_json())
    assert again.actions[0].drift == action.drift
    # A higher cap in the file is an ordinary raise; without a cap live there is nothing to keep.
    lower = _stored(item, lambda document: document["spec"].update(maxCostUSD="1.00"))
    assert _only([item], [lower]).type == "update" and not _only([item], [lower]).drift
    # A cap the file leaves out keeps the live one too.
    (uncapped,) = _desired(JOB_WITH_CAP.replace('  maxCostUSD: "2.00"\n', ""))
    kept = _only([uncapped], [raised])
    assert kept.desired["spec"]["maxCostUSD"] == "40.00" and kept.drift[0].file is None
