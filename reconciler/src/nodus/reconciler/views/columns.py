"""`nodus get` columns per kind, as the seeds show them (`NAME RUNTIME PHASE STAGE CHANGE COST AGE`).

Who calls it: `nodus get` (table and `-o wide`). Each kind has its columns; an unknown kind gets NAME, PHASE
and AGE. Values come from the record's spec and status; a missing one is shown as `-`. The PHASE cell of a
resource that waits or stopped says why (`Pending (EnvironmentNotReady)`); `-o wide` puts it in REASON, and
adds, for every kind, SYNC, HEALTH and REVISION: what `nodus controller` last synced (`controller.sync_status`),
and for a TrainingJob GRADING-FAILURES: failed of all gradings (`views.warnings.failures_cell`).
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

from nodus.reconciler.gitops.sync_status import health_of, sync_state
from nodus.reconciler.state.records import ResourceRecord
from nodus.reconciler.views.headline import headline_cell
from nodus.reconciler.views.warnings import failures_cell
from nodus.specs.status_names import Phase

Column = tuple[str, Callable[[ResourceRecord], str]]


def _get(document: Any, *path: str) -> Any:
    for part in path:
        if not isinstance(document, dict) or part not in document:
            return None
        document = document[part]
    return document


def _text(value: Any) -> str:
    return "-" if value in (None, "", [], {}) else str(value)


def age(seconds: float) -> str:
    """`42s`, `6m`, `3h`, `2d`: how kubectl shows ages."""
    if seconds < 120:
        return f"{int(seconds)}s"
    if seconds < 7200:
        return f"{int(seconds // 60)}m"
    if seconds < 172800:
        return f"{int(seconds // 3600)}h"
    return f"{int(seconds // 86400)}d"


def _name(record: ResourceRecord) -> str:
    return record.key.name


def _phase(record: ResourceRecord) -> str:
    if record.missing:
        return "Missing"  # in git, not in the store: see `-o wide` (SYNC, HEALTH) and the sync message
    phase = _get(record.status, "phase")
    return "Deleting" if record.deleting else _text(phase)


WHY_PHASES = frozenset({Phase.PENDING, Phase.FAILED, Phase.SUSPENDED, Phase.CANCELLED})
"""Phases whose reason the table's PHASE cell carries, `Pending (EnvironmentNotReady)`, as kubectl's STATUS
says `CrashLoopBackOff`: the phase alone would not say what to do. `-o wide` has REASON on its own instead."""


def _phase_and_reason(record: ResourceRecord) -> str:
    phase = _phase(record)
    reason = _get(record.status, "reason")
    return f"{phase} ({reason})" if phase in WHY_PHASES and reason else phase


def _age(record: ResourceRecord) -> str:
    return age(max(0.0, time.time() - record.created_at)) if record.created_at else "-"


def _cost(record: ResourceRecord) -> str:
    cost = _get(record.status, "cost", "totalUSD")
    return "-" if cost is None else f"${float(cost):.2f}"


def _change(record: ResourceRecord) -> str:
    """The change in pass rate of a compared run (`+12.5pp`), else the runtime's headline metric (`loss
    2.31→1.88`, `pass 62.5%`: `views.results.headline_cell`), else the platform's own final pass rate."""
    change = _get(record.status, "summary", "comparison", "changePoints")
    if change is not None:
        return f"{float(change):+.1f}pp"
    found = _get(record.status, "headline")
    if isinstance(found, dict):
        return headline_cell(found)
    final = _get(record.status, "summary", "finalPassRate")
    if _get(record.status, "summary", "comparison") is None and isinstance(final, int | float):
        return f"pass {float(final) * 100:.1f}%"
    return "-"


def _model(record: ResourceRecord) -> str | None:
    """What an endpoint serves: its catalog id as written, else what its status resolved (`{trainingJob: x}`)."""
    model = _get(record.spec, "spec", "model")
    if isinstance(model, str):
        return model
    return _get(record.status, "model") or next((f"{k}:{v}" for k, v in (model or {}).items()), None)


def _ready(record: ResourceRecord) -> str:
    found = [c.get("status") for c in _get(record.status, "conditions") or [] if c.get("type") == "Ready"]
    return str(found[0]) if found else "-"


def _max_cost(record: ResourceRecord) -> str:
    cap = _get(record.spec, "spec", "maxCostUSD")
    return "-" if cap is None else f"${cap}"


def _splits(record: ResourceRecord) -> str:
    splits = _get(record.status, "splits") or {}
    return " ".join(f"{k}={v}" for k, v in sorted(splits.items())) or "-"


COLUMNS: dict[str, list[Column]] = {
    "TrainingJob": [
        ("NAME", _name),
        ("RUNTIME", lambda r: _text(_get(r.spec, "spec", "runtime"))),
        ("PHASE", _phase),
        ("STAGE", lambda r: _text(_get(r.status, "stage"))),
        ("CHANGE", _change),
        ("COST", _cost),
        ("AGE", _age),
    ],
    "Environment": [
        ("NAME", _name),
        ("VERSION", lambda r: _text(_get(r.spec, "spec", "version"))),
        ("PHASE", _phase),
        ("SPLITS", _splits),
        ("AGE", _age),
    ],
    "Job": [("NAME", _name), ("PHASE", _phase), ("COST", _cost), ("AGE", _age)],
    # The seeds' `nodus get ep`: NAME PHASE MODEL READY RPM CONCURRENT MAX-COST AGE.
    "InferenceEndpoint": [
        ("NAME", _name),
        ("PHASE", _phase),
        ("MODEL", lambda r: _text(_model(r))),
        ("READY", lambda r: _ready(r)),
        ("RPM", lambda r: _text(_get(r.spec, "spec", "rpm"))),
        ("CONCURRENT", lambda r: _text(_get(r.spec, "spec", "maxConcurrent"))),
        ("MAX-COST", lambda r: _max_cost(r)),
        ("AGE", _age),
    ],
}
WIDE: dict[str, list[Column]] = {
    "TrainingJob": [
        ("STEP", lambda r: _text(_get(r.status, "step"))),
        ("REASON", lambda r: _text(_get(r.status, "reason"))),
        ("GRADING-FAILURES", lambda r: failures_cell(r.status)),
        ("GENERATION", lambda r: str(r.generation)),
    ],
    "Environment": [
        ("IMAGE", lambda r: _text((_get(r.status, "image") or "")[:19])),
        ("REASON", lambda r: _text(_get(r.status, "reason"))),
    ],
    "InferenceEndpoint": [
        ("TPM", lambda r: _text(_get(r.spec, "spec", "tpm"))),
        ("SERVED", lambda r: _text(_get(r.status, "servedModel"))),
        ("RESTARTS", lambda r: _text(_get(r.status, "restarts"))),
        ("REASON", lambda r: _text(_get(r.status, "reason"))),
    ],
}
DEFAULT: list[Column] = [("NAME", _name), ("PHASE", _phase), ("AGE", _age)]
SYNC: list[Column] = [
    ("SYNC", sync_state),
    ("HEALTH", health_of),
    ("REVISION", lambda r: r.sync.revision[:7] if r.sync is not None else "-"),
]
"""The controller's view, in `-o wide` of every kind (the default columns are the seeds')."""


def columns(kind: str, *, wide: bool = False) -> list[Column]:
    base = COLUMNS.get(kind, DEFAULT)
    if not wide:
        base = [(title, _phase_and_reason if value is _phase else value) for title, value in base]
    extra = [*WIDE.get(kind, [("REASON", lambda r: _text(_get(r.status, "reason")))]), *SYNC] if wide else []
    return [*base, *extra]


def rows(
    kind: str, records: list[ResourceRecord], *, wide: bool = False, base: list[Column] | None = None
) -> tuple[list[str], list[list[str]]]:
    """The titles and cells of the table; `base`, columns of a view of its own (the catalog's) in place of the
    kind's, with `-o wide`'s extra columns after them."""
    chosen = (
        columns(kind, wide=wide)
        if base is None
        else [*base, *columns(kind, wide=wide)[len(COLUMNS.get(kind, DEFAULT)) :]]
    )
    return [title for title, _ in chosen], [[value(record) for _, value in chosen] for record in records]


def plain(titles: list[str], values: list[list[str]]) -> str:
    """The table for a pipe or a file (CI logs, grep, awk): every cell whole, columns three spaces apart as
    kubectl prints them, no styling and no width limit."""
    table = [titles, *values]
    widths = [max(len(row[column]) for row in table) for column in range(len(titles))]
    return "\n".join(
        "   ".join(cell.ljust(width) for cell, width in zip(row, widths, strict=True)).rstrip() for row in table
    )


def document(record: ResourceRecord) -> dict[str, Any]:
    """The record as `-o yaml|json` prints it: the applied document plus its status and bookkeeping."""
    out: dict[str, Any] = dict(record.spec)
    if record.missing:  # only git has it: what the store knows is its key
        out = {"kind": record.key.kind, "metadata": {"name": record.key.name}}
    metadata = dict(out.get("metadata") or {})
    metadata.update(generation=record.generation, project=record.key.project)
    out["metadata"] = metadata
    out["status"] = record.status
    if record.sync is not None:
        out["sync"] = {
            "status": sync_state(record),
            "health": health_of(record),
            "revision": record.sync.revision,
            "outcome": record.sync.outcome,
            "message": record.sync.message,
            "syncedAt": record.sync.at,
        }
    return out
