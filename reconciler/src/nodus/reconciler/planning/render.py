"""A `Plan` as text: a terminal table, JSON, or a Markdown comment for a pull request.

Who calls it: `nodus plan -o table|json|markdown` (and `nodus apply`, which shows the table before asking).
Every function returns plain text; colour, if any, is the CLI's business. Output is deterministic, so the
golden files of `reconciler/tests/planning/golden` pin it. Given the plan's `PlanCosts` (`nodus.reconciler.
pricing.costs`), each TrainingJob and InferenceEndpoint change shows its cost: a line in the table, a `costs`
object in the JSON, and in the Markdown comment a cost headline first, cost columns, and an unpriced list.

The Markdown comment starts with the hidden marker `<!-- nodus-plan -->` so that a bot (`nodus pr-comment`)
finds it and updates it in place; it says the price table's version and the next command to run.

The renderers are pure: which kinds nothing runs yet (the `stored only` line after each such resource) is the
controllers' knowledge, so the callers hand it in as `stored_only`, kind -> note
(`nodus.reconciler.controllers.coverage.stored_only_notes(plan)`).
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterator, Mapping
from typing import Any

from nodus.reconciler.planning.diff import Action, FieldChange, Plan
from nodus.reconciler.pricing.costs import PRICED_KINDS, ActionCost, PlanCosts, money
from nodus.reconciler.state.records import DEFAULT_PROJECT, ResourceKey
from nodus.specs.registry import BY_KIND

MARKDOWN_LIMIT = 65_000
"""GitHub refuses comments over 65,536 characters; the rest of the limit is left for a caller's footer."""
MARKDOWN_HEAD_LIMIT = 30_000
"""The summary tables may use this much; the folded full plan gets what is left."""
UNMANAGED_LISTED = 20
FIELDS_LISTED = 5
MARKER = "<!-- nodus-plan -->"
"""The comment's first line: how `nodus pr-comment` finds the comment to update."""
NEXT_COMMAND = "nodus apply"

ACTION_WORDS = {
    "create": "create",
    "update": "update in place",
    "replace": "**replace**",
    "delete": "**destroy**",
    "noop": "no change",
}
FIELD_SYMBOLS = {"add": "+", "remove": "-", "change": "~"}


# --- table ---------------------------------------------------------------------------------------------


NO_NOTES: Mapping[str, str] = {}


def render_table(plan: Plan, costs: PlanCosts | None = None, *, stored_only: Mapping[str, str] = NO_NOTES) -> str:
    """Terraform-like: one line per action, its field changes indented below it, the `stored only` lines of the
    kinds in `stored_only` (kind -> note), the summary last (and the cost headline after it, when priced)."""
    lines: list[str] = []
    for action in plan.changes:
        lines += _action_lines(action)
        cost = costs.get(action.key) if costs is not None else None
        if cost is not None:
            lines.append("      # " + _cost_comment(cost))
    stored_lines = stored_only_lines(plan, stored_only)
    if stored_lines:
        lines += ["", *stored_lines]
    if plan.unmanaged:
        if lines:
            lines.append("")
        lines.append("Unmanaged, kept (in the store, not in the files):")
        lines += [f"    {key}" for key in plan.unmanaged]
    if plan.run_made:
        if lines:
            lines.append("")
        lines.append("Made by nodus run, kept (in no file; --prune leaves them, nodus delete removes them):")
        lines += [f"    {key}" for key in plan.run_made]
    if lines:
        lines.append("")
    lines.append(plan.summary)
    if costs is not None:
        lines.append(_headline(costs, markdown=False))
    return "\n".join(lines) + "\n"


def stored_only_lines(plan: Plan, stored_only: Mapping[str, str]) -> list[str]:
    """`InferenceEndpoint/chat: stored only: nodus has no controller for InferenceEndpoint yet (nothing runs it)`,
    one per resource the plan creates or changes whose kind is in `stored_only` (apply prints the same line)."""
    return [
        f"{action.key}: {stored_only[action.key.kind]}"
        for action in plan.changes
        if action.type != "delete" and action.key.kind in stored_only
    ]


def _cost_comment(cost: ActionCost) -> str:
    """`cost: $0.03`, `cost: $4.92 (change +$1.64)`, `cost: unpriced (training: ...)`, `cost: at most $12.00/month`."""
    new, change = _cost_cells(cost)
    if cost.cost_usd is None and cost.action != "delete":
        return "cost: unpriced (" + "; ".join(cost.unpriced or ("unknown",)) + ")"
    text = f"cost: {new}" if cost.action != "delete" else "cost: deleted"
    if cost.action != "create" and change not in ("", "-"):
        text += f" (change {change})"
    return text


def _action_lines(action: Action) -> Iterator[str]:
    source = f"  ({action.source})" if action.source else ""
    yield f"{action.symbol:>3} {action.key}{source}"
    if action.type == "replace" and action.forced_by is None:
        yield f"      # {action.reason}"
    if action.keeps is not None:
        yield f"      # {kept_note(action)}"
    if action.waits_for:
        yield f"      # {waits_note(action)}"
    for change in action.changes:
        yield "      " + _field_line(change)


