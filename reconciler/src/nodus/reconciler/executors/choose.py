"""The executor a project's jobs run on, from `executor:` in its nodus.yaml (`nodus.specs.settings`).

Who calls it: `nodus.reconciler.controllers.trainingjob.executor`, which every controller, `refresh`, the CLI
and the SDK go through. Adding an executor is one module implementing `Executor` and one entry here.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Final

from nodus.errors import ConfigError

from ..project import Project
from .local import LocalExecutor
from .protocol import Executor

Factory = Callable[[Path, bool, Project | None], Executor]
"""(the project's jobs folder, whether to record the attempt API's wire, the project whose artifacts workloads
name) -> an executor."""

EXECUTORS: Final[dict[str, Factory]] = {
    "local": lambda jobs_root, record_wire, project: LocalExecutor(jobs_root, project=project, record_wire=record_wire),
}


def choose_executor(
    name: str, jobs_root: Path, *, record_wire: bool = False, project: Project | None = None
) -> Executor:
    """The executor called `name` for a project whose local job state lives in `jobs_root` (and whose content
    store, models and Volumes the workloads it launches name: `project`)."""
    factory = EXECUTORS.get(name)
    if factory is None:
        known = ", ".join(sorted(EXECUTORS))
        raise ConfigError(f"nodus.yaml: executor: {name!r} is not an executor nodus has", hint=f"one of: {known}")
    return factory(jobs_root, record_wire, project)
