"""Refreshing observed state: copy what running jobs report into their TrainingJob records.

Who calls it: `nodus get`, `describe`, `wait`, `plan` and `apply --wait`, before they read status. A job
whose supervisor is gone is noticed here (`LocalExecutor.recover`): it resumes from its state folder while
attempts are left, else it fails with reason SupervisorLost. A TrainingJob that Succeeded with `spec.exportTo`
has its outputs exported here (`nodus.reconciler.controllers.export`).
"""

from __future__ import annotations

from nodus.reconciler.controllers.export import exported_status
from nodus.reconciler.controllers.status import write_status
from nodus.reconciler.project import Project
from nodus.reconciler.state.records import StateStore


def refresh(project: Project, store: StateStore) -> int:
    """Update the status of every launched TrainingJob from the local executor; returns how many changed."""
    if not project.jobs.is_dir():
        return 0
    from nodus.reconciler.controllers.trainingjob import KEPT, executor, job_status, keys_with_jobs, reported_events

    jobs = executor(project)
    changed = 0
    for key in keys_with_jobs(store):
        record = store.get(key)
        if record is None or not jobs.exists(key.project, key.name):
            continue
        if record.status.get("phase") in ("Running", "Pending") and not jobs.is_alive(key.project, key.name):
            jobs.recover(key.project, key.name)
        kept = {name: record.status[name] for name in KEPT if name in record.status}
        status = {**job_status(jobs, record), **kept}
        if key.kind == "TrainingJob":
            status = exported_status(record, status, jobs, project=project, store=store)
        if write_status(store, record, status, reported_events(jobs, record)):
            changed += 1
    return changed
