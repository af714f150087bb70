"""What a path package is: the one file set both nodus-build and process-mode grading take from a folder.

Who calls it: `nodus.builder.plan` (the source digest), `nodus.builder.build` (the image's package layer) and
`nodus.reconciler.grading.staging` (the copy a process-mode grader reads), so a grader outside a container sees
exactly the files the image would hold. Standard library only: grading imports it without the builder's models.

A package folder is often a project folder too (the quickstart's `path: .`), so what nodus itself keeps there
is never part of a package:
- `.nodus/` (the state folder: the state database, image store, every job folder and its sockets),
  `nodus.lock` (it records the image digest, so the image cannot contain it) and `nodus.yaml` (the project's
  settings, `nodus.specs.settings`: how a host runs the project, not what the package is);
- the YAML files holding nodus resources (the Environment's own spec, a TrainingJob beside it): their fields
  change in place or belong to other resources, and must not change the image;
- version control, caches, virtual environments and the package's own tests;
- anything that is not a regular file, a folder or a symbolic link (sockets, FIFOs, devices): they have no
  content to copy, and reading a FIFO blocks.
"""

from __future__ import annotations

import os
import re
import stat
from collections.abc import Sequence
from pathlib import Path

from nodus.errors import BuildError

STATE_FOLDER = ".nodus"
LOCK_FILE = "nodus.lock"
SETTINGS_FILE = "nodus.yaml"
"""`nodus.specs.settings.SETTINGS_FILE` (not imported: this module stays standard library only)."""
SKIPPED_DIRS = frozenset(
    {
        STATE_FOLDER,
        "__pycache__",
        ".git",
        ".hg",
        ".svn",
        ".venv",
        ".tox",
        ".nox",
        ".mypy_cache",
        ".pytest_cache",
        ".ruff_cache",
        ".hypothesis",
        ".import_linter_cache",
        "tests",
    }
)
SKIPPED_FILES = frozenset({LOCK_FILE, SETTINGS_FILE})
SKIPPED_SUFFIXES = (".pyc",)
YAML_SUFFIXES = (".yaml", ".yml")
_NODUS_RESOURCE = re.compile(r"""apiVersion["']?\s*:\s*["']?nodus\.dev/""")
_RESOURCE_SNIFF_BYTES = 1 << 20


def package_files(folder: Path, *, skip: Sequence[str] = ()) -> list[str]:
    """The package's files, as sorted POSIX paths relative to `folder` (symbolic links included, not followed).

    `skip` names further relative paths to leave out.
    """
    if not folder.is_dir():
        raise BuildError(f"package folder {folder} does not exist or is not a folder")
    skipped = set(skip)
    found: list[str] = []
    for current, dirs, files in os.walk(folder):
        # Pruned in place so os.walk never descends into skipped folders (a .venv or .nodus can be large).
        dirs[:] = [d for d in dirs if d not in SKIPPED_DIRS]
        here = Path(current)
        base = here.relative_to(folder)
        for item in [*files, *(d for d in dirs if (here / d).is_symlink())]:
            rel = (base / item).as_posix()
            if rel in skipped or item in SKIPPED_FILES or item.endswith(SKIPPED_SUFFIXES):
                continue
            if _kept(here / item):
                found.append(rel)
    return sorted(found)


def is_resource_file(path: Path) -> bool:
    """A YAML file that declares a nodus resource (`apiVersion: nodus.dev/...` in any document)."""
    if not path.name.endswith(YAML_SUFFIXES):
        return False
    try:
        with path.open("rb") as handle:
            head = handle.read(_RESOURCE_SNIFF_BYTES)
    except OSError:
        return False
    return _NODUS_RESOURCE.search(head.decode("utf-8", "replace")) is not None


def _kept(path: Path) -> bool:
    try:
        mode = path.lstat().st_mode
    except FileNotFoundError:  # removed while we walked
        return False
    if stat.S_ISLNK(mode):
        return True
    if not stat.S_ISREG(mode):
        return False  # a socket, FIFO or device
    return not is_resource_file(path)
