"""The Job controller: a command run once under the local executor's supervisor, with its cap and logs; in
`spec.image` under podman when the Job names one (`nodus.reconciler.executors.local.trainer_container`).

Who calls it: `nodus apply` (jobs wave) and `nodus.reconciler.refresh`. A Job is what a TrainingJob compiles
into; one written directly runs its `spec.command` with `spec.env`, no Environment and no attempt API tasks.
Its folder is `jobs/<project>/<name>`, the one a TrainingJob of the same name would use, so a Job and a
TrainingJob in one project cannot share a name (the TrainingJob owns the Job of its name).
"""

from __future__ import annotations

from nodus.reconciler.controllers.trainingjob import (
    executor,
    gang_refusal,
    intervals,
    job_status,
    launch_generation,
    launch_key,
    price_in_force,
    resources_of,
    unschedulable_refusal,
)
from nodus.reconciler.executors.workload import Workload, WorkloadKey
from nodus.reconciler.project import Project
from nodus.reconciler.state.records import JSONObject, Launch, ResourceKey, ResourceRecord, StateStore
from nodus.specs.status_names import Phase, Reason


def reconcile_job(record: ResourceRecord, *, project: Project, store: StateStore) -> tuple[JSONObject, str | None]:
    """The Job's status after this pass, and the launch key if this pass launched it."""
    clash = store.get(ResourceKey("TrainingJob", record.key.project, record.key.name))
    if clash is not None:
        message = f"TrainingJob/{record.key.name} owns the Job of that name in project {record.key.project}"
        return {"phase": Phase.FAILED, "reason": Reason.NAME_TAKEN, "message": message}, None
    spec = record.spec["spec"]
    jobs = executor(project)
    # The host's price when the run launched (the price table's cpu.local or $NODUS_LOCAL_PRICE_PER_HOUR), kept
    # for its generation as a TrainingJob's is: a later change of the table never re-prices it.
    price = price_in_force(record, project, jobs)
    job = Workload(
        key=WorkloadKey(project=record.key.project, name=record.key.name, kind="Job"),
        generation=launch_generation(record),
        command=tuple(str(part) for part in spec["command"]),  # as written: a Job's command is run as it is
        image=spec.get("image"),
        env=dict(spec.get("env") or {}),
        resources=resources_of(spec),
        price_per_hour_usd=str(price.per_hour_usd),
        max_cost_usd=spec.get("maxCostUSD"),
        intervals=intervals(),
    )
    refused = gang_refusal(job.resources, jobs, "spec.distributed.nodes") or unschedulable_refusal(job.resources, jobs)
    if refused is not None:
        return refused, None
    if spec.get("state") == "Suspended":
        if jobs.exists(record.key.project, record.key.name):
            jobs.suspend(record.key.project, record.key.name)
            return job_status(jobs, record), None
        return {
            "phase": Phase.SUSPENDED,
            "reason": Reason.SUSPEND_REQUESTED,
            "message": "spec.state is Suspended",
        }, None
    _, new = store.record_launch(Launch(launch_key(record), record.key, job=record.key.name))
    jobs.launch(job)
    status = {**job_status(jobs, record), "launchGeneration": launch_generation(record), "price": price.to_status()}
    return status, (launch_key(record) if new else None)
