"""Identifiers the gateway hands out: request ids like the seeds' `ireq_01k6d2x7q9fvjt3y8m0c4r5n2e` and gateway
process ids (`gw_...`).

Who uses it: the gateway (one request id per request, in the `Nodus-Request-Id` header and the receipt) and the
ledger (a gateway's id when it registers). The 26 characters after the prefix are a ULID in lower-case Crockford
base32: 48 bits of milliseconds then 80 random bits, so ids sort by time and never collide across gateways.
"""

from __future__ import annotations

import re
import secrets
import time

_CROCKFORD = "0123456789abcdefghjkmnpqrstvwxyz"
REQUEST_PREFIX = "ireq_"
GATEWAY_PREFIX = "gw_"
REQUEST_ID_RE = re.compile(r"^ireq_[0-9a-hjkmnp-tv-z]{26}$")


def ulid(now: float | None = None) -> str:
    millis = int((time.time() if now is None else now) * 1000) & ((1 << 48) - 1)
    value = (millis << 80) | secrets.randbits(80)
    return "".join(_CROCKFORD[(value >> shift) & 31] for shift in range(125, -1, -5))


def new_request_id() -> str:
    return REQUEST_PREFIX + ulid()


def new_gateway_id() -> str:
    return GATEWAY_PREFIX + ulid()
