"""Evidence an environment adds to the verdict it is computing (e.g. how completion code was isolated).

Who uses it: `environment.Environment.grade_line` opens a record around each reward call and puts what was
noted under `evidence`; `execute.run_function` notes the isolation and duration of each run; environments
may call `note(...)` themselves. The grader is single-threaded, so one module-level record is enough.
"""

from __future__ import annotations

from typing import Any

_record: dict[str, Any] | None = None


def begin() -> None:
    """Start collecting for one graded line."""
    global _record
    _record = {}


def note(**fields: Any) -> None:
    """Add JSON-serialisable fields to the current line's evidence (ignored outside grading)."""
    if _record is not None:
        _record.update(fields)


def collect() -> dict[str, Any]:
    """What was noted since `begin`, and stop collecting."""
    global _record
    found, _record = _record or {}, None
    return found
