"""What `nodus get`/`describe` say about a job's heartbeat: a live job that went silent may be lost, and a job that
moved on since its status was written needs a refresh; nothing is said of a status that matches the job."""

from __future__ import annotations

from nodus.cli.resources import SILENT_AFTER_S, heartbeat_note
from nodus.reconciler.controllers.base import Heartbeat
from nodus.reconciler.state.records import ResourceKey, ResourceRecord

KEY = ResourceKey("TrainingJob", "default", "run")


def record(status: dict[str, object], updated_at: float = 100.0) -> ResourceRecord:
    return ResourceRecord(KEY, {}, "", status=status, updated_at=updated_at)


def test_a_status_that_matches_the_job_gets_no_note() -> None:
    assert heartbeat_note(record({"phase": "Running", "step": 3}), Heartbeat(110.0, "Running", 3), 112.0) is None


def test_a_job_that_moved_on_asks_for_a_refresh() -> None:
    note = heartbeat_note(record({"phase": "Running", "step": 3}), Heartbeat(110.0, "Running", 5), 112.0)
    assert note == "the status below is from 12s ago, older than the heartbeat: run nodus refresh"


def test_a_live_job_that_stopped_heartbeating_may_be_lost() -> None:
    now = 110.0 + SILENT_AFTER_S + 1
    note = heartbeat_note(record({"phase": "Running", "step": 3}), Heartbeat(110.0, "Running", 3), now)
    assert note == "no heartbeat since: its supervisor may be lost; nodus refresh recovers it"
    assert heartbeat_note(record({"phase": "Succeeded"}), Heartbeat(110.0, "Succeeded"), now) is None
