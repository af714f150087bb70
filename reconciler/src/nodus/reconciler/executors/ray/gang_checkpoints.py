"""Where a gang's ranks write checkpoints, and which one a restarted epoch resumes from.

Who uses it: `gang_coordinator.py`, for `NODUS_CHECKPOINT_URI` (every epoch) and `NODUS_RESTORE_URI` (from the
second epoch on, when a checkpoint was committed).

The layout is the seeds' contract with nodus owning the place: `NODUS_CHECKPOINT_URI` is a folder (a `file://`
URI) every rank sees (the node jobs folder: one machine, or a filesystem the nodes share); the ranks write each
checkpoint into a folder of their own below it, and a checkpoint counts as committed, so that a restart resumes
from it, once it holds `.metadata` (what `torch.distributed.checkpoint` writes last, after every rank's shards) or
a `COMMITTED` file (for code that saves otherwise). A folder without either is a checkpoint a lost member
interrupted: it is passed over, and the previous committed one is the restore point.
"""

from __future__ import annotations

from pathlib import Path
from typing import Final

COMMIT_FILES: Final = (".metadata", "COMMITTED")


def folder(jobs_root: Path, project: str, name: str) -> Path:
    """The gang's checkpoint folder for the job `project/name` (kept across its epochs and restarts)."""
    return jobs_root / project / name / "gang" / "checkpoints"


def uri(path: Path) -> str:
    return path.absolute().as_uri()


def latest_committed(root: Path) -> Path | None:
    """The checkpoint folder below `root` committed last (by its commit file's time; name breaks ties)."""
    found: list[tuple[float, str, Path]] = []
    try:
        children = list(root.iterdir())
    except OSError:
        return None
    for child in children:
        for marker in COMMIT_FILES:
            try:
                found.append(((child / marker).stat().st_mtime, child.name, child))
                break
            except OSError:
                continue
    return max(found)[2] if found else None
