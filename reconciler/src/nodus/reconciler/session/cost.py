"""What a job's run costs and when it must stop for its cap: running time times the host's price.

Who uses it: `JobSession` (one `CostMeter` per session: the trainer's start and end, the accounting, the cap
check) and the local executor's job spec (`usd`, `parse_usd`: money as status.json and spec.json write it,
re-exported by `executors/local/job.py`). It knows nothing of processes: whoever starts the trainer says when.

The rule, as the seeds have it: before an accounting interval that would take the cost past `maxCostUSD`, the
run stops (Suspended, MaxCostReached), so the cost recorded never passes the cap by more than one interval.
Money is a Decimal in US dollars, written as a plain decimal string to the micro-dollar.
"""

from __future__ import annotations

import time
from decimal import Decimal, InvalidOperation
from typing import Final

from nodus.errors import ConfigError

USD_PLACES: Final = Decimal("0.000001")


def usd(value: Decimal) -> str:
    """Money as it is written to status: a plain decimal string to the micro-dollar."""
    return str(value.quantize(USD_PLACES))


def parse_usd(value: str, what: str) -> Decimal:
    try:
        amount = Decimal(value)
    except InvalidOperation:
        raise ConfigError(f"{what} must be a decimal number of US dollars, got {value!r}") from None
    if not amount.is_finite() or amount < 0:
        raise ConfigError(f"{what} must be a finite amount of US dollars, not negative; got {value!r}")
    return amount


class CostMeter:
    """The cost of one session of a run on top of what earlier sessions cost (`base`), and its cap.

    `started` and `ended` mark the trainer's running time (monotonic clock), which is what is billed; the cap
    (`max_cost_usd`, a decimal string or None) may change while the run goes on (`change_cap`).
    """

    def __init__(
        self, *, base: Decimal, price_per_hour: Decimal, max_cost_usd: str | None, accounting_interval_s: float
    ) -> None:
        self.base = base
        self.price_per_hour = price_per_hour
        self.max_cost_usd = max_cost_usd
        self.accounting_interval_s = accounting_interval_s
        self._started: float | None = None
        self._ended: float | None = None

    @property
    def running(self) -> bool:
        """Whether a trainer was started in this session (its time is billed, even once it ended)."""
        return self._started is not None

    def started(self) -> None:
        self._started = time.monotonic()

    def ended(self) -> None:
        """The trainer's end (the first call counts: stopping it again later bills nothing more)."""
        if self._started is not None and self._ended is None:
            self._ended = time.monotonic()

    def seconds(self) -> float:
        """How long this session's trainer has run (until it ended): what the job is billed for."""
        if self._started is None:
            return 0.0
        end = self._ended if self._ended is not None else time.monotonic()
        return round(end - self._started, 3)

    def session_cost(self) -> Decimal:
        return Decimal(str(self.seconds())) * self.price_per_hour / Decimal(3600)

    def total(self) -> Decimal:
        return self.base + self.session_cost()

    def interval_cost(self) -> Decimal:
        """What one accounting interval costs: the most a run may go over its cap."""
        return self.price_per_hour * Decimal(str(self.accounting_interval_s)) / Decimal(3600)

    def change_cap(self, max_cost_usd: str | None) -> bool:
        """Take a new cap (checked first); True when it differs from the one in force."""
        if max_cost_usd is not None:
            parse_usd(max_cost_usd, "maxCostUSD")
        if max_cost_usd == self.max_cost_usd:
            return False
        self.max_cost_usd = max_cost_usd
        return True

    def over_cap(self, cost: Decimal) -> str | None:
        """Why the run must stop now, when one more interval would take `cost` past the cap; else None."""
        if self.max_cost_usd is None:
            return None
        cap = parse_usd(self.max_cost_usd, "maxCostUSD")
        if cost + self.interval_cost() <= cap:
            return None
        message = f"cost ${usd(cost)} + one interval (${usd(self.interval_cost())}) would pass maxCostUSD ${cap}"
        return message + "; raise the cap to resume"
