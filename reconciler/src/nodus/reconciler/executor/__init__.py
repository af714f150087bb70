"""The executors: where jobs run and what they report (DESIGN.md section 6, "The Executor protocol").

Who uses it: the controllers, `refresh`, the CLI and the SDK, through `Executor` (`protocol`) as `choose_executor`
gives it for a project. Nothing outside this package imports `job` or `outputs` (the job folder's layout): an
import-linter contract in pyproject.toml says so. Modules, from the bottom up:

    job          JobSpec, EnvironmentSpec, the job folder (JobFiles), atomic JSON, locks, verified signals
    protocol     the Executor protocol and what it returns: Observation, OutputManifest, Gradings, Capabilities
    outputs      outputs.json and verified, all-or-nothing copies of outputs
    attempt_api  the attempt API on a Unix socket: tasks (never answers), gradings, events
    supervisor   the long-lived process per job: trainer, attempt API, heartbeat, cost and cap
    local        LocalExecutor: the protocol for processes on this machine
    choose       the executor a project names in nodus.yaml (`executor: local`)
"""

from __future__ import annotations

from .choose import choose_executor
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
    JobSpec,
    file_sha256,
    locked,
)
from .local import LocalExecutor
from .protocol import (
    Capabilities,
    Executor,
    Gradings,
    LogReader,
    Observation,
    OutputFile,
    OutputManifest,
    wait_for,
)

__all__ = [
    "CANCELLED",
    "FAILED",
    "PENDING",
    "PHASES",
    "RUNNING",
    "SUCCEEDED",
    "SUSPENDED",
    "TERMINAL",
    "Capabilities",
    "EnvironmentSpec",
    "Executor",
    "Gradings",
    "JobSpec",
    "LocalExecutor",
    "LogReader",
    "Observation",
    "OutputFile",
    "OutputManifest",
    "choose_executor",
    "file_sha256",
    "locked",
    "wait_for",
]
