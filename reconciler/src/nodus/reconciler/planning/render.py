"""A `Plan` as text: a terminal table, JSON, or a Markdown comment for a pull request.

Who calls it: `nodus plan -o table|json|markdown` (and `nodus apply`, which shows the table before asking).
Every function returns plain text; colour, if any, is the CLI's business. Output is deterministic, so the
golden files of `reconciler/tests/planning/golden` pin it.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from typing import Any

from nodus.reconciler.planning.diff import Action, FieldChange, Plan
from nodus.reconciler.state.records import DEFAULT_PROJECT

MARKDOWN_LIMIT = 65_000
"""GitHub refuses comments over 65,536 characters; the rest of the limit is left for a caller's footer."""
MARKDOWN_HEAD_LIMIT = 30_000
"""The summary tables may use this much; the folded full plan gets what is left."""
UNMANAGED_LISTED = 20
FIELDS_LISTED = 5

ACTION_WORDS = {
    "create": "create",
    "update": "update in place",
    "replace": "**replace**",
    "delete": "**destroy**",
    "noop": "no change",
}
FIELD_SYMBOLS = {"add": "+", "remove": "-", "change": "~"}


# --- table ---------------------------------------------------------------------------------------------


def render_table(plan: Plan) -> str:
    """Terraform-like: one line per action, its field changes indented below it, the summary last."""
    lines: list[str] = []
    for action in plan.changes:
        lines += _action_lines(action)
    if plan.unmanaged:
        if lines:
            lines.append("")
        lines.append("Unmanaged, kept (in the store, not in the files):")
        lines += [f"    {key}" for key in plan.unmanaged]
    if lines:
        lines.append("")
    lines.append(plan.summary)
    return "\n".join(lines) + "\n"


def _action_lines(action: Action) -> Iterator[str]:
    source = f"  ({action.source})" if action.source else ""
    yield f"{action.symbol:>3} {action.key}{source}"
    if action.type == "replace" and action.forced_by is None:
        yield f"      # {action.reason}"
    for change in action.changes:
        yield "      " + _field_line(change)


def _field_line(change: FieldChange) -> str:
    symbol = FIELD_SYMBOLS[change.op]
    if change.op == "add":
        text = f"{symbol} {change.path}: {_value(change.after)}"
    elif change.op == "remove":
        text = f"{symbol} {change.path}: {_value(change.before)}"
    else:
        text = f"{symbol} {change.path}: {_value(change.before)} -> {_value(change.after)}"
    return text + ("  # forces replacement" if change.forces_replacement else "")


def _value(value: Any) -> str:
    """A value as JSON on one line: strings quoted (so "5" and 5 differ visibly), newlines escaped."""
    return json.dumps(value, ensure_ascii=False, separators=(", ", ": "))


# --- JSON ----------------------------------------------------------------------------------------------


def render_json(plan: Plan) -> str:
    """The saved-plan format itself (`--out plan.json` and `-o json` write the same text)."""
    return plan.to_json()


# --- Markdown ------------------------------------------------------------------------------------------


