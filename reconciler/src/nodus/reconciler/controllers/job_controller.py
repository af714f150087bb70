"""The Job controller behind the registry: `reconcile_job` in the one controller signature.

Who calls it: `nodus.reconciler.controllers.registry` (registered for Job). The launch stays in
`controllers/job.py`; a Job is followed, stopped and read like a TrainingJob's run, without an export.
"""

from __future__ import annotations

from nodus.reconciler.controllers.base import AdmissionContext, Context, ControllerBase, Done, Heartbeat, Refusal
from nodus.reconciler.controllers.blocking import run_blocked
from nodus.reconciler.controllers.job import reconcile_job
from nodus.reconciler.controllers.placement import placement_refusals, plain_job_estimate
from nodus.reconciler.controllers.runs import failed_now, observe_run, run_heartbeat, stop_run
from nodus.reconciler.project import Project
from nodus.reconciler.state.records import JSONObject, ResourceRecord, StateStore


class JobController(ControllerBase):
    kind = "Job"
    heartbeats = True

    def reconcile(self, record: ResourceRecord, context: Context) -> Done:
        status, launched = reconcile_job(record, project=context.project, store=context.store)
        return Done(status, launched, failed=failed_now(record.status, status))

    def observe(self, record: ResourceRecord, context: Context) -> Done | None:
        return observe_run(record, context, export=False)

    def finalize(self, record: ResourceRecord, context: Context) -> None:
        stop_run(record, context)  # a Job's folder is found the way a TrainingJob's is

    def heartbeat(self, record: ResourceRecord, project: Project) -> Heartbeat | None:
        return run_heartbeat(record, project)

    def blocked_by(self, record: ResourceRecord, store: StateStore) -> str | None:
        return run_blocked(record, store)

    def admit(self, record: ResourceRecord | None, desired: JSONObject, context: AdmissionContext) -> list[Refusal]:
        """A Job's GPUs and cap against where and at what price it would launch, as a TrainingJob's are."""
        return placement_refusals(desired, context, plain_job_estimate)
