"""Which project Budgets cover an endpoint, and the UTC day their period starts.

Who uses it: the ledger, inside the transaction that admits a request: the request's hold must fit under the
limit of every Budget that covers its endpoint, counting what that Budget's endpoints spent in the period and
what their running requests hold. A Budget (`nodus.specs.budget`) covers an endpoint when its `kinds` are empty
or name InferenceEndpoint and its `selector` matches the endpoint's labels. Periods are UTC calendar days and
months, or Total. Only inference spend is counted here: what TrainingJobs cost is the Budget wiring of their
controller.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from datetime import UTC, datetime
from decimal import Decimal

from nodus.reconciler.inference.money import usd_to_nanos
from nodus.reconciler.state.records import ResourceRecord

KIND = "Budget"
COVERED_KIND = "InferenceEndpoint"


@dataclass(frozen=True)
class BudgetRule:
    name: str
    limit_nanos: int
    period: str
    """Daily, Monthly or Total."""
    selector: Mapping[str, str]

    def covers(self, labels: Mapping[str, str]) -> bool:
        return all(labels.get(key) == value for key, value in self.selector.items())


def budget_rules(records: list[ResourceRecord]) -> list[BudgetRule]:
    """The Budgets among `records` that apply to InferenceEndpoints (a record being deleted no longer does)."""
    rules = []
    for record in records:
        spec = record.spec.get("spec") or {}
        kinds = spec.get("kinds") or []
        if record.deleting or (kinds and COVERED_KIND not in kinds):
            continue
        rules.append(
            BudgetRule(
                name=record.key.name,
                limit_nanos=usd_to_nanos(Decimal(str(spec.get("limitUSD", "0")))),
                period=str(spec.get("period") or "Monthly"),
                selector=dict(spec.get("selector") or {}),
            )
        )
    return rules


def utc_day(moment: float) -> str:
    return datetime.fromtimestamp(moment, UTC).strftime("%Y-%m-%d")


def period_start(period: str, now: float) -> str:
    """The first UTC day (YYYY-MM-DD) the period counts; "" (every day) for Total."""
    today = utc_day(now)
    if period == "Daily":
        return today
    if period == "Monthly":
        return today[:8] + "01"
    return ""
