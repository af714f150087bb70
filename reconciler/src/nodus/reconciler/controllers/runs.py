"""What the TrainingJob and Job controllers share about a launched run: following it, and reading its heartbeat.

Who calls it: `trainingjob_controller` and `job_controller` (their `observe`, `finalize` and `heartbeat_at`),
so `nodus refresh`, the waits and `nodus controller` follow runs, and `nodus get`/`describe` read heartbeats,
through the registry. The bodies that talk to the local executor stay in `controllers/trainingjob.py`.
"""

from __future__ import annotations

from nodus.reconciler.controllers.base import Context, Done, Heartbeat
from nodus.reconciler.controllers.export import exported_status
from nodus.reconciler.controllers.trainingjob import KEPT, executor, job_status, reported_events, stop_jobs
from nodus.reconciler.project import Project
from nodus.reconciler.state.records import JSONObject, ResourceRecord

LIVE_PHASES = ("Running", "Pending")
"""Phases in which a run's supervisor should be alive: one that is not has been lost and is recovered."""


def failed_now(before: JSONObject, after: JSONObject) -> bool:
    """Whether this pass failed the run: one whose run had already failed (the same way) before is history."""
    if after.get("phase") != "Failed":
        return False
    return (before.get("phase"), before.get("reason")) != ("Failed", after.get("reason"))


def observe_run(record: ResourceRecord, context: Context, *, export: bool) -> Done | None:
    """The run's status as its executor reports it, after recovering a lost supervisor (`LocalExecutor.recover`:
    resumed while attempts are left, else Failed/SupervisorLost) and, with `export`, exporting the outputs of a
    run that Succeeded (`spec.exportTo`). None for a resource never launched."""
    project, store, key = context.project, context.store, record.key
    if not project.jobs.is_dir() or not store.launches(key):
        return None
    jobs = executor(project)
    if not jobs.exists(key.project, key.name):
        return None
    notes: list[str] = []
    if record.status.get("phase") in LIVE_PHASES and not jobs.is_alive(key.project, key.name):
        # A run that ended since the last look has no supervisor either: recover leaves it as it is.
        lost = jobs.observe(key.project, key.name).phase in LIVE_PHASES
        phase = jobs.recover(key.project, key.name)
        if lost:
            attempt = jobs.observe(key.project, key.name).attempt
            done = f"restarted it (attempt {attempt})" if phase in LIVE_PHASES else f"it is {phase} now"
            notes.append(f"its supervisor was lost: {done}")
    kept = {name: record.status[name] for name in KEPT if name in record.status}
    status = {**job_status(jobs, record), **kept}
    if export:
        status = exported_status(record, status, jobs, project=project, store=store)
    return Done(status, notes=notes, events=reported_events(jobs, record))


def stop_run(record: ResourceRecord, context: Context) -> None:
    stop_jobs(record, project=context.project, store=context.store)


def run_heartbeat(record: ResourceRecord, project: Project) -> Heartbeat | None:
    """The supervisor's last heartbeat from the executor's observation; reading it starts and writes nothing."""
    if not project.jobs.is_dir():
        return None
    jobs = executor(project)
    if not jobs.exists(record.key.project, record.key.name):
        return None
    raw = jobs.observe(record.key.project, record.key.name).raw
    value = raw.get("heartbeatAt")
    if not isinstance(value, int | float) or value <= 0:
        return None
    return Heartbeat(float(value), str(raw.get("phase") or "Pending"), raw.get("step"))
