"""The Budget kind (`nodus.dev/v1`): a project-wide spending limit over all runs, groups and endpoints.

Who uses it: `nodus.specs.parse` validates it; the reconciler's admission refuses or suspends work that
would take the project past it. nodus bills nothing: amounts are estimates from the price table.
"""

from __future__ import annotations

from typing import Literal

from pydantic import Field

from nodus.specs.base import Resource, SpecModel
from nodus.specs.types import USD

BudgetKind = Literal["TrainingJob", "Job", "AgentRun", "AgentGroup", "InferenceEndpoint"]


class BudgetSpec(SpecModel):
    """How much the project may spend, over what period, and what happens at the limit."""

    limit_usd: USD = Field(alias="limitUSD")
    """The most the covered work may cost in one period, as a decimal string."""
    period: Literal["Daily", "Monthly", "Total"] = "Monthly"
    """The window the limit applies to (UTC calendar days and months)."""
    action: Literal["Suspend", "Refuse"] = "Suspend"
    """At the limit: Suspend running work (resumable), or only Refuse new work."""
    kinds: list[BudgetKind] = Field(default_factory=list)
    """Kinds it covers; every kind that costs money when empty."""
    selector: dict[str, str] = Field(default_factory=dict)
    """Only resources with these labels count; all of the project when empty."""


class Budget(Resource):
    """A project spending limit."""

    API_VERSION = "nodus.dev/v1"
    KIND = "Budget"
    SHORT_NAMES = ("budget", "budgets")
    UPDATABLE_IN_PLACE = ("limitUSD", "period", "action", "kinds", "selector")

    api_version: Literal["nodus.dev/v1"]
    """Always nodus.dev/v1."""
    kind: Literal["Budget"]
    """Always Budget."""
    spec: BudgetSpec
    """The desired state."""
