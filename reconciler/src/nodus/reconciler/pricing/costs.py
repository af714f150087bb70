"""Priced plans: what each change of a plan costs, and the headline of the pull-request comment.

Who calls it: `nodus plan` (`plan_prices.price_plan` makes a `PlanCosts`; the renderers of
`nodus.reconciler.planning.render` import its types from here) and the planner's golden files. This module holds
the types and the endpoint arithmetic only, so the renderers (which `nodus --help` loads) do not load the
estimator. A TrainingJob that is created or replaced gets the estimate of a whole run to completion; an update in
place (or a replacement) also gets the cost change against the stored spec priced with the same table and facts,
so the change reflects the spec, not the table. A standing InferenceEndpoint is billed per token: its monthly
figure is the most it can cost at its `tpm` limit, and without a limit or a per-token price it is listed as
unpriced. Deletes of one-off runs save nothing (what ran is spent).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from decimal import Decimal
from typing import Any, Literal

from nodus.reconciler.pricing.prices import PriceTable
from nodus.reconciler.state.records import JSONObject, ResourceKey
from nodus.specs.types import format_usd

Period = Literal["run", "month"]
MINUTES_PER_MONTH = 30 * 24 * 60
PRICED_KINDS = ("TrainingJob", "InferenceEndpoint")


@dataclass(frozen=True)
class ActionCost:
    """The cost of one action of a plan."""

    action: str
    """create, update, replace or delete."""
    period: Period
    """`run`: a one-off run to completion; `month`: a standing resource, per 30 days."""
    cost_usd: Decimal | None = None
    """The desired spec's cost (None: unpriced, or a delete)."""
    before_usd: Decimal | None = None
    """The stored spec's cost, for updates, replacements and deletes (None: unknown or none stored)."""
    unpriced: tuple[str, ...] = ()
    """Why the cost is incomplete or unknown, one line each."""
    estimate: JSONObject | None = None
    """The full estimate (a TrainingJob's `status.estimate`)."""
    ceiling: bool = False
    """The figure is an upper bound (an endpoint at its tpm limit)."""

    @property
    def starts_run(self) -> bool:
        return self.period == "run" and self.action in ("create", "replace")

    @property
    def change_usd(self) -> Decimal | None:
        """What the plan changes: a new run's whole cost, new minus stored for changes, minus the stored monthly
        figure for a deleted endpoint; None when either side is unknown, or for a deleted run (nothing saved)."""
        if self.action == "create":
            return self.cost_usd
        if self.action == "delete":
            if self.period == "month" and self.before_usd is not None:
                return -self.before_usd
            return None
        if self.cost_usd is None or self.before_usd is None:
            return None
        return self.cost_usd - self.before_usd

    def to_dict(self) -> JSONObject:
        out: JSONObject = {
            "action": self.action,
            "period": self.period,
            "costUSD": _usd(self.cost_usd),
            "beforeUSD": _usd(self.before_usd),
            "changeUSD": _signed(self.change_usd),
        }
        if self.ceiling:
            out["ceiling"] = True
        out["unpriced"] = list(self.unpriced)
        if self.estimate is not None:
            out["estimate"] = self.estimate
        return out


@dataclass(frozen=True)
class PlanCosts:
    """The costs of a plan's actions, by resource, and the table they were priced with."""

    actions: Mapping[ResourceKey, ActionCost] = field(default_factory=dict)
    prices: JSONObject = field(default_factory=dict)
    """`{version, file, overrides}` of the table."""

    def get(self, key: ResourceKey) -> ActionCost | None:
        return self.actions.get(key)

    @property
    def runs(self) -> list[ActionCost]:
        """The one-off runs the plan starts (TrainingJobs created or replaced)."""
        return [cost for cost in self.actions.values() if cost.starts_run]

    @property
    def one_off_usd(self) -> Decimal:
        """The priced runs' cost to completion (unpriced ones are counted apart, never as $0)."""
        return sum((cost.cost_usd for cost in self.runs if cost.cost_usd is not None), Decimal(0))

    @property
    def standing(self) -> list[ActionCost]:
        return [cost for cost in self.actions.values() if cost.period == "month"]

    @property
    def monthly_change_usd(self) -> Decimal | None:
        """The change of the standing endpoints' monthly figure; None when some change is unpriced."""
        changes = [cost.change_usd for cost in self.standing]
        if any(change is None for change in changes):
            return None
        return sum((change for change in changes if change is not None), Decimal(0))

    def unpriced(self) -> list[tuple[ResourceKey, str]]:
        return [(key, reason) for key, cost in self.actions.items() for reason in cost.unpriced]

    def to_dict(self) -> JSONObject:
        return {
            "currency": "USD",
            "prices": dict(self.prices),
            "oneOffUSD": format_usd(self.one_off_usd),
            "runs": len(self.runs),
            "unpricedRuns": sum(1 for cost in self.runs if cost.cost_usd is None),
            "monthlyChangeUSD": _signed(self.monthly_change_usd) if self.standing else None,
            "unpriced": [{"ref": str(key), "reason": reason} for key, reason in self.unpriced()],
            "actions": {str(key): cost.to_dict() for key, cost in self.actions.items()},
        }


def endpoint_monthly(document: JSONObject, prices: PriceTable) -> tuple[Decimal | None, str | None]:
    """(the most an endpoint can cost in 30 days at its tpm limit, why it cannot be priced)."""
    spec = document.get("spec") or {}
    model, why = priced_model(spec.get("model"))
    if spec.get("state") == "Stopped":
        return Decimal(0), None
    if model is None:
        return None, why
    price = prices.token_price(model)
    if price is None:
        return None, f"no per-token price for {model} in the price table (version {prices.version})"
    rates = f"${format_usd(price.input_usd)}/${format_usd(price.output_usd)} per million input/output tokens"
    tpm = spec.get("tpm")
    if not isinstance(tpm, int):
        return None, f"billed per token ({rates}); no tpm limit bounds a month"
    monthly = Decimal(tpm) * MINUTES_PER_MONTH * price.blended() / Decimal(1_000_000)
    return monthly.quantize(Decimal("0.01")), None


def priced_model(model: Any) -> tuple[str | None, str]:
    """The model id an endpoint's tokens are priced by: a catalog id as written, a pinned revision's `org/name`;
    for a trained adapter or a Volume, none before it runs (its base's, which its status names then)."""
    if isinstance(model, str):
        return model, ""
    if isinstance(model, dict) and model.get("uri"):
        return str(model["uri"]).removeprefix("hf://").partition("@")[0], ""
    if isinstance(model, dict) and model.get("trainingJob"):
        return None, f"billed per token at its base model's rates, known once TrainingJob/{model['trainingJob']} ran"
    return None, "billed per token at the rates of the model its Volume holds, known once it serves"


def _usd(value: Decimal | None) -> str | None:
    return None if value is None else format_usd(value)


def _signed(value: Decimal | None) -> str | None:
    """`+1.50`, `-0.25`, `0.00`: a change, with its sign."""
    if value is None:
        return None
    if value > 0:
        return "+" + format_usd(value)
    if value < 0:
        return "-" + format_usd(-value)
    return format_usd(Decimal(0))


def money(value: Decimal, *, signed: bool = False) -> str:
    """`$1.50`, `+$1.50`, `-$0.25`: for the renderers."""
    if signed and value > 0:
        return "+$" + format_usd(value)
    if value < 0:
        return "-$" + format_usd(-value)
    return "$" + format_usd(value)
