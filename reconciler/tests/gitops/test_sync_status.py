"""Health per kind (a pure function of the observed status), Synced/OutOfSync, and the sync summary."""

from __future__ import annotations

import pytest

from nodus.reconciler.gitops.sync_status import (
    DEGRADED,
    HEALTHY,
    MISSING,
    PROGRESSING,
    SUSPENDED,
    UNKNOWN,
    SyncSummary,
    health,
    health_of,
    sync_state,
)
from nodus.reconciler.state.records import ResourceKey, ResourceRecord, SyncRecord


@pytest.mark.parametrize(
    ("kind", "phase", "expected"),
    [
        ("Environment", "Ready", HEALTHY),
        ("Environment", "Pending", PROGRESSING),  # not built yet, or building
        ("Environment", "Failed", DEGRADED),
        ("Environment", None, PROGRESSING),  # written, its controller not run yet
        ("TrainingJob", "Pending", PROGRESSING),
        ("TrainingJob", "Running", PROGRESSING),
        ("TrainingJob", "Succeeded", HEALTHY),
        ("TrainingJob", "Failed", DEGRADED),
        ("TrainingJob", "Cancelled", DEGRADED),
        ("TrainingJob", "Suspended", SUSPENDED),
        ("TrainingJob", None, PROGRESSING),
        ("Job", "Running", PROGRESSING),
        ("Job", "Succeeded", HEALTHY),
        ("Job", "Suspended", SUSPENDED),
        ("Volume", "Ready", HEALTHY),
        ("Volume", "Failed", DEGRADED),
        ("TrainingRuntime", "Ready", HEALTHY),
        # No controller runs these kinds (controllers.coverage): never Healthy, whatever a status says.
        ("Secret", "Ready", HEALTHY),
        ("Budget", "Ready", HEALTHY),
        ("InferenceEndpoint", "Running", HEALTHY),
        ("InferenceEndpoint", "Pending", PROGRESSING),
        ("InferenceEndpoint", "Stopped", SUSPENDED),
        ("InferenceEndpoint", "Failed", DEGRADED),
        ("AgentRun", "Running", UNKNOWN),
        ("AgentGroup", "Succeeded", UNKNOWN),
    ],
)
def test_health_per_kind(kind: str, phase: str | None, expected: str) -> None:
    status = {} if phase is None else {"phase": phase, "reason": "Whatever"}
    assert health(kind, status) == expected


def test_no_record_is_missing_and_a_deleting_one_progresses() -> None:
    assert health("TrainingJob", None) == MISSING and health_of(None) == MISSING
    assert health("TrainingJob", {"phase": "Succeeded"}, deleting=True) == PROGRESSING


def record(spec_hash: str, sync: SyncRecord | None, **status: str) -> ResourceRecord:
    key = ResourceKey("Job", "default", "a")
    return ResourceRecord(key, {"kind": "Job"}, spec_hash, status=dict(status), sync=sync)


def test_synced_when_the_stored_hash_is_the_one_in_git() -> None:
    key = ResourceKey("Job", "default", "a")
    assert sync_state(record("h1", None)) == "-"  # no controller synced it
    assert sync_state(record("h1", SyncRecord(key, "r", "h1", "Applied"))) == "Synced"
    assert sync_state(record("h2", SyncRecord(key, "r", "h1", "Applied"))) == "OutOfSync"  # changed by hand
    assert sync_state(record("h1", SyncRecord(key, "r", "", "NotInGit"))) == "OutOfSync"
    assert health_of(record("h1", None, phase="Running")) == PROGRESSING


def test_summary_round_trips_and_unreadable_text_is_none() -> None:
    summary = SyncSummary("/repo", "main", ".", "a" * 40, "Succeeded", "first sync", 1.0, 2.0, 3, 1)
    assert SyncSummary.from_json(summary.to_json()) == summary
    assert SyncSummary.from_json("not json") is None
    assert SyncSummary.from_json('{"repo": "/repo"}') is None  # a field missing: sync again rather than guess
