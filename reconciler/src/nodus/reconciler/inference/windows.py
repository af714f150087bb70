"""The 60-second sliding windows of `rpm` and `tpm`: does one more request fit, and if not, when will it?

Who uses it: the ledger, inside the transaction that admits a request, with the admissions of the last 60 seconds
it read there. Pure functions of those numbers, so the arithmetic of Retry-After is tested on its own.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

WINDOW_S = 60.0


def _seconds_until(moment: float, now: float) -> int:
    return max(1, math.ceil(moment - now))


def rpm_retry_after(admitted: Sequence[float], rpm: int, now: float) -> int | None:
    """None when one more request fits under `rpm` given the admission times in the window (oldest first); else
    the seconds until enough of them have left the window for one more."""
    if len(admitted) < rpm:
        return None
    # With n in the window, the (n - rpm + 1)-th oldest must leave before the count is under rpm.
    return _seconds_until(admitted[len(admitted) - rpm] + WINDOW_S, now)


def tpm_retry_after(entries: Sequence[tuple[float, int]], need: int, tpm: int, now: float) -> int | None:
    """None when `need` more tokens fit under `tpm` given the window's (admitted_at, tokens), oldest first; else
    the seconds until enough tokens have left the window. `need` over `tpm` itself never fits: the caller refuses
    that request outright instead of asking it to wait."""
    used = sum(tokens for _, tokens in entries)
    if used + need <= tpm:
        return None
    for admitted_at, tokens in entries:
        used -= tokens
        if used + need <= tpm:
            return _seconds_until(admitted_at + WINDOW_S, now)
    return _seconds_until(now + WINDOW_S, now)
