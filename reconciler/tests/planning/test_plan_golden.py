"""Golden files of `nodus plan`: each scenario's table, JSON and Markdown, and a stale saved plan's reasons.

After an intended change: `.venv/bin/python -m nodus.reconciler.planning.golden --update`, then review the
diff of reconciler/tests/planning/golden/. Beyond the text, each scenario asserts what it is about.
"""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from nodus.reconciler.controllers.coverage import stored_only_notes
from nodus.reconciler.planning import Plan, render_json, stale_reasons
from nodus.reconciler.planning.golden import GOLDEN, Scenario, main, scenarios

SCENARIOS = {scenario.name: scenario for scenario in scenarios()}
UPDATE = "if the change is intended: .venv/bin/python -m nodus.reconciler.planning.golden --update"


def test_every_scenario_is_there() -> None:
    assert GOLDEN.is_dir()
    assert set(SCENARIOS) >= {
        "create",
        "update-in-place",
        "replace",
        "prune-off",
        "prune-on",
        "noop-after-apply",
        "stale-plan",
        "priced",
    }


@pytest.mark.parametrize("name", sorted(SCENARIOS))
def test_outputs_match_the_golden_files(name: str) -> None:
    scenario = SCENARIOS[name]
    for file, text in scenario.outputs().items():
        expected = (scenario.folder / file).read_text()
        assert text == expected, f"{scenario.folder / file} differs; {UPDATE}"


@pytest.mark.parametrize("name", sorted(SCENARIOS))
def test_the_saved_plan_reads_back_as_the_same_plan(name: str) -> None:
    scenario = SCENARIOS[name]
    saved = Plan.from_json((scenario.folder / "plan.json").read_text(), "plan.json")
    assert saved == scenario.plan()
    # A priced plan's costs ride along in plan.json; apply reads the plan and prices a run when it launches it.
    assert render_json(saved, scenario.costs(saved)) == (scenario.folder / "plan.json").read_text()


@pytest.mark.parametrize("name", sorted(SCENARIOS))
def test_the_stored_only_notes_are_the_controllers(name: str) -> None:
    """The renderers are pure and are handed the stored-only notes; a scenario's are what `nodus plan` hands them."""
    scenario = SCENARIOS[name]
    assert scenario.stored_only() == stored_only_notes(scenario.plan()), f"{scenario.folder}/options.json storedOnly"


@pytest.mark.parametrize("name", sorted(SCENARIOS))
def test_a_plan_is_valid_against_the_store_it_was_made_from(name: str) -> None:
    scenario = SCENARIOS[name]
    assert stale_reasons(scenario.plan(), scenario.observed().records) == []


def _plan(name: str) -> tuple[Scenario, Plan]:
    return SCENARIOS[name], SCENARIOS[name].plan()


def _refs(plan: Plan) -> list[tuple[str, str]]:
    return [(action.type, str(action.key)) for action in plan.actions]


def test_create_goes_in_dependency_waves() -> None:
    _, planned = _plan("create")
    assert _refs(planned) == [
        ("create", "Secret/hf-token"),
        ("create", "Volume/support-chats"),
        ("create", "Environment/reverse-words"),
        ("create", "TrainingJob/support-sft"),
    ]
    assert all(action.expected_hash is None for action in planned.actions)
    assert planned.exit_code == 2
    assert planned.summary == "Plan: 4 to add, 0 to change, 0 to replace, 0 to destroy, 0 unchanged."


def test_update_in_place_lists_the_fields() -> None:
    _, planned = _plan("update-in-place")
    assert _refs(planned) == [("update", "Environment/reverse-words"), ("update", "TrainingJob/support-sft")]
    env, job = planned.actions
    assert [(c.path, c.op, c.before, c.after) for c in env.changes] == [
        ("spec.grading.maxParallel", "change", 4, 8),
        ("spec.description", "add", None, "Reverse each word of a sentence."),
    ]
    assert [(c.path, c.before, c.after) for c in job.changes] == [
        ("metadata.labels.team", None, "support"),
        ("spec.maxCostUSD", "20.00", "30.00"),
    ]
    assert not any(change.forces_replacement for action in planned.actions for change in action.changes)
    assert {action.expected_generation for action in planned.actions} == {2}


def test_replace_names_its_forcing_field() -> None:
    scenario, planned = _plan("replace")
    forced = {str(action.key): action.forced_by for action in planned.actions if action.type == "replace"}
    assert forced == {"Environment/reverse-words": "spec.package.path", "TrainingJob/support-sft": "spec.model.uri"}
    job = planned.actions[-1]
    # The cost cap could change in place; it rides along with the replacement and is not marked.
    assert [(c.path, c.forces_replacement) for c in job.changes] == [
        ("spec.model.uri", True),
        ("spec.maxCostUSD", False),
    ]
    text = (scenario.folder / "plan.txt").read_text()
    assert text.count("# forces replacement") == 2
    assert "forced by `spec.package.path`" in (scenario.folder / "plan.md").read_text()


