"""Times as people read them: the epoch seconds a status stores (`endedAt: 1796243113.825876`) shown as RFC 3339
UTC (`2026-12-02T20:25:13Z`), the form the rest of nodus prints times in (a Budget's period, an estimate's start).

Who calls it: `nodus describe` (`nodus.cli.resources`), for the status it prints. `nodus get -o yaml|json` keep
the stored numbers: scripts compute with those.
"""

from __future__ import annotations

import time
from typing import Any

RFC3339 = "%Y-%m-%dT%H:%M:%SZ"


def rfc3339(epoch: float) -> str:
    """`1796243113.8` -> `2026-12-02T20:25:13Z` (UTC, whole seconds)."""
    return time.strftime(RFC3339, time.gmtime(epoch))


def readable(value: Any) -> Any:
    """`value` with every `...At` field that holds epoch seconds (startedAt, endedAt, heartbeatAt, ...) written as
    RFC 3339 UTC, at any depth (the attempts of a gang, an export); nothing else changes."""
    if isinstance(value, dict):
        return {key: _field(str(key), item) for key, item in value.items()}
    if isinstance(value, list):
        return [readable(item) for item in value]
    return value


def _field(key: str, value: Any) -> Any:
    is_number = isinstance(value, int | float) and not isinstance(value, bool)
    if key.endswith("At") and is_number and value > 0:
        return rfc3339(float(value))
    return readable(value)
