"""`price_plan`: a plan's changes priced, each TrainingJob by the estimator and each InferenceEndpoint per month.

Who calls it: `nodus plan` (`nodus.cli.plan_apply`) and the planner's golden files (`nodus.reconciler.planning.
golden`). It is apart from `costs` (the `PlanCosts` types the renderers import) because it loads the estimator and
the facts it gathers, which `nodus --help` and the renderers do not need.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from nodus.reconciler.pricing.costs import PRICED_KINDS, ActionCost, PlanCosts, endpoint_monthly
from nodus.reconciler.pricing.facts import Context, estimate_job
from nodus.reconciler.pricing.prices import PriceTable
from nodus.reconciler.state.records import JSONObject, ResourceKey

if TYPE_CHECKING:
    from nodus.reconciler.planning.diff import Plan


def price_plan(plan: Plan, context: Context) -> PlanCosts:
    """The cost of every TrainingJob and InferenceEndpoint change of `plan` (no-ops left out)."""
    documents = {action.key: action.desired for action in plan.actions if action.desired is not None}
    found: dict[ResourceKey, ActionCost] = {}
    for action in plan.changes:
        if action.key.kind not in PRICED_KINDS:
            continue
        record = context.record(action.key)
        stored = record.spec if record is not None and action.type != "create" else None
        if action.key.kind == "InferenceEndpoint":
            found[action.key] = _endpoint_cost(action.type, action.desired, stored, context.prices)
            continue
        if action.desired is None:
            found[action.key] = ActionCost(action.type, "run")
            continue
        new = estimate_job(action.desired, context, documents, key=action.key)
        before = None
        if stored is not None:
            before = estimate_job(stored, context, documents, key=action.key).cost_usd
        reasons = tuple(str(item) for item in new.unpriced)
        found[action.key] = ActionCost(action.type, "run", new.cost_usd, before, reasons, new.to_dict())
    return PlanCosts(found, context.prices.ref())


def _endpoint_cost(
    action: str, desired: JSONObject | None, stored: JSONObject | None, prices: PriceTable
) -> ActionCost:
    cost, reason = endpoint_monthly(desired, prices) if desired is not None else (None, None)
    before = endpoint_monthly(stored, prices)[0] if stored is not None else None
    return ActionCost(action, "month", cost, before, (reason,) if reason else (), ceiling=True)
