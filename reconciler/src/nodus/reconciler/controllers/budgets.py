"""Project Budgets at a TrainingJob's launch: its first hold must fit under every Budget that covers it.

Who calls it: the TrainingJob controller (`reconcile_trainingjob`), before a generation is launched (never for a run
already launched: a Budget stops new work; the spend of running work is its own cap's). The inference gateway checks
the same Budgets for each request in its ledger (`nodus.reconciler.inference.budgets`), which this counts too.

A Budget (`nodus.specs.budget`) covers a TrainingJob when its `kinds` are empty or name TrainingJob and its `selector`
matches the job's labels. What it has spent in its period (UTC day, UTC month, or Total): the cost so far of the runs
it covers that were created in the period (`status.cost.totalUSD`: a run's whole cost counts in the period it was
created in), plus, when it covers InferenceEndpoints too, the inference requests charged and held in the period (the
gateway's ledger). The first hold of a run is what its first hour costs at the price it launches with (all its
nodes), no more than its own cap: a run whose hold does not fit waits, Pending with reason BudgetExceeded, until the
period turns or the limit is raised.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime
from decimal import Decimal

from nodus.reconciler.state.records import JSONObject, ResourceRecord, StateStore
from nodus.specs.status_names import Phase, Reason

InferenceSpend = Callable[[str, ResourceRecord, float], Decimal]
"""(project, Budget, now) -> what the project's endpoints spent and hold in the Budget's period, in USD."""


@dataclass(frozen=True)
class Blocking:
    budget: str
    message: str


def period_start(period: str, now: float) -> float:
    """The epoch second the period starts: today 00:00 UTC, the 1st 00:00 UTC, or 0 for Total."""
    moment = datetime.fromtimestamp(now, UTC)
    if period == "Daily":
        return moment.replace(hour=0, minute=0, second=0, microsecond=0).timestamp()
    if period == "Monthly":
        return moment.replace(day=1, hour=0, minute=0, second=0, microsecond=0).timestamp()
    return 0.0


def covers(budget: ResourceRecord, kind: str, labels: dict[str, str]) -> bool:
    spec = budget.spec.get("spec") or {}
    kinds = spec.get("kinds") or []
    selector = spec.get("selector") or {}
    return not budget.deleting and (not kinds or kind in kinds) and all(labels.get(k) == v for k, v in selector.items())


def first_hold(per_hour: Decimal, nodes: int, cap: Decimal | None) -> Decimal:
    hold = per_hour * nodes
    return hold if cap is None else min(hold, cap)


def blocking_budget(
    record: ResourceRecord,
    store: StateStore,
    hold: Decimal,
    *,
    now: float,
    inference_spend: InferenceSpend | None = None,
) -> Blocking | None:
    """The first Budget the run's first `hold` would take past its limit, or None."""
    labels = dict((record.spec.get("metadata") or {}).get("labels") or {})
    for budget in store.list("Budget", record.key.project):
        if not covers(budget, record.key.kind, labels):
            continue
        spec = budget.spec["spec"]
        limit = Decimal(str(spec["limitUSD"]))
        period = str(spec.get("period") or "Monthly")
        spent = _runs_spent(store, budget, record, period_start(period, now))
        kinds = spec.get("kinds") or []
        if inference_spend is not None and (not kinds or "InferenceEndpoint" in kinds):
            spent += inference_spend(record.key.project, budget, now)
        if spent + hold > limit:
            when = {"Daily": "today", "Monthly": "this month", "Total": "in all"}.get(period, period)
            message = (
                f"Budget {budget.key.name}: ${spent:.4f} spent {when} of its ${limit}; this run's first hold "
                f"${hold:.4f} would pass it (raise spec.limitUSD, or wait for the period to turn)"
            )
            return Blocking(budget.key.name, message)
    return None


def spent(
    budget: ResourceRecord, store: StateStore, *, now: float, inference_spend: InferenceSpend | None = None
) -> Decimal:
    """What the Budget's runs (and endpoints, when it covers them) have spent in its current period, in USD."""
    spec = budget.spec["spec"]
    since = period_start(str(spec.get("period") or "Monthly"), now)
    total = Decimal(0)
    for kind in ("TrainingJob", "Job"):
        for other in store.list(kind, budget.key.project):
            labels = dict((other.spec.get("metadata") or {}).get("labels") or {})
            if other.created_at >= since and covers(budget, kind, labels):
                total += Decimal(str((other.status.get("cost") or {}).get("totalUSD") or 0))
    kinds = spec.get("kinds") or []
    if inference_spend is not None and (not kinds or "InferenceEndpoint" in kinds):
        total += inference_spend(budget.key.project, budget, now)
    return total


def budget_status(blocking: Blocking) -> JSONObject:
    return {"phase": Phase.PENDING, "reason": Reason.BUDGET_EXCEEDED, "message": blocking.message}


def _runs_spent(store: StateStore, budget: ResourceRecord, record: ResourceRecord, since: float) -> Decimal:
    total = Decimal(0)
    for kind in ("TrainingJob", "Job"):
        for other in store.list(kind, record.key.project):
            if other.key == record.key or other.created_at < since:
                continue
            labels = dict((other.spec.get("metadata") or {}).get("labels") or {})
            if not covers(budget, kind, labels):
                continue
            cost = (other.status.get("cost") or {}).get("totalUSD")
            if cost is not None:
                total += Decimal(str(cost))
    return total
