"""What a path package is: the one file set both nodus-build and process-mode grading take from a folder.

Who calls it: `nodus.builder.plan` (the source digest), `nodus.builder.build` (the image's package layer) and
`nodus.reconciler.grading.staging` (the copy a process-mode grader reads), so a grader outside a container sees
exactly the files the image would hold. Standard library only: grading imports it without the builder's models.

A package folder is often a project folder too (the quickstart's `path: .`), so what nodus itself keeps there
is never part of a package:
- `.nodus/` (the state folder: the state database, image store, every job folder and its sockets),
  `nodus.lock` (it records the image digest, so the image cannot contain it) and `nodus.yaml` (the project's
  settings, `nodus.specs.settings`: how a host runs the project, not what the package is);
- the YAML files holding nodus resources (the Environment's own spec, a TrainingJob beside it, a saved dry run)
  and a dry run saved as JSON: their fields change in place or belong to other resources, and must not change
  the image;
- version control, caches, virtual environments and the package's own tests;
- what git ignores: the patterns of the `.gitignore` files in the folder, its subfolders and the folders above it
  up to the repository's root (the nearest one holding `.git`), read here (`GitIgnore`), never through `git`
  itself, whose global excludes differ from one user to the next: logs, outputs copied out with `nodus cp` and
  saved dry runs that a project ignores neither change the digest nor go into the image;
- anything that is not a regular file, a folder or a symbolic link (sockets, FIFOs, devices): they have no
  content to copy, and reading a FIFO blocks.
"""

from __future__ import annotations

import os
import re
import stat
from collections.abc import Sequence
from dataclasses import dataclass
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
_DRY_RUN = re.compile(r"""["']?nodus\.dev/dry-run["']?\s*:""")
"""`nodus.specs.parse.DRY_RUN_ANNOTATION` as a key (not imported: this module stays standard library only)."""
_RESOURCE_SNIFF_BYTES = 1 << 20


def package_files(folder: Path, *, skip: Sequence[str] = ()) -> list[str]:
    """The package's files, as sorted POSIX paths relative to `folder` (symbolic links included, not followed).

    `skip` names further relative paths to leave out.
    """
    if not folder.is_dir():
        raise BuildError(f"package folder {folder} does not exist or is not a folder")
    skipped = set(skip)
    found: list[str] = []
    ignore = GitIgnore.above(folder)
    for current, dirs, files in os.walk(folder):
        here = Path(current)
        base = here.relative_to(folder)
        ignore.read(here)
        # Pruned in place so os.walk never descends into skipped folders (a .venv or .nodus can be large).
        dirs[:] = [d for d in dirs if d not in SKIPPED_DIRS and not ignore.ignored(here / d, directory=True)]
        for item in [*files, *(d for d in dirs if (here / d).is_symlink())]:
            rel = (base / item).as_posix()
            if rel in skipped or item in SKIPPED_FILES or item.endswith(SKIPPED_SUFFIXES):
                continue
            if not ignore.ignored(here / item, directory=False) and _kept(here / item):
                found.append(rel)
    return sorted(found)


@dataclass(frozen=True)
class _Pattern:
    base: Path
    """The folder of the .gitignore the pattern is from: paths are matched relative to it."""
    regex: re.Pattern[str]
    anchored: bool
    """With a slash before its end, it matches the path from `base`; without, the name at any depth."""
    directory: bool
    negated: bool


class GitIgnore:
    """The patterns of the .gitignore files met so far, the last that matches a path deciding, as git does."""

    def __init__(self) -> None:
        self.patterns: list[_Pattern] = []
        self._read: set[Path] = set()

    @classmethod
    def above(cls, folder: Path) -> GitIgnore:
        """The .gitignore files of the folders above `folder` up to its repository's root (none outside one)."""
        ignore = cls()
        folder = folder.absolute()
        chain = [folder, *folder.parents]
        root = next((index for index, path in enumerate(chain) if (path / ".git").exists()), None)
        for parent in reversed(chain[1 : root + 1] if root is not None else []):
            ignore.read(parent)
        return ignore

    def read(self, folder: Path) -> None:
        """Add `folder`'s own .gitignore (read once; a link is not followed, nor is a missing file an error)."""
        folder = folder.absolute()
        if folder in self._read:
            return
        self._read.add(folder)
        path = folder / ".gitignore"
        try:
            if path.is_symlink() or not path.is_file():
                return
            text = path.read_text(encoding="utf-8", errors="replace")
        except OSError:
            return
        for raw in text.splitlines():
            pattern = _pattern(folder, raw)
            if pattern is not None:
                self.patterns.append(pattern)

    def ignored(self, path: Path, *, directory: bool) -> bool:
        path = path.absolute()
        verdict = False
        for pattern in self.patterns:
            if pattern.directory and not directory:
                continue
            try:
                rel = path.relative_to(pattern.base).as_posix()
            except ValueError:
                continue
            if pattern.regex.fullmatch(rel if pattern.anchored else path.name):
                verdict = not pattern.negated
        return verdict


def _pattern(base: Path, raw: str) -> _Pattern | None:
    line = raw.rstrip()
    if not line or line.startswith("#"):
        return None
    negated = line.startswith("!")
    line = line[1:] if negated else line.removeprefix("\\")
    directory = line.endswith("/")
    line = line.rstrip("/")
    if not line:
        return None
    anchored = "/" in line
    return _Pattern(base, re.compile(_glob(line.lstrip("/"))), anchored, directory, negated)


def _glob(pattern: str) -> str:
    """A .gitignore glob as a regular expression: `**` spans folders, `*` and `?` stay within one."""
    out, index = [], 0
    while index < len(pattern):
        if pattern.startswith("**/", index):
            out.append("(?:.*/)?")
            index += 3
        elif pattern.startswith("/**", index) and index + 3 == len(pattern):
            out.append("/.*")
            index += 3
        elif pattern.startswith("**", index):
            out.append(".*")
            index += 2
        elif pattern[index] == "*":
            out.append("[^/]*")
            index += 1
        elif pattern[index] == "?":
            out.append("[^/]")
            index += 1
        elif pattern[index] == "[" and "]" in pattern[index + 1 :]:
            end = pattern.index("]", index + 1)
            body = pattern[index + 1 : end]
            out.append("[" + ("^" + body[1:] if body.startswith("!") else body).replace("\\", "\\\\") + "]")
            index = end + 1
        else:
            out.append(re.escape(pattern[index]))
            index += 1
    return "".join(out)


def is_resource_file(path: Path) -> bool:
    """A YAML file that declares a nodus resource (`apiVersion: nodus.dev/...` in any document), or a JSON file
    that holds a dry run's output (`nodus apply --dry-run -o json > dry.json`: marked `nodus.dev/dry-run`)."""
    if not path.name.endswith((*YAML_SUFFIXES, ".json")):
        return False
    try:
        with path.open("rb") as handle:
            head = handle.read(_RESOURCE_SNIFF_BYTES).decode("utf-8", "replace")
    except OSError:
        return False
    if path.name.endswith(".json"):
        return _NODUS_RESOURCE.search(head) is not None and _DRY_RUN.search(head) is not None
    return _NODUS_RESOURCE.search(head) is not None


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