def test_replacing_a_finished_job_says_which_outputs_it_keeps_where() -> None:
    """The observed job Succeeded as generation 1: the replacement sets it aside, and the plan says how to reach it."""
    scenario, planned = _plan("replace")
    job = planned.actions[-1]
    assert job.keeps is not None and job.keeps.to_dict() == {"generation": 1, "what": "outputs"}
    assert planned.actions[0].keeps is None  # an Environment has no generations of outputs
    note = "# keeps generation 1's outputs: nodus cp tj/support-sft:outputs/... --generation 1"
    assert note in (scenario.folder / "plan.txt").read_text()
    assert Plan.from_json(planned.to_json()).actions[-1].keeps == job.keeps  # a saved plan keeps the note


def test_without_prune_unmanaged_resources_are_kept() -> None:
    _, planned = _plan("prune-off")
    assert {action.type for action in planned.actions} == {"noop"}
    assert [str(key) for key in planned.unmanaged] == ["TrainingJob/old-sft", "Volume/old-data"]
    assert planned.exit_code == 0
    assert "2 unmanaged kept" in planned.summary


def test_with_prune_dependents_are_destroyed_first() -> None:
    _, planned = _plan("prune-on")
    assert [ref for kind, ref in _refs(planned) if kind == "delete"] == ["TrainingJob/old-sft", "Volume/old-data"]
    assert planned.actions[-1].desired is None
    assert planned.unmanaged == ()
    assert planned.exit_code == 2


def test_no_changes_after_apply() -> None:
    scenario, planned = _plan("noop-after-apply")
    assert len(planned.actions) == 4
    assert not planned.has_changes and planned.exit_code == 0
    assert (scenario.folder / "plan.txt").read_text() == "No changes: 4 unchanged.\n"


def test_a_stale_saved_plan_says_what_moved() -> None:
    scenario = SCENARIOS["stale-plan"]
    moved = scenario.moved()
    assert moved is not None
    saved = Plan.from_json((scenario.folder / "plan.json").read_text())
    reasons = stale_reasons(saved, moved.records)
    assert reasons == [
        "Secret/hf-token was deleted since the plan",
        "Volume/support-chats was created since the plan",
        "TrainingJob/support-sft changed since the plan (generation 3 -> 4)",
    ]
    assert (scenario.folder / "stale.txt").read_text().splitlines() == reasons
    assert moved.serial != saved.observed_serial


def test_the_update_command_rewrites_what_differs(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    copy = tmp_path / "golden" / "replace"
    shutil.copytree(SCENARIOS["replace"].folder, copy)
    (copy / "plan.txt").write_text("outdated\n")
    root = str(tmp_path / "golden")
    assert main(["--root", root]) == 1
    assert f"differs: {copy / 'plan.txt'}" in capsys.readouterr().out
    assert main(["--root", root, "--update"]) == 0
    assert (copy / "plan.txt").read_text() == (SCENARIOS["replace"].folder / "plan.txt").read_text()
    assert main(["--root", root]) == 0


def test_a_priced_plan_heads_its_comment_with_the_cost() -> None:
    scenario, planned = _plan("priced")
    assert {action.type for action in planned.actions} == {"create", "update", "replace", "noop"}
    costs = scenario.costs(planned)
    assert costs is not None
    lines = (scenario.folder / "plan.md").read_text().splitlines()
    assert lines[0] == "<!-- nodus-plan -->"
    assert lines[3].startswith("**Estimated cost:** **$0.3037** one-off for 2 training runs (and 1 unpriced)")
    assert "**+$1134.00/month** at most for standing endpoints · prices of 2026-11-29" in lines[3]
    text = "\n".join(lines)
    # The headline and tables come before the folded plan; the table has the cost columns.
    assert text.index("Estimated cost") < text.index("### TrainingJob") < text.index("<details>")
    assert "| `~` | tuned | update in place | `spec.expectedDuration` | +$1.64 | $4.92 |" in text
    assert (
        "| `-/+` | bigger | **replace** (forced by `spec.model.uri`) | `spec.model.uri` | +$0.1031 | $0.1791 |" in text
    )
    assert "| `+` | mystery | create |  | unpriced | unpriced |" in text
    assert "- `TrainingJob/mystery`: training: 200 steps: runtime trainer has no measured seconds per step" in text
    assert "**Next:** `nodus apply` applies this plan." in text
    assert "_Prices: table 2026-11-29 (prices.yaml)" in text
    # The unpriced run is not counted as $0: the one-off total is the two priced runs.
    runs = {str(key): cost for key, cost in costs.actions.items() if cost.starts_run}
    assert runs["TrainingJob/mystery"].cost_usd is None
    assert costs.one_off_usd == runs["TrainingJob/new-run"].cost_usd + runs["TrainingJob/bigger"].cost_usd
    # No-ops are not priced; the no-op runtime and Environment do not appear in the cost tables.
    assert "TrainingRuntime" not in text.split("<details>")[0]
