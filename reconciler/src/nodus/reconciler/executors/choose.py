"""The executor a project's jobs run on, from `executor:` in its nodus.yaml (`nodus.specs.settings`).

Who calls it: `nodus.reconciler.controllers.trainingjob.executor`, which every controller, `refresh`, the CLI
and the SDK go through. Adding an executor is one module implementing `Executor` and one entry here.

`bound(jobs_root, executor)` is the seam for tests (and anything embedding nodus): while it is entered, every
choice for the project whose jobs live in `jobs_root` is that executor, whatever nodus.yaml names, so the
controllers' decisions run on a `nodus.testing.fake_executor.FakeExecutor` through the same apply path the CLI
takes. Nothing is bound outside such a block.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Final

from nodus.errors import ConfigError

from ..project import Project
from .local import LocalExecutor
from .local.gpus import host_gpus as this_machines_gpus
from .protocol import Executor, HostGpus
from .ray.settings import ray_executor

Factory = Callable[[Path, bool, Project | None], Executor]
"""(the project's jobs folder, whether to record the attempt API's wire, the project whose artifacts workloads
name) -> an executor."""


def _ray(jobs_root: Path, record_wire: bool, project: Project | None) -> Executor:
    """The Ray executor of the project's `executor: {ray: {...}}` (Ray itself is imported on use: an extra)."""
    return ray_executor(jobs_root, project)


EXECUTORS: Final[dict[str, Factory]] = {
    "local": lambda jobs_root, record_wire, project: LocalExecutor(jobs_root, project=project, record_wire=record_wire),
    "ray": _ray,
}

ON_THIS_HOST: Final[dict[str, Callable[[], HostGpus]]] = {"local": this_machines_gpus}
"""The executors that place every job on this one machine, and how its GPUs are read (`host_gpus`); the others
place on a cluster whose nodes come and go, and decide at launch (Ray: Pending, Unschedulable)."""

_BOUND: dict[Path, Executor] = {}
"""Executors bound to a project's jobs folder by `bound`, by resolved path."""


@contextmanager
def bound(jobs_root: Path, executor: Executor) -> Iterator[Executor]:
    """`executor` for the project whose jobs live in `jobs_root`, for the `with` block (not nested per folder)."""
    key = jobs_root.resolve()
    if key in _BOUND:
        raise ValueError(f"an executor is bound to {jobs_root} already")
    _BOUND[key] = executor
    try:
        yield executor
    finally:
        del _BOUND[key]


def choose_executor(
    name: str, jobs_root: Path, *, record_wire: bool = False, project: Project | None = None
) -> Executor:
    """The executor called `name` for a project whose local job state lives in `jobs_root` (and whose content
    store, models and Volumes the workloads it launches name: `project`); the one `bound` to that folder while a
    `bound` block is entered."""
    found = _BOUND.get(jobs_root.resolve()) if _BOUND else None
    if found is not None:
        return found
    factory = EXECUTORS.get(name)
    if factory is None:
        known = ", ".join(sorted(EXECUTORS))
        raise ConfigError(f"nodus.yaml: executor: {name!r} is not an executor nodus has", hint=f"one of: {known}")
    return factory(jobs_root, record_wire, project)


def host_gpus(name: str, jobs_root: Path) -> HostGpus | None:
    """The GPUs of the one host the executor called `name` places the project's jobs on, for admission (a GPU
    request it cannot meet is refused before anything is written), without making the executor (a cluster's needs
    its token and address, which a plan does not); None for an executor that places on a cluster at launch. The
    executor `bound` to `jobs_root` says it through its capabilities."""
    found = _BOUND.get(jobs_root.resolve()) if _BOUND else None
    if found is not None:
        return found.capabilities.host_gpus
    read = ON_THIS_HOST.get(name)
    return read() if read is not None else None