def kept_note(action: Action) -> str:
    """What a replaced job leaves reachable and the command that reaches it: `keeps generation 1's outputs: nodus
    cp tj/run:outputs/... --generation 1` (the new generation starts in a fresh folder; the old one is set aside)."""
    kept = action.keeps
    assert kept is not None
    short = "tj" if action.key.kind == "TrainingJob" else "job"
    project = "" if action.key.project == DEFAULT_PROJECT else f" -n {action.key.project}"
    if kept.what == "outputs":
        command = f"nodus cp {short}/{action.key.name}:outputs/... --generation {kept.generation}{project}"
    else:
        command = f"nodus logs {short}/{action.key.name} --generation {kept.generation}{project}"
    return f"keeps generation {kept.generation}'s {kept.what}: {command}"


def waits_note(action: Action) -> str:
    """`waits for tj/sft-full`: the resources of the plan this one waits for (apply starts it after them; a job
    that reads another's export stays Pending, WaitingFor, until that export is committed)."""
    return "waits for " + ", ".join(short_ref(key, action.key.project) for key in action.waits_for)


def short_ref(key: ResourceKey, project: str) -> str:
    """`tj/sft-full`: a key of `project` as the CLI's commands take it (one of another project as the key itself)."""
    cls = BY_KIND.get(key.kind)
    if key.project != project or cls is None or not cls.SHORT_NAMES:
        return str(key)
    return f"{cls.SHORT_NAMES[0]}/{key.name}"


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


def render_json(plan: Plan, costs: PlanCosts | None = None) -> str:
    """The saved-plan format itself (`--out plan.json` and `-o json` write the same text), with `costs` when
    priced (a key `nodus apply` does not read: it prices a run again when it launches it)."""
    if costs is None:
        return plan.to_json()
    return json.dumps({**plan.to_dict(), "costs": costs.to_dict()}, indent=2, ensure_ascii=False) + "\n"


# --- Markdown ------------------------------------------------------------------------------------------


