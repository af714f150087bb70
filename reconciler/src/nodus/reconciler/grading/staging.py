"""Process mode: copies of an environment's files that only the grader uid can read, made once and reused.

Who uses it: `nodus.reconciler.grading.launcher`, before it starts a process-mode grader.

Why copies: the environment's own files hold the answers, so they must belong to the grader uid with mode
0700, and completion code (another uid) must not read them; ownership cannot be changed through a bind
mount on this kernel's util-linux (no idmapped mounts), so the files are copied once per environment
version and content, into `<stage_dir>/environments/<name>@<version>-<digest>/<i>/`. The stage folder
itself is 0700 and owned by us, so no sandbox reaches a stage except through its own read-only bind mount.
What is copied is exactly the file set nodus-build packages into the image (`nodus.builder.package_files`):
never the project's `.nodus/` (state database, job folders, sockets), `.git/`, caches, sockets or FIFOs.
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

from nodus.builder.package_files import package_files
from nodus.errors import ConfigError, TemporaryError

from .models import EnvironmentRef


@dataclass(frozen=True)
class StagedEnvironment:
    """The staged folders (in the order of `EnvironmentRef.paths`) and the digest of their content."""

    dirs: tuple[Path, ...]
    digest: str


def tree_digest(folders: tuple[Path, ...]) -> str:
    """sha256 over every package file's relative path, kind (executable bit, or a link's target) and content,
    folder by folder, sorted."""
    total = hashlib.sha256()
    for index, folder in enumerate(folders):
        for relative in package_files(folder):
            path = folder / relative
            if path.is_symlink():
                kind, content = "link", hashlib.sha256(os.readlink(path).encode()).hexdigest()
            else:
                kind, content = ("x" if os.access(path, os.X_OK) else "-"), _file_sha256(path)
            total.update(f"{index}\0{relative}\0{kind}\0".encode())
            total.update(content.encode())
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
                _copy_package(folder, scratch / str(index))
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
                elif not stat.S_ISLNK(mode):  # a link's own mode means nothing, and chmod would follow it
                    os.chmod(path, 0o600 | (mode & 0o100))
                if self.owner_uid is not None:
                    os.chown(path, self.owner_uid, self.owner_uid, follow_symlinks=False)
        os.chmod(top, 0o700)
        if self.owner_uid is not None:
            os.chown(top, self.owner_uid, self.owner_uid)


def _copy_package(folder: Path, target: Path) -> None:
    """The package's files (links as links, as the image holds them) under `target`."""
    target.mkdir()
    for relative in package_files(folder):
        source, copy = folder / relative, target / relative
        copy.parent.mkdir(parents=True, exist_ok=True)
        if source.is_symlink():
            copy.symlink_to(os.readlink(source))
        else:
            shutil.copy2(source, copy)


def _file_sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as handle:
        for block in iter(lambda: handle.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()
