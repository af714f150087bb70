"""What the TrainingJob and Job controllers share about a launched run: following it, deciding what becomes of
a lost one, and reading its heartbeat.

Who calls it: `trainingjob_controller` and `job_controller` (their `observe`, `finalize` and `heartbeat_at`),
so `nodus refresh`, the waits and `nodus controller` follow runs, and `nodus get`/`describe` read heartbeats,
through the registry. The bodies that talk to the local executor stay in `controllers/trainingjob.py`.

Recovery is decided here, not by the executor: a run the executor observes `lost` (its session gone while it
is recorded Pending or Running) is restarted while the resource's `spec.recovery.maxAttempts` (restarts allowed
before the run fails, 3 by default) allows, else abandoned as Failed with reason SupervisorLost.
"""

from __future__ import annotations

from nodus.reconciler.controllers.base import Context, Done, Heartbeat
from nodus.reconciler.controllers.export import exported_status
from nodus.reconciler.controllers.trainingjob import (
    KEPT,
    executor,
    job_status,
    launch_generation,
    reported_events,
    runs_current_generation,
    stop_jobs,
)
from nodus.reconciler.executors import Executor
from nodus.reconciler.project import Project
from nodus.reconciler.state.records import JSONObject, ResourceRecord
from nodus.specs.compute import Recovery
from nodus.specs.status_names import Phase, Reason

SUPERVISOR_LOST = Reason.SUPERVISOR_LOST
DEFAULT_MAX_ATTEMPTS = Recovery().max_attempts


def failed_now(before: JSONObject, after: JSONObject) -> bool:
    """Whether this pass failed the run: one whose run had already failed (the same way) before is history."""
    if after.get("phase") != Phase.FAILED:
        return False
    return (before.get("phase"), before.get("reason")) != (Phase.FAILED, after.get("reason"))


def observe_run(record: ResourceRecord, context: Context, *, export: bool) -> Done | None:
    """The run's status as its executor reports it, after deciding what becomes of a lost run (`recover`) and,
    with `export`, exporting the outputs of a run that Succeeded (`spec.exportTo`). None for a resource whose
    current generation never launched: its status stays what its controller wrote (Pending with its reason)."""
    project, store, key = context.project, context.store, record.key
    if not store.launches(key):
        return None
    jobs = executor(project)
    if not runs_current_generation(jobs, record):
        return None  # an earlier generation's run (a replacement not launched yet): its status is not this one's
    notes = recover(jobs, record)
    kept = {name: record.status[name] for name in KEPT if name in record.status}
    status = {**job_status(jobs, record), **kept}
    if export:
        status = exported_status(record, status, jobs, project=project, store=store)
    return Done(status, notes=notes, events=reported_events(jobs, record))


def max_attempts(record: ResourceRecord) -> int:
    """`spec.recovery.maxAttempts`: how many times a lost run may be restarted before it fails."""
    recovery = (record.spec.get("spec") or {}).get("recovery") or {}
    value = recovery.get("maxAttempts") if isinstance(recovery, dict) else None
    return value if isinstance(value, int) and not isinstance(value, bool) else DEFAULT_MAX_ATTEMPTS


def recover(jobs: Executor, record: ResourceRecord) -> list[str]:
    """A run whose session the executor lost: restarted (attempt + 1, from its state) while restarts are left,
    else Failed with SupervisorLost. The notes to say; none for a run that is not lost."""
    project, name = record.key.project, record.key.name
    seen = jobs.observe(project, name)
    if not seen.lost or seen.generation not in (None, launch_generation(record)):
        return []  # a replaced run not launched anew yet is stopped by the reconcile, not restarted here
    attempt = seen.attempt or 1
    allowed = max_attempts(record)
    restarts = attempt - 1
    if restarts < allowed:
        jobs.restart(project, name)
        return [f"its supervisor was lost: restarted it (attempt {attempt + 1})"]
    message = (
        f"the supervisor was lost on attempt {attempt}; spec.recovery.maxAttempts {allowed} allows no more restarts"
    )
    jobs.abandon(project, name, SUPERVISOR_LOST, message)
    return [f"its supervisor was lost: {message}"]


def stop_run(record: ResourceRecord, context: Context) -> None:
    stop_jobs(record, project=context.project, store=context.store)


def run_heartbeat(record: ResourceRecord, project: Project) -> Heartbeat | None:
    """The supervisor's last heartbeat from the executor's observation; reading it starts and writes nothing."""
    jobs = executor(project)
    if not runs_current_generation(jobs, record):
        return None  # an earlier generation's heartbeat says nothing of this one
    raw = jobs.observe(record.key.project, record.key.name).raw
    value = raw.get("heartbeatAt")
    if not isinstance(value, int | float) or value <= 0:
        return None
    return Heartbeat(float(value), str(raw.get("phase") or Phase.PENDING), raw.get("step"))
