"""The local executor: jobs as detached supervisor processes on this machine, each in its own job folder.

Who uses it: `nodus.reconciler.executors.choose` (the default `executor: local`); nothing outside
`nodus.reconciler.executors` imports these modules (an import-linter contract says so). Modules, from the bottom up:

    job                JobSpec (EnvironmentSpec, from the session), the job folder (JobFiles), atomic JSON,
                       locks, verified signals
    outputs            outputs.json and verified, all-or-nothing copies of outputs
    trainer_container  a runtime's image run under podman with no network
    supervisor         the long-lived process per job: the trainer's process, request files, heartbeat, and the
                       job's `JobSession` (nodus.reconciler.session: attempt API, grading, cost and cap, tally)
                       with its reports in the job folder
    executor           LocalExecutor: the Executor protocol for processes on this machine
"""

from __future__ import annotations

from .executor import LocalExecutor

__all__ = ["LocalExecutor"]
