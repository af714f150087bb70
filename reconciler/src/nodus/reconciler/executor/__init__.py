"""The local executor: jobs as supervised processes on this machine (DESIGN.md section 6, "supervisor").

Who uses it: the controllers and the CLI, through `LocalExecutor`. Modules, from the bottom up:

    job          JobSpec, EnvironmentSpec, the job folder (JobFiles), atomic JSON, locks, verified signals
    attempt_api  the attempt API on a Unix socket: tasks (never answers), gradings, events
    supervisor   the long-lived process per job: trainer, attempt API, heartbeat, cost and cap
    local        LocalExecutor: launch (idempotent), status, is_alive, cancel, suspend, resume, recover
"""

from __future__ import annotations

from .job import (
    CANCELLED,
    FAILED,
    PENDING,
    PHASES,
    RUNNING,
    SUCCEEDED,
    SUSPENDED,
    TERMINAL,
    EnvironmentSpec,
    JobFiles,
    JobSpec,
)
from .local import LocalExecutor

__all__ = [
    "CANCELLED",
    "FAILED",
    "PENDING",
    "PHASES",
    "RUNNING",
    "SUCCEEDED",
    "SUSPENDED",
    "TERMINAL",
    "EnvironmentSpec",
    "JobFiles",
    "JobSpec",
    "LocalExecutor",
]