def render_markdown(
    plan: Plan,
    limit: int = MARKDOWN_LIMIT,
    *,
    costs: PlanCosts | None = None,
    next_command: str = NEXT_COMMAND,
    stored_only: Mapping[str, str] = NO_NOTES,
) -> str:
    """A pull-request comment: the marker, the cost headline, the summary, a table per kind (with cost columns
    when priced), the unpriced items, the replacements, the resources stored only (the kinds in `stored_only`),
    the next command and the prices' version, then the full plan folded.

    It stays under `limit` characters with the summary first: tables stop with a note past
    `MARKDOWN_HEAD_LIMIT`, and the folded plan is cut at a line with a note saying how much was left out.
    """
    head = _markdown_head(plan, min(MARKDOWN_HEAD_LIMIT, limit // 2), costs, next_command, stored_only)
    if not plan.changes and not plan.unmanaged:
        return head
    return head + "\n" + _folded(render_table(plan, costs, stored_only=stored_only), limit - len(head) - 1)


def _markdown_head(
    plan: Plan, budget: int, costs: PlanCosts | None, next_command: str, stored_only: Mapping[str, str]
) -> str:
    intro = [MARKER, "## nodus plan", ""]
    if costs is not None:
        intro += [_headline(costs, markdown=True), ""]
    intro.append(f"**{plan.summary}**")
    footer = ["", _next(plan, next_command)]
    if costs is not None:
        footer.append(_prices_line(costs))
    parts = list(intro)
    size = sum(len(part) + 1 for part in intro + footer)
    rows_left = len(plan.changes)
    for kind, actions in _by_kind(plan.changes):
        priced = costs is not None and kind in PRICED_KINDS
        table = ["", f"### {kind}", "", *_table_header(priced)]
        for action in actions:
            row = _row(action, costs.get(action.key) if priced and costs is not None else None, priced=priced)
            if size + sum(len(line) + 1 for line in table) + len(row) > budget:
                parts += [*table, "", f"_… {rows_left} more changes: see the full plan below._", *footer]
                return "\n".join(parts) + "\n"
            table.append(row)
            rows_left -= 1
        parts += table
        size += sum(len(line) + 1 for line in table)
    unpriced = costs.unpriced() if costs is not None else []
    if unpriced:
        parts += ["", "### Unpriced", "", "Not counted in the cost above (never as $0):", ""]
        parts += [f"- {_code(str(key))}: {_cell(reason)}" for key, reason in unpriced]
    replacements = [action for action in plan.changes if action.type == "replace"]
    if replacements:
        parts += ["", "### Replacements", ""]
        parts += [f"- {_code(str(action.key))}: {_reason(action)}{_kept_cell(action)}" for action in replacements]
    stored_lines = stored_only_lines(plan, stored_only)
    if stored_lines:
        parts += ["", "### Stored only", "", *(f"- {_cell(text)}" for text in stored_lines)]
    if plan.unmanaged:
        parts += ["", f"**Unmanaged, kept** ({len(plan.unmanaged)}): {_unmanaged_list(plan)}"]
    text = "\n".join(parts + footer) + "\n"
    if len(text) > budget:
        # Many replacements, unpriced items or unmanaged resources: the folded plan below lists them all.
        note = ["", "_The change list is too long for a comment: see the full plan below._"]
        text = "\n".join(intro + note + footer) + "\n"
    return text


def _headline(costs: PlanCosts, *, markdown: bool) -> str:
    """The cost of the plan in one line: the one-off runs it starts, the standing endpoints' monthly change."""
    bold = "**" if markdown else ""
    runs = costs.runs
    unpriced_runs = sum(1 for cost in runs if cost.cost_usd is None)
    priced_runs = len(runs) - unpriced_runs
    if not runs:
        one_off = "no new training runs"
    elif not priced_runs:
        one_off = f"{len(runs)} training run{_s(len(runs))}, unpriced"
    else:
        one_off = f"{bold}{money(costs.one_off_usd)}{bold} one-off for {priced_runs} training run{_s(priced_runs)}"
        if unpriced_runs:
            one_off += f" (and {unpriced_runs} unpriced)"
    if not costs.standing:
        monthly = "no change to standing endpoints"
    elif costs.monthly_change_usd is None:
        monthly = "standing endpoints: unpriced"
    else:
        change = money(costs.monthly_change_usd, signed=True)
        monthly = f"{bold}{change}/month{bold} at most for standing endpoints"
    version = costs.prices.get("version", "none")
    return f"{bold}Estimated cost:{bold} {one_off} · {monthly} · prices of {version}"


def _next(plan: Plan, next_command: str) -> str:
    if not plan.has_changes:
        return "**Next:** nothing to apply."
    return f"**Next:** {_code(next_command)} applies this plan."


def _prices_line(costs: PlanCosts) -> str:
    prices = costs.prices
    where = _short_path(str(prices.get("file") or "")) or "no price table found"
    overrides = list(prices.get("overrides") or [])
    if overrides:
        where += " with " + ", ".join(_short_path(str(name)) for name in overrides)
    return (
        f"_Prices: table {prices.get('version', 'none')} ({where}); run times from each runtime's measured step "
        "times. Estimates, not bills._"
    )


def _short_path(path: str) -> str:
    """The last two parts of a path (`catalog/prices.yaml`): a runner's absolute paths say nothing in a comment."""
    if path.startswith("$"):
        return path
    return "/".join(path.replace("\\", "/").split("/")[-2:])


def _table_header(priced: bool) -> list[str]:
    if priced:
        return ["| | Name | Action | Fields | Cost change | New cost |", "|:-:|---|---|---|--:|--:|"]
    return ["| | Name | Action | Fields |", "|:-:|---|---|---|"]


def _cost_cells(cost: ActionCost | None) -> tuple[str, str]:
    """(new cost, cost change) as the table shows them."""
    if cost is None:
        return "", ""
    per = "/month" if cost.period == "month" else ""
    at_most = "at most " if cost.ceiling else ""
    if cost.action == "delete":
        new = "-"
    elif cost.cost_usd is None:
        new = "unpriced"
    else:
        new = f"{at_most}{money(cost.cost_usd)}{per}"
    change = cost.change_usd
    if change is not None:
        shown = f"{money(change, signed=True)}{per}"
    elif cost.action == "delete":
        shown = "-"
    else:
        shown = "unpriced"
    return new, shown


def _by_kind(actions: tuple[Action, ...]) -> Iterator[tuple[str, list[Action]]]:
    """Groups in plan order (waves), each kind once even when its deletes come last."""
    grouped: dict[str, list[Action]] = {}
    for action in actions:
        grouped.setdefault(action.key.kind, []).append(action)
    yield from grouped.items()


def _row(action: Action, cost: ActionCost | None = None, *, priced: bool = False) -> str:
    name = action.key.name if action.key.project == DEFAULT_PROJECT else f"{action.key.project}/{action.key.name}"
    word = ACTION_WORDS[action.type]
    if action.forced_by:
        word += f" (forced by {_code(action.forced_by)})"
    paths = [change.path for change in action.changes]
    fields = ", ".join(_code(path) for path in paths[:FIELDS_LISTED])
    if len(paths) > FIELDS_LISTED:
        fields += f" and {len(paths) - FIELDS_LISTED} more"
    cells = [_code(action.symbol), name, word, fields]
    if priced:
        new, change = _cost_cells(cost)
        cells += [change, new]
    return "| " + " | ".join(_cell(text) for text in cells) + " |"


def _s(count: int) -> str:
    return "" if count == 1 else "s"


def _reason(action: Action) -> str:
    if action.forced_by:
        return f"{_code(action.forced_by)} cannot change in place"
    return action.reason


def _kept_cell(action: Action) -> str:
    if action.keeps is None:
        return ""
    what, _, command = kept_note(action).partition(": ")
    return f"; {what} ({_code(command)})"


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
