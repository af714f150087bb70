"""The executors: where jobs run and what they report (DESIGN.md section 6, "The Executor protocol").

Who uses it: the controllers, `refresh`, the CLI and the SDK, through `Executor` (`protocol`) as `choose_executor`
gives it for a project. Nothing outside this package imports `local` (the job folder and its layout): an
import-linter contract in pyproject.toml says so. Modules, from the bottom up:

    workload     what a controller asks an executor to run (Workload): artifacts by content, no host paths
    protocol     the Executor protocol and what it returns: Observation, OutputManifest, Gradings, Capabilities
    local/       LocalExecutor and what it needs: the job folder, the supervisor, the attempt API (local/__init__)
    choose       the executor a project names in nodus.yaml (`executor: local`)
"""

from __future__ import annotations

from .choose import choose_executor, host_gpus
from .local import LocalExecutor
from .local.job import (
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
from .local.outputs import copy_verified, open_regular, refuse_links_between, write_beside
from .protocol import (
    Capabilities,
    Executor,
    Gradings,
    HostGpus,
    LogReader,
    Observation,
    OutputFile,
    OutputManifest,
    wait_for,
)
from .workload import (
    EnvironmentArtifact,
    GpuResources,
    Intervals,
    ModelArtifact,
    PackageSource,
    Resources,
    VolumeRevision,
    Workload,
    WorkloadKey,
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
    "EnvironmentArtifact",
    "EnvironmentSpec",
    "Executor",
    "GpuResources",
    "Gradings",
    "HostGpus",
    "Intervals",
    "JobSpec",
    "LocalExecutor",
    "LogReader",
    "ModelArtifact",
    "Observation",
    "OutputFile",
    "OutputManifest",
    "PackageSource",
    "Resources",
    "VolumeRevision",
    "Workload",
    "WorkloadKey",
    "choose_executor",
    "copy_verified",
    "file_sha256",
    "host_gpus",
    "locked",
    "open_regular",
    "refuse_links_between",
    "wait_for",
    "write_beside",
]
