"""Planning: what `nodus apply` would do to bring the state store to the resource files.

Who calls it: `nodus plan` (prints the plan, saves it with `--out plan.json`) and `nodus apply` (plans, or
loads a saved plan and refuses it when `stale_reasons` is not empty, then hands the actions to the
controllers wave by wave). Planning is pure: `desired_from` turns parsed resources into normalised
documents, `plan` compares them with the observed `ResourceRecord`s, and `render_*` turn a `Plan` into text.
Nothing here reads files or the store.
"""

from __future__ import annotations

from nodus.reconciler.planning.desired import Desired, desired_from, normalise_observed
from nodus.reconciler.planning.diff import (
    PLAN_FORMAT_VERSION,
    WAVES,
    Action,
    ActionType,
    FieldChange,
    Plan,
    plan,
    stale_reasons,
    wave_of,
)
from nodus.reconciler.planning.render import render_json, render_markdown, render_table

__all__ = [
    "PLAN_FORMAT_VERSION",
    "WAVES",
    "Action",
    "ActionType",
    "Desired",
    "FieldChange",
    "Plan",
    "desired_from",
    "normalise_observed",
    "plan",
    "render_json",
    "render_markdown",
    "render_table",
    "stale_reasons",
    "wave_of",
]
