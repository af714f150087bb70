"""Renderings of a plan: the table's marks, and a Markdown comment that always fits GitHub's limit."""

from __future__ import annotations

from dataclasses import replace

from nodus.reconciler.planning import Action, FieldChange, Plan, render_json, render_markdown, render_table
from nodus.reconciler.planning.render import MARKDOWN_LIMIT
from nodus.reconciler.state.records import ResourceKey, spec_hash


def _update(name: str, *changes: FieldChange, project: str = "default") -> Action:
    return Action(
        "update",
        ResourceKey("TrainingJob", project, name),
        "changed in place",
        desired={},
        desired_hash="sha256:x",
        expected_hash="sha256:y",
        expected_generation=1,
        changes=changes,
        source=f"jobs/{name}.yaml:1",
    )


STEPS = FieldChange("spec.parameters.steps", "change", 50, 100)


def test_table_lines() -> None:
    replace = Action(
        "replace",
        ResourceKey("Environment", "default", "words"),
        "spec.package.path cannot change in place",
        desired={},
        desired_hash="sha256:x",
        expected_hash="sha256:y",
        changes=(
            FieldChange("spec.package.path", "change", "./a", "./b", forces_replacement=True),
            FieldChange("spec.description", "remove", "old"),
        ),
        forced_by="spec.package.path",
    )
    text = render_table(Plan((_update("tj", STEPS), replace), unmanaged=(ResourceKey("Volume", "default", "v"),)))
    assert text.splitlines() == [
        "  ~ TrainingJob/tj  (jobs/tj.yaml:1)",
        "      ~ spec.parameters.steps: 50 -> 100",
        "-/+ Environment/words",
        '      ~ spec.package.path: "./a" -> "./b"  # forces replacement',
        '      - spec.description: "old"',
        "",
        "Unmanaged, kept (in the store, not in the files):",
        "    Volume/v",
        "",
        "Plan: 0 to add, 1 to change, 1 to replace, 0 to destroy, 0 unchanged."
        " 1 unmanaged kept (in the store, not in the files; --prune destroys them).",
    ]


def test_a_replacement_without_a_forcing_field_says_why() -> None:
    action = Action("replace", ResourceKey("Secret", "default", "s"), "the stored one is being deleted", {}, "h", "h")
    assert "      # the stored one is being deleted" in render_table(Plan((action,))).splitlines()


def test_json_is_the_saved_plan() -> None:
    document = {
        "apiVersion": "nodus.dev/v1beta1",
        "kind": "TrainingJob",
        "metadata": {"name": "tj", "project": "default"},
    }
    action = replace(_update("tj", STEPS), desired=document, desired_hash=spec_hash(document))
    planned = Plan((action,), observed_serial=4)
    assert render_json(planned) == planned.to_json()
    assert Plan.from_json(render_json(planned)) == planned


def test_markdown_names_projects_and_replacements() -> None:
    text = render_markdown(Plan((_update("tj", STEPS, project="team-a"),)))
    assert text.startswith("<!-- nodus-plan -->\n## nodus plan\n\n**Plan: 0 to add, 1 to change,")
    assert "| `~` | team-a/tj | update in place | `spec.parameters.steps` |" in text
    assert "<details><summary>Full plan</summary>" in text and text.rstrip().endswith("</details>")


def test_a_huge_plan_stays_under_the_comment_limit() -> None:
    many = tuple(
        _update(f"job-{i:05d}", *(FieldChange(f"spec.parameters.p{j}", "change", "x" * 40, "y" * 40) for j in range(8)))
        for i in range(3000)
    )
    text = render_markdown(Plan(many))
    assert len(text) < MARKDOWN_LIMIT
    assert text.startswith("<!-- nodus-plan -->\n## nodus plan\n\n**Plan: 0 to add, 3000 to change,")
    assert "more changes: see the full plan below." in text
    assert "_Truncated: " in text and "lines shown" in text
    assert text.count("<details>") == 1 and text.count("</details>") == 1
    # Rows list at most five fields each.
    assert "and 3 more |" in text


def test_backticks_in_values_do_not_break_the_fenced_plan() -> None:
    prompt = FieldChange("spec.system", "change", "use ```python", "use ````python")
    text = render_markdown(Plan((_update("agent", prompt),)))
    assert "\n`````text\n" in text and "\n`````\n" in text


def test_the_stored_only_lines_are_the_callers_notes() -> None:
    """Planning is pure: the kinds nothing runs come from the caller (`coverage.stored_only_notes`), not a registry."""
    endpoint = Action("create", ResourceKey("InferenceEndpoint", "default", "chat"), "new", {}, "h")
    gone = Action("delete", ResourceKey("InferenceEndpoint", "default", "old"), "not in the files", None, None, "h")
    planned = Plan((_update("tj", STEPS), endpoint, gone))
    notes = {"InferenceEndpoint": "stored only: nothing runs it here"}
    assert "InferenceEndpoint/chat: stored only: nothing runs it here" in render_table(planned, stored_only=notes)
    assert "InferenceEndpoint/old: stored only" not in render_table(planned, stored_only=notes)
    markdown = render_markdown(planned, stored_only=notes)
    assert "### Stored only\n\n- InferenceEndpoint/chat: stored only: nothing runs it here\n" in markdown
    assert "stored only" not in render_table(planned) + render_markdown(planned)
