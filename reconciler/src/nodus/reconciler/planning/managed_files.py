"""Reading the catalog's managed resources from their YAML files: the one loop managed runtimes and managed
Environments share.

Who calls it: `planning/managed.py` (the TrainingRuntimes of `runtimes/*.yaml`) and
`planning/managed_environments.py` (the Environments of `catalog/*/environment.yaml`). Each says which files and
which kind; the files hold resources of project `nodus`, and anything else in them is not managed.
"""

from __future__ import annotations

from collections.abc import Iterable
from pathlib import Path
from typing import Final

from nodus.reconciler.planning.desired import Desired, desired_from
from nodus.specs.parse import parse_resources

MANAGED_PROJECT: Final = "nodus"


def read_managed(folders: Iterable[Path], pattern: str, kind: str) -> tuple[list[tuple[Path, Desired]], list[str]]:
    """The `kind` resources of project `nodus` in the files matching `pattern` under each folder, in folder order
    and by file name, each with its file; and the problems of the files that could not be read
    (`file:line:col: ...`, one line each)."""
    found: list[tuple[Path, Desired]] = []
    problems: list[str] = []
    for folder in folders:
        for path in sorted(folder.glob(pattern)):
            result = parse_resources([path])
            if not result.ok:
                problems += [str(problem) for problem in result.errors]
                continue
            found += [
                (path, item)
                for item in desired_from(result.resources)
                if item.key.kind == kind and item.key.project == MANAGED_PROJECT
            ]
    return found, problems
