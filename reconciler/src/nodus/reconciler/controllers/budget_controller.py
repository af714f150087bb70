"""The Budget controller: a Budget is Ready once stored, and says what its runs and endpoints have spent this period.

Who calls it: `nodus.reconciler.controllers.registry` (registered for Budget). The Budget itself acts where money is
committed: a TrainingJob's launch (`controllers/budgets.py`, its first hold) and each inference request (the gateway's
ledger, `nodus.reconciler.inference`). Its status is the reading of `nodus get budget`: `spentUSD` in the period that
started at `periodStart` (UTC), against `limitUSD`.
"""

from __future__ import annotations

import time
from datetime import UTC, datetime
from decimal import Decimal

from nodus.reconciler.controllers.base import Context, ControllerBase, Done
from nodus.reconciler.controllers.budgets import period_start, spent
from nodus.reconciler.inference.api import budget_spend
from nodus.reconciler.state.records import ResourceRecord
from nodus.specs.status_names import Phase


class BudgetController(ControllerBase):
    kind = "Budget"

    def reconcile(self, record: ResourceRecord, context: Context) -> Done:
        return Done(self._status(record, context))

    def observe(self, record: ResourceRecord, context: Context) -> Done | None:
        status = self._status(record, context)
        return None if status == record.status else Done(status)

    def _status(self, record: ResourceRecord, context: Context) -> dict[str, object]:
        now = time.time()
        spec = record.spec["spec"]
        period = str(spec.get("period") or "Monthly")

        def inference(project: str, budget: ResourceRecord, at: float) -> Decimal:
            return budget_spend(context.store, project, budget, at)

        total = spent(record, context.store, now=now, inference_spend=inference)
        start = datetime.fromtimestamp(period_start(period, now), UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
        return {
            "phase": Phase.READY,
            "spentUSD": f"{total:.4f}",
            "limitUSD": str(spec["limitUSD"]),
            "period": period,
            "periodStart": start,
        }
