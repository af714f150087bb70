"""The TrainingJob controller behind the registry: `reconcile_trainingjob` in the one controller signature.

Who calls it: `nodus.reconciler.controllers.registry` (registered for TrainingJob). The decisions (admit,
compile, launch once, follow caps and replacements) stay in `controllers/trainingjob.py`; this adapter turns
their `(status, launch key)` into a `Done`, says a graders' fall back to process mode once at the launch, and
requeues a job that waits on a dependency (an Environment not Ready, a model not cached, a Volume not Ready, another
TrainingJob's export: WaitingFor, looked at again sooner).
"""

from __future__ import annotations

from nodus.reconciler.controllers.admission import trainingjob_refusals
from nodus.reconciler.controllers.base import (
    AdmissionContext,
    Context,
    ControllerBase,
    Done,
    Heartbeat,
    Refusal,
    Requeue,
    Result,
)
from nodus.reconciler.controllers.blocking import run_blocked
from nodus.reconciler.controllers.placement import placement_refusals
from nodus.reconciler.controllers.runs import failed_now, observe_run, run_heartbeat, stop_run
from nodus.reconciler.controllers.trainingjob import reconcile_trainingjob
from nodus.reconciler.project import Project
from nodus.reconciler.state.records import JSONObject, ResourceRecord, StateStore
from nodus.specs.status_names import Phase, Reason

WAITING_REASONS = frozenset(
    {Reason.ENVIRONMENT_NOT_READY, Reason.VOLUME_NOT_READY, Reason.MODEL_NOT_CACHED, Reason.WAITING_FOR}
)
"""Pending reasons that clear when a dependency becomes ready: the job is looked at again after a while."""
REQUEUE_AFTER_S = 30.0
WAITING_FOR_AFTER_S = 2.0
"""A job waiting for another's export is looked at sooner: only the store is read, and it should launch as soon as
the export lands (the refresh of the same `apply --wait` or `nodus controller` commits it)."""


def requeue_after(reason: object) -> float:
    """Seconds until a job Pending for `reason` is reconciled again."""
    return WAITING_FOR_AFTER_S if reason == Reason.WAITING_FOR else REQUEUE_AFTER_S


class TrainingJobController(ControllerBase):
    kind = "TrainingJob"
    heartbeats = True

    def reconcile(self, record: ResourceRecord, context: Context) -> Result:
        status, launched = reconcile_trainingjob(record, project=context.project, store=context.store)
        if status.get("phase") == Phase.PENDING and status.get("reason") in WAITING_REASONS:
            return Requeue(status, requeue_after(status["reason"]), str(status["reason"]))
        notes: list[str] = []
        sandbox = status.get("sandbox") or {}
        if launched and sandbox.get("mode") == "process":  # never a silent fall back: once, at the launch
            notes.append(f"warning: {sandbox.get('message')}")
        return Done(status, launched, notes, failed=failed_now(record.status, status))

    def observe(self, record: ResourceRecord, context: Context) -> Done | None:
        return observe_run(record, context, export=True)

    def finalize(self, record: ResourceRecord, context: Context) -> None:
        stop_run(record, context)

    def heartbeat(self, record: ResourceRecord, project: Project) -> Heartbeat | None:
        return run_heartbeat(record, project)

    def admit(self, record: ResourceRecord | None, desired: JSONObject, context: AdmissionContext) -> list[Refusal]:
        return trainingjob_refusals(record, desired, context) + placement_refusals(desired, context)

    def blocked_by(self, record: ResourceRecord, store: StateStore) -> str | None:
        return run_blocked(record, store)
