"""Sync and health per resource, and the controller's bookkeeping of what it synced.

Who calls it: `nodus get` (its SYNC, HEALTH and REVISION columns, `nodus.reconciler.views.columns`) and
`nodus.reconciler.gitops.sync`, which records a `SyncRecord` per resource (the desired spec hash at the
revision, so `nodus get` tells Synced from OutOfSync without reading git) and one `SyncSummary` per pass.

Sync, as Argo CD words it: `Synced` when the stored spec hash equals the one in git at the controller's last
revision, `OutOfSync` otherwise (changed by hand since, not applied yet, or in the store but no longer in git);
`-` when no controller has synced the resource. Health is a pure function of the kind and the observed status.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import asdict, dataclass
from typing import Any

from nodus.reconciler.controllers.coverage import has_controller
from nodus.reconciler.state.records import ResourceRecord, StateStore
from nodus.specs.status_names import Phase

SYNCED = "Synced"
OUT_OF_SYNC = "OutOfSync"
HEALTHY = "Healthy"
PROGRESSING = "Progressing"
DEGRADED = "Degraded"
SUSPENDED = "Suspended"
MISSING = "Missing"
UNKNOWN = "Unknown"
"""A kind nothing runs (`controllers.coverage`): stored, but not healthy, since nothing could make it unhealthy."""
HEALTH_STATES = (HEALTHY, PROGRESSING, DEGRADED, SUSPENDED, MISSING, UNKNOWN)

# Outcomes of one resource in a sync (SyncRecord.outcome).
APPLIED = "Applied"
FAILED = "Failed"
PENDING = "Pending"
NOT_IN_GIT = "NotInGit"

_RUNS: dict[str, str] = {
    Phase.PENDING: PROGRESSING,
    Phase.RUNNING: PROGRESSING,
    Phase.SUCCEEDED: HEALTHY,
    Phase.FAILED: DEGRADED,
    Phase.CANCELLED: DEGRADED,
    Phase.SUSPENDED: SUSPENDED,
}
"""TrainingJobs and Jobs: a run in flight is progressing; one that ended is healthy only if it succeeded."""
_READY: dict[str, str] = {Phase.READY: HEALTHY, Phase.FAILED: DEGRADED}
"""Environments, Volumes, runtimes: Ready or not yet (Pending, building, importing: progressing)."""
_SERVICES: dict[str, str] = {
    Phase.RUNNING: HEALTHY,
    Phase.PENDING: PROGRESSING,
    Phase.STOPPED: SUSPENDED,
    Phase.FAILED: DEGRADED,
}
"""InferenceEndpoints: serving (Running) is healthy, starting progresses, stopped on request is suspended."""
HEALTH_BY_KIND: dict[str, Mapping[str, str]] = {
    "InferenceEndpoint": _SERVICES,
    "TrainingJob": _RUNS,
    "Job": _RUNS,
    "Environment": _READY,
    "Volume": _READY,
    "TrainingRuntime": _READY,
}
_OTHER: dict[str, str] = {
    Phase.READY: HEALTHY,
    Phase.RUNNING: HEALTHY,
    Phase.SUCCEEDED: HEALTHY,
    Phase.FAILED: DEGRADED,
    Phase.CANCELLED: DEGRADED,
    Phase.SUSPENDED: SUSPENDED,
}
"""Kinds without a health table of their own: by the phase their status says."""


def health(kind: str, status: Mapping[str, Any] | None, *, deleting: bool = False) -> str:
    """Healthy, Progressing, Degraded, Suspended or Missing (no record: `status` None)."""
    if status is None:
        return MISSING
    if deleting:
        return PROGRESSING
    if not has_controller(kind):
        return UNKNOWN
    phase = status.get("phase")
    table = HEALTH_BY_KIND.get(kind)
    if table is None:
        return HEALTHY if phase is None else _OTHER.get(str(phase), PROGRESSING)
    return table.get(str(phase), PROGRESSING)


def health_of(record: ResourceRecord | None) -> str:
    """The health of a stored resource; Missing for none (or the row of one only git has)."""
    if record is None or record.missing:
        return MISSING
    return health(record.key.kind, record.status, deleting=record.deleting)


def sync_state(record: ResourceRecord) -> str:
    """Synced or OutOfSync against the controller's last revision; `-` when no controller synced it."""
    if record.sync is None:
        return "-"
    return SYNCED if record.sync.desired_hash == record.spec_hash else OUT_OF_SYNC


SUMMARY_KEY = "controller/last-sync"
"""Where the last pass's summary is kept (the store's key/value table)."""


@dataclass(frozen=True)
class SyncSummary:
    """One pass of the controller over a revision, as the store keeps it."""

    repo: str
    branch: str
    path: str
    revision: str
    outcome: str
    """Running (an apply under way, or one a killed controller left), Succeeded or Failed."""
    message: str = ""
    started_at: float = 0.0
    finished_at: float | None = None
    changed: int = 0
    launched: int = 0

    def to_json(self) -> str:
        return json.dumps(asdict(self), sort_keys=True)

    @classmethod
    def from_json(cls, text: str) -> SyncSummary | None:
        """None for text this nodus cannot read (a newer format): the next pass then syncs again."""
        try:
            data = json.loads(text)
            return cls(**{name: data[name] for name in cls.__dataclass_fields__ if name in data})
        except (ValueError, TypeError, KeyError):
            return None


def last_summary(store: StateStore) -> SyncSummary | None:
    text = store.get_value(SUMMARY_KEY)
    return None if text is None else SyncSummary.from_json(text)


def save_summary(store: StateStore, summary: SyncSummary) -> None:
    store.set_value(SUMMARY_KEY, summary.to_json())
