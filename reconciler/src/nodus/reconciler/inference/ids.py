"""Identifiers the gateway hands out: request ids like the seeds' `ireq_01k6d2x7q9fvjt3y8m0c4r5n2e` and gateway
process ids (`gw_...`).

Who uses it: the gateway (one request id per request, in the `Nodus-Request-Id` header and the receipt) and the
ledger (a gateway's id when it registers). The 26 characters after the prefix are a ULID in lower-case Crockford
base32: 48 bits of milliseconds then 80 random bits, so ids sort by time and never collide across gateways.
"""

from __future__ import annotations

import os
import random
import re
import time

_CROCKFORD = "0123456789abcdefghjkmnpqrstvwxyz"
REQUEST_PREFIX = "ireq_"
GATEWAY_PREFIX = "gw_"
REQUEST_ID_RE = re.compile(r"^ireq_[0-9a-hjkmnp-tv-z]{26}$")


class _Bits:
    """80 random bits per id from a generator seeded once per process from the OS (an id must be unique, not
    secret; asking the OS for every id costs a system call per request)."""

    def __init__(self) -> None:
        self.pid = -1
        self.generator = random.Random()

    def draw(self) -> int:
        if self.pid != os.getpid():  # a forked child must not repeat its parent's ids
            self.pid = os.getpid()
            self.generator.seed(os.urandom(32))
        return self.generator.getrandbits(80)


_BITS = _Bits()


def ulid(now: float | None = None) -> str:
    millis = int((time.time() if now is None else now) * 1000) & ((1 << 48) - 1)
    value = (millis << 80) | _BITS.draw()
    return "".join(_CROCKFORD[(value >> shift) & 31] for shift in range(125, -1, -5))


def new_request_id() -> str:
    return REQUEST_PREFIX + ulid()


def new_gateway_id() -> str:
    return GATEWAY_PREFIX + ulid()
