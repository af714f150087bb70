"""Money in the inference ledger: integer nano-dollars, per-token rates from the price table, and their USD text.

Who uses it: the ledger (holds, charges, caps and Budgets are compared in nano-dollars, so sums are exact on
SQLite and PostgreSQL alike and receipts add up to the spend to the last nano-dollar) and the gateway (a request's
hold from its token bounds). Costs round up to the next nano-dollar: a hold is never below what the tokens it
bounds cost, and a charge (fewer tokens, same rates) is never above its hold.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from decimal import Decimal

from nodus.reconciler.pricing.prices import PriceTable
from nodus.specs.types import format_usd

NANOS_PER_USD = 10**9
_NANOS_PER_TOKEN_AT_ONE_USD_PER_MILLION = Decimal(NANOS_PER_USD) / Decimal(10**6)


@dataclass(frozen=True)
class Rates:
    """US dollars per million tokens of one model, from the price table of `pricebook_version`. Cached input
    tokens are charged at the input rate: the price table has no separate cached price."""

    input_usd_per_million: Decimal
    output_usd_per_million: Decimal

    def cost_nanos(self, input_tokens: int, output_tokens: int) -> int:
        exact = (
            input_tokens * self.input_usd_per_million + output_tokens * self.output_usd_per_million
        ) * _NANOS_PER_TOKEN_AT_ONE_USD_PER_MILLION
        return math.ceil(exact)


def rates_for(table: PriceTable, model: str) -> Rates | None:
    """The per-token rates of `model` (by its id, else its family name), or None when the table has none."""
    price = table.token_price(model)
    if price is None:
        return None
    return Rates(price.input_usd, price.output_usd)


def usd_to_nanos(amount: Decimal) -> int:
    """A dollar amount (at most 6 decimals, as specs write them) in nano-dollars, rounded up past 9 decimals."""
    return math.ceil(amount * NANOS_PER_USD)


def usd_text(nanos: int) -> str:
    """`format_usd` of nano-dollars: "0.000015", "5.00"."""
    return format_usd(Decimal(nanos).scaleb(-9))
