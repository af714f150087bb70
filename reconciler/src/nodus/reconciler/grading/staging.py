"""Process mode: copies of an environment's files that only the grader uid can read, made once and reused.

Who uses it: `nodus.reconciler.grading.launcher`, before it starts a process-mode grader.

Why copies: the environment's own files hold the answers, so they must belong to the grader uid with mode
0700, and completion code (another uid) must not read them; ownership cannot be changed through a bind
mount on this kernel's util-linux (no idmapped mounts), so the files are copied once per environment
version and content, into `<stage_dir>/environments/<name>@<version>-<digest>/<i>/`. The stage folder
itself is 0700 and owned by us, so no sandbox reaches a stage except through its own read-only bind mount.
Everything else a grader reads (interpreter, site folders, `nodus.env`) is bind-mounted, not copied: a
Python home is hundreds of MiB (1 GB for this host's pyenv build, 9.5 s to copy), and the whole view of
bind mounts costs about 10 ms per grader start.
"""

from __future__ import annotations

import hashlib
import os
import shutil
import stat
import tempfile
import threading
from dataclasses import dataclass
from pathlib import Path

from nodus.errors import ConfigError, TemporaryError

from .models import EnvironmentRef

SKIPPED = ("__pycache__", ".git", ".mypy_cache", ".pytest_cache", ".ruff_cache")


@dataclass(frozen=True)
class StagedEnvironment:
    """The staged folders (in the order of `EnvironmentRef.paths`) and the digest of their content."""

    dirs: tuple[Path, ...]
    digest: str


def tree_digest(folders: tuple[Path, ...]) -> str:
    """sha256 over every file's relative path, executable bit and content, folder by folder, sorted."""
    total = hashlib.sha256()
    for index, folder in enumerate(folders):
        for path in _files(folder):
            relative = path.relative_to(folder).as_posix()
            executable = "x" if os.access(path, os.X_OK) else "-"
            total.update(f"{index}\0{relative}\0{executable}\0".encode())
            total.update(_file_sha256(path).encode())
    return "sha256:" + total.hexdigest()


class Stager:
    """Stages environments under `root` for `owner_uid` (None: our own uid, when we are not root)."""

    def __init__(self, root: Path, owner_uid: int | None) -> None:
        self.root = root
        self.owner_uid = owner_uid
        self._staged: dict[tuple[object, ...], StagedEnvironment] = {}
        self._lock = threading.Lock()

    def prepare(self) -> None:
        """The stage folder (0700, ours) and the empty mount point the sandboxes build their view on."""
        for folder in (self.root, self.root / "environments"):
            folder.mkdir(parents=True, exist_ok=True)
            os.chmod(folder, 0o700)
        self.view_mount.mkdir(exist_ok=True)

    @property
    def view_mount(self) -> Path:
        return self.root / "view"

    def stage(self, env: EnvironmentRef) -> StagedEnvironment:
        """The staged copy of `env.paths`, made now if this content was never staged before."""
        with self._lock:
            known = self._staged.get(env.key)
            if known is not None:
                return known
            for folder in env.paths:
                if not folder.is_dir():
                    raise ConfigError(f"environment {env.label}: {folder} is not a folder")
            self.prepare()
            digest = tree_digest(env.paths)
            safe = "".join(c if c.isalnum() or c in "._-@" else "_" for c in env.label)
            target = self.root / "environments" / f"{safe}-{digest.removeprefix('sha256:')[:16]}"
            if not target.exists():
                self._copy(env.paths, target)
            staged = StagedEnvironment(tuple(target / str(i) for i in range(len(env.paths))), digest)
            self._staged[env.key] = staged
            return staged

    def _copy(self, folders: tuple[Path, ...], target: Path) -> None:
        # Copy into a temporary folder and rename: a half-written stage is never used.
        scratch = Path(tempfile.mkdtemp(prefix=".staging-", dir=target.parent))
        try:
            for index, folder in enumerate(folders):
                shutil.copytree(folder, scratch / str(index), ignore=shutil.ignore_patterns(*SKIPPED))
            self._restrict(scratch)
            try:
                os.rename(scratch, target)
            except OSError as exc:
                if not target.exists():  # another process staged the same content at the same time
                    raise TemporaryError(f"could not stage the environment into {target}: {exc}") from exc
        finally:
            if scratch.exists():
                shutil.rmtree(scratch, ignore_errors=True)

    def _restrict(self, top: Path) -> None:
        """Owner `owner_uid`, folders 0700, files readable (and runnable, if they were) by the owner only."""
        for folder, subfolders, files in os.walk(top):
            for name in [*subfolders, *files]:
                path = Path(folder) / name
                mode = path.lstat().st_mode
                if stat.S_ISDIR(mode):
                    os.chmod(path, 0o700)
                else:
                    os.chmod(path, 0o600 | (mode & 0o100))
                if self.owner_uid is not None:
                    os.chown(path, self.owner_uid, self.owner_uid)
        os.chmod(top, 0o700)
        if self.owner_uid is not None:
            os.chown(top, self.owner_uid, self.owner_uid)


def _files(folder: Path) -> list[Path]:
    found: list[Path] = []
    for current, subfolders, files in os.walk(folder, followlinks=True):  # copytree copies what links point to
        subfolders[:] = sorted(d for d in subfolders if d not in SKIPPED)
        found += [Path(current) / name for name in sorted(files)]
    return found


def _file_sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as handle:
        for block in iter(lambda: handle.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()
