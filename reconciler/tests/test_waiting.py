"""`nodus.reconciler.waiting`: when `apply --wait` and `nodus wait` are over, from records alone."""

from __future__ import annotations

from typing import Any, cast

import pytest

from nodus.reconciler.state.records import ResourceKey, ResourceRecord, StateStore
from nodus.reconciler.waiting import outcome

JOB = ResourceKey("TrainingJob", "default", "run")
ENV = ResourceKey("Environment", "default", "words")
SPEC = {"kind": "TrainingJob", "metadata": {"name": "run"}, "spec": {"environment": {"name": "words@1.0.0"}}}


class Records:
    """The part of a StateStore `outcome` reads."""

    def __init__(self, *records: ResourceRecord) -> None:
        self.records = {record.key: record for record in records}

    def get(self, key: ResourceKey) -> ResourceRecord | None:
        return self.records.get(key)


def record(key: ResourceKey, **status: Any) -> ResourceRecord:
    return ResourceRecord(key, SPEC if key.kind == "TrainingJob" else {"spec": {}}, "h", status=status)


def store(*records: ResourceRecord) -> StateStore:
    return cast("StateStore", Records(*records))


@pytest.mark.parametrize(
    ("phase", "suspended_ends", "ended", "succeeded"),
    [
        ("Succeeded", True, True, True),
        ("Failed", True, True, False),
        ("Cancelled", False, True, False),
        ("Suspended", True, True, False),
        ("Suspended", False, False, False),  # `nodus wait`: a patch may resume it
        ("Running", True, False, False),
    ],
)
def test_a_jobs_phase_ends_it(phase: str, suspended_ends: bool, ended: bool, succeeded: bool) -> None:
    found = outcome(record(JOB, phase=phase), store(), suspended_ends=suspended_ends)
    assert (found is not None) == ended
    assert found is None or found.succeeded == succeeded


def test_an_environment_is_ready_failed_or_blocked_when_nothing_builds_it() -> None:
    assert outcome(record(ENV, phase="Ready"), store(), suspended_ends=True).succeeded  # type: ignore[union-attr]
    failed = outcome(
        record(ENV, phase="Failed", reason="BuildFailed", message="SyntaxError"), store(), suspended_ends=True
    )
    assert failed is not None and failed.line() == "Environment/words: Failed: BuildFailed: SyntaxError"
    unbuilt = outcome(
        record(ENV, phase="Pending", reason="ImageNotBuilt", message="not in nodus.lock"), store(), suspended_ends=True
    )
    assert unbuilt is not None and not unbuilt.succeeded and "nothing builds it" in unbuilt.line()


def test_a_pending_job_is_blocked_only_by_a_dependency_that_cannot_become_ready() -> None:
    waiting = record(JOB, phase="Pending", reason="EnvironmentNotReady", message="Environment words is not Ready")
    failed_env = record(ENV, phase="Failed", reason="BuildFailed", message="SyntaxError")
    found = outcome(waiting, store(failed_env), suspended_ends=False)
    assert found is not None and found.blocked == "Environment/words is Failed (BuildFailed: SyntaxError)"
    assert found.line().startswith("TrainingJob/run: Pending: EnvironmentNotReady: Environment/words is Failed")
    unbuilt = record(ENV, phase="Pending", reason="ImageMissing", message="not in the local store")
    assert outcome(waiting, store(unbuilt), suspended_ends=False) is not None
    # An Environment that is still being made Ready (no reason that only a build clears) may yet get there.
    assert outcome(waiting, store(record(ENV, phase="Pending")), suspended_ends=False) is None
    # A model nodus will never download blocks it; a job merely not launched yet does not.
    uncached = record(JOB, phase="Pending", reason="ModelNotCached", message="hf://a/b@c is not in the cache")
    assert outcome(uncached, store(), suspended_ends=True) is not None
    assert outcome(record(JOB, phase="Pending"), store(), suspended_ends=True) is None
