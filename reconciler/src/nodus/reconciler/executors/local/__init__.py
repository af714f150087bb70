"""The local executor: jobs as detached supervisor processes on this machine, each in its own job folder.

Who uses it: `nodus.reconciler.executors.choose` (the default `executor: local`); nothing outside
`nodus.reconciler.executors` imports these modules (an import-linter contract says so). Modules, from the bottom up:

    job                JobSpec, EnvironmentSpec, the job folder (JobFiles), atomic JSON, locks, verified signals
    outputs            outputs.json and verified, all-or-nothing copies of outputs
    summary            the platform's tally of the gradings into a job's summary
    attempt_api        the attempt API on a Unix socket: tasks (never answers), gradings, events
    trainer_container  a runtime's image run under podman with no network
    supervisor         the long-lived process per job: trainer, attempt API, heartbeat, cost and cap
    executor           LocalExecutor: the Executor protocol for processes on this machine
"""

from __future__ import annotations

from .executor import LocalExecutor

__all__ = ["LocalExecutor"]
