"""Ray submission ids of a job's runs: deterministic from the workload key, the generation, the attempt and the run.

Who uses it: `RayExecutor` (`executor.py`), to look a run up before it submits one (Ray answers a reused id
with HTTP 500, not a conflict) and to find a job's latest run among the cluster's jobs.

    nodus_{owner}_{project}_{name}-g{generation}-a{attempt}           the first run of an attempt
    nodus_{owner}_{project}_{name}-g{generation}-a{attempt}-r{run}    its run-th resume after a suspension

`owner` is the id of the project's state that launched it (random, made once: `RayExecutor`), so two checkouts
whose projects are both `default`, or one whose `.nodus/` was deleted, never take each other's runs on one
cluster for their own. Project and job names are DNS-like (lowercase letters, digits, `-`), which Ray accepts as
they are (it puts the id in URL paths and checks nothing); `_` separates the parts because none has one, so no two
jobs share an id. Any other character (a name nodus would not validate) is replaced by `-`. The job's own key
also travels in the submission's metadata (`nodus.project`, `nodus.name`).
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Final

PREFIX: Final = "nodus"
_UNSAFE: Final = re.compile(r"[^A-Za-z0-9-]")
_TAIL: Final = re.compile(r"-g(?P<generation>[0-9]+)-a(?P<attempt>[0-9]+)(?:-r(?P<run>[0-9]+))?$")


@dataclass(frozen=True, order=True)
class RunKey:
    """Which run of a job a submission is; ordered, so the latest is the greatest."""

    generation: int
    attempt: int
    run: int = 0


def job_prefix(owner: str, project: str, name: str, prefix: str = PREFIX) -> str:
    """What every submission id of the job starts with (`prefix`: another kind of submission, a service's)."""
    return f"{prefix}_{_safe(owner)}_{_safe(project)}_{_safe(name)}"


def submission_id(owner: str, project: str, name: str, key: RunKey) -> str:
    base = f"{job_prefix(owner, project, name)}-g{key.generation}-a{key.attempt}"
    return base if key.run == 0 else f"{base}-r{key.run}"


def run_key(owner: str, project: str, name: str, identifier: str) -> RunKey | None:
    """The run a submission id names, when it is one of this job's (None for any other id)."""
    prefix = job_prefix(owner, project, name)
    if not identifier.startswith(prefix):
        return None
    found = _TAIL.fullmatch(identifier[len(prefix) :])
    if found is None:
        return None
    return RunKey(int(found["generation"]), int(found["attempt"]), int(found["run"] or 0))


def run_number(identifier: str) -> int:
    """Which run of its attempt a submission id names (0: the first; N: the N-th resume), from its tail alone."""
    found = _TAIL.search(identifier)
    return int(found["run"] or 0) if found is not None else 0


def _safe(text: str) -> str:
    return _UNSAFE.sub("-", text)