def render_markdown(plan: Plan, limit: int = MARKDOWN_LIMIT) -> str:
    """A pull-request comment: the summary, a table per kind, the replacements, the full plan folded.

    It stays under `limit` characters: tables stop with a note past `MARKDOWN_HEAD_LIMIT`, and the folded
    plan is cut at a line with a note saying how much was left out.
    """
    head = _markdown_head(plan, min(MARKDOWN_HEAD_LIMIT, limit // 2))
    if not plan.changes and not plan.unmanaged:
        return head
    return head + "\n" + _folded(render_table(plan), limit - len(head) - 1)


def _markdown_head(plan: Plan, budget: int) -> str:
    parts = ["## nodus plan", "", f"**{plan.summary}**"]
    size = sum(len(part) + 1 for part in parts)
    rows_left = len(plan.changes)
    for kind, actions in _by_kind(plan.changes):
        table = ["", f"### {kind}", "", "| | Name | Action | Fields |", "|:-:|---|---|---|"]
        for action in actions:
            row = _row(action)
            if size + sum(len(line) + 1 for line in table) + len(row) > budget:
                parts += [*table, "", f"_… {rows_left} more changes: see the full plan below._"]
                return "\n".join(parts) + "\n"
            table.append(row)
            rows_left -= 1
        parts += table
        size += sum(len(line) + 1 for line in table)
    replacements = [action for action in plan.changes if action.type == "replace"]
    if replacements:
        parts += ["", "### Replacements", ""]
        parts += [f"- {_code(str(action.key))}: {_reason(action)}" for action in replacements]
    if plan.unmanaged:
        parts += ["", f"**Unmanaged, kept** ({len(plan.unmanaged)}): {_unmanaged_list(plan)}"]
    text = "\n".join(parts) + "\n"
    if len(text) > budget:
        # Many replacements or unmanaged resources: the folded plan below lists them all.
        text = "\n".join(parts[:3]) + "\n\n_The change list is too long for a comment: see the full plan below._\n"
    return text


def _by_kind(actions: tuple[Action, ...]) -> Iterator[tuple[str, list[Action]]]:
    """Groups in plan order (waves), each kind once even when its deletes come last."""
    grouped: dict[str, list[Action]] = {}
    for action in actions:
        grouped.setdefault(action.key.kind, []).append(action)
    yield from grouped.items()


def _row(action: Action) -> str:
    name = action.key.name if action.key.project == DEFAULT_PROJECT else f"{action.key.project}/{action.key.name}"
    word = ACTION_WORDS[action.type]
    if action.forced_by:
        word += f" (forced by {_code(action.forced_by)})"
    paths = [change.path for change in action.changes]
    fields = ", ".join(_code(path) for path in paths[:FIELDS_LISTED])
    if len(paths) > FIELDS_LISTED:
        fields += f" and {len(paths) - FIELDS_LISTED} more"
    return "| " + " | ".join(_cell(text) for text in (_code(action.symbol), name, word, fields)) + " |"


def _reason(action: Action) -> str:
    if action.forced_by:
        return f"{_code(action.forced_by)} cannot change in place"
    return action.reason


def _unmanaged_list(plan: Plan) -> str:
    listed = ", ".join(_code(str(key)) for key in plan.unmanaged[:UNMANAGED_LISTED])
    more = len(plan.unmanaged) - UNMANAGED_LISTED
    return listed + (f" and {more} more" if more > 0 else "") + "; `--prune` destroys them."


def _folded(body: str, budget: int) -> str:
    fence = "`" * max(3, _longest_backtick_run(body) + 1)
    opening = f"<details><summary>Full plan</summary>\n\n{fence}text\n"
    closing = f"{fence}\n\n</details>\n"
    lines = body.splitlines(keepends=True)
    note = ""
    room = budget - len(opening) - len(closing)
    if len(body) > room:
        note_room = 200
        kept, size = 0, 0
        while kept < len(lines) and size + len(lines[kept]) <= room - note_room:
            size += len(lines[kept])
            kept += 1
        note = (
            f"\n_Truncated: {kept} of {len(lines)} lines shown. "
            "The whole plan: `nodus plan -o table`, or `--out plan.json`._\n"
        )
        lines = lines[:kept]
    return opening + "".join(lines) + closing + note


def _longest_backtick_run(text: str) -> int:
    return max((len(run) for run in re.findall(r"`+", text)), default=0)


def _code(text: str) -> str:
    """Inline code that survives backticks in the text."""
    fence = "`" * (_longest_backtick_run(text) + 1)
    padded = f" {text} " if text.startswith("`") or text.endswith("`") else text
    return f"{fence}{padded}{fence}"


def _cell(text: str) -> str:
    """A table cell: a pipe would end it early, a newline would end the row."""
    return text.replace("|", "\\|").replace("\n", " ")
