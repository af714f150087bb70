"""The logs and gradings of ended runs, kept on this host, so reads of finished work need no executor.

Who writes it: an executor whose runs live elsewhere (`ray.executor.RayExecutor.observe`, once it sees a run ended:
the trainer's text and gradings of each run, split from the Ray job's log). Who reads it: `nodus logs`, when the
project's executor cannot be made or reached (a Ray cluster down, no token), which then says so in one line: `get`,
`describe` and `logs` of finished work read stored state, never a live cluster. The local executor's job folder is
itself on this host, so it keeps nothing here. Each run is one JSON file (0600, written whole) under the job's
folder in `jobs_root`: `<project>/<name>/kept/gen<G>/a<attempt>-r<run>.json`, in run order by name.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from .local.job import read_json, write_json

FOLDER = "kept"


@dataclass(frozen=True)
class KeptRun:
    """One ended run as kept: where it ran (`where`: the executor's name for it), its trainer's text, its gradings."""

    where: str
    trainer: str
    gradings: Sequence[dict[str, Any]]


@dataclass(frozen=True)
class KeptGeneration:
    """Every kept run of one generation of a job, oldest first."""

    generation: int
    runs: Sequence[KeptRun]

    @property
    def log(self) -> str:
        return "".join(run.trainer for run in self.runs)

    @property
    def gradings(self) -> list[dict[str, Any]]:
        return [record for run in self.runs for record in run.gradings]

    @property
    def where(self) -> str:
        return "the kept logs of " + ", ".join(run.where for run in self.runs)


def _folder(jobs_root: Path, project: str, name: str) -> Path:
    return jobs_root / project / name / FOLDER


def keep(jobs_root: Path, project: str, name: str, key: tuple[int, int, int], run: KeptRun) -> None:
    """Keep an ended run (`key`: its generation, attempt and run), once: an ended run's log no longer changes."""
    generation, attempt, number = key
    path = _folder(jobs_root, project, name) / f"gen{generation}" / f"a{attempt:06d}-r{number:06d}.json"
    if path.is_file():
        return
    write_json(path, {"where": run.where, "trainer": run.trainer, "gradings": list(run.gradings)})


def kept(jobs_root: Path, project: str, name: str, generation: int | None = None) -> KeptGeneration | None:
    """The kept runs of `generation` (the latest kept one when None), or None when nothing of it was kept."""
    folder = _folder(jobs_root, project, name)
    numbers = sorted(int(path.name[3:]) for path in folder.glob("gen*") if path.name[3:].isdigit())
    if generation is None and numbers:
        generation = numbers[-1]
    if generation is None or generation not in numbers:
        return None
    runs = []
    for path in sorted((folder / f"gen{generation}").glob("a*-r*.json")):
        document = read_json(path) or {}
        gradings = [record for record in document.get("gradings") or [] if isinstance(record, dict)]
        runs.append(KeptRun(str(document.get("where", path.stem)), str(document.get("trainer", "")), gradings))
    return KeptGeneration(generation, runs) if runs else None
