"""The project's state folder as nodus-build uses it: the local image store, manifests, caches, scratch space.

Who calls it: the build step (`nodus.builder.build`) and the `nodus-build` CLI, which find the project from
the paths they are given; later the reconciler reads images and manifests from the same folder.

A project is the folder that holds `nodus.lock` (or, before the first build, the nearest `.git` above the
specs; else the current folder). Its state folder is `.nodus/` beside `nodus.lock` unless `NODUS_HOME` or
`--state-dir` says otherwise:

    .nodus/
      images/                  the local OCI image layout: every image and its provenance, by tag
      manifests/sha256/<hex>   task manifests (JSON lines, no answers), content-addressed
      cache/builds/<hex>.json  BuildSpec key -> what that build made (the no-op rebuild cache)
      cache/requirements/      resolved requirement sets, by the hash of what was asked
      cache/layers/<hex>.json  requirement layers, by the lock's hash (environments share them)
      work/                    scratch folders of builds in progress (removed when a build ends)
      .gitignore               `*`, written when nodus creates the folder: git ignores all of it

The folder is its owner's alone (0700, `nodus.builder.private`): it holds the state store, and images with the
answers of Environments. One an older nodus made open to others is narrowed when a command opens it.

Expensive downloads that do not belong to one project (the Debian rootfs of the base image) are cached per
user under `$XDG_CACHE_HOME/nodus` (`user_cache`).
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import shutil
import tempfile
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from nodus.builder.layers import Layer
from nodus.builder.oci import blob_path, canonical_json, init_layout, sha256_digest
from nodus.builder.private import FOLDER_MODE, make_folder, tighten, write_file
from nodus.errors import BuildError

LOCK_NAME = "nodus.lock"
STATE_NAME = ".nodus"
GITIGNORE = b"# Written by nodus: this state folder (images, state.db, job folders) stays out of git.\n*\n"


def find_project(start: Path) -> Path:
    """The project folder for `start` (a spec file or folder): the nearest folder with nodus.lock, else .git."""
    origin = start.resolve()
    folder = origin if origin.is_dir() else origin.parent
    candidates = [folder, *folder.parents]
    for marker in (LOCK_NAME, ".git"):
        for candidate in candidates:
            if (candidate / marker).exists():
                return candidate
    return Path.cwd().resolve()


def user_cache() -> Path:
    """Per-user cache for downloads shared by every project (`$XDG_CACHE_HOME/nodus`, else ~/.cache/nodus)."""
    root = os.environ.get("NODUS_CACHE_HOME") or os.path.join(
        os.environ.get("XDG_CACHE_HOME") or os.path.expanduser("~/.cache"), "nodus"
    )
    return Path(root)


@dataclass(frozen=True)
class Store:
    """One project's state folder (see the module docstring for what lives where)."""

    root: Path

    @classmethod
    def for_project(cls, project: Path, state_dir: Path | None = None) -> Store:
        chosen = state_dir or (Path(os.environ["NODUS_HOME"]) if os.environ.get("NODUS_HOME") else None)
        return cls((chosen or project / STATE_NAME).absolute())

    @property
    def images(self) -> Path:
        return self.root / "images"

    @property
    def manifests(self) -> Path:
        return self.root / "manifests" / "sha256"

    @property
    def cache(self) -> Path:
        return self.root / "cache"

    def ensure_root(self) -> None:
        """Create the state folder (0700) if it is missing; a new one gets a `.gitignore` of `*`, so git ignores
        the whole folder (images, the state database, job folders: tens of MB after one build) without the user
        editing their own `.gitignore`. An existing folder keeps its files; one open to others (an older nodus
        made it 0755) is narrowed to 0700."""
        if not make_folder(self.root):
            tighten(self.root)
            return
        ignore = self.root / ".gitignore"
        if not ignore.exists():
            write_file(ignore, GITIGNORE)

    def ensure(self) -> None:
        self.ensure_root()
        made = (self.images, self.manifests.parent, self.manifests, self.cache, self.cache / "builds")
        for folder in (*made, self.cache / "requirements", self.work):
            folder.mkdir(mode=FOLDER_MODE, exist_ok=True)
        init_layout(self.images)

    @property
    def work(self) -> Path:
        return self.root / "work"

    @contextlib.contextmanager
    def scratch(self, name: str) -> Iterator[Path]:
        """A fresh scratch folder for one build step, removed afterwards whatever happens."""
        self.ensure_root()
        self.work.mkdir(mode=FOLDER_MODE, exist_ok=True)
        folder = Path(tempfile.mkdtemp(prefix=f"{name}-", dir=self.work))
        try:
            yield folder
        finally:
            shutil.rmtree(folder, ignore_errors=True)

    # Task manifests -------------------------------------------------------------------------------------

    def put_manifest(self, data: bytes) -> str:
        """Stores a task manifest by its digest (idempotent) and returns the digest."""
        digest = sha256_digest(data)
        target = self.manifests / digest.removeprefix("sha256:")
        if not target.exists():
            write_file(target, data)
        return digest

    def manifest(self, digest: str) -> bytes:
        """A stored manifest, checked against its digest."""
        path = self.manifests / digest.removeprefix("sha256:")
        try:
            data = path.read_bytes()
        except FileNotFoundError:
            raise BuildError(f"task manifest {digest} is not in {self.manifests}") from None
        if sha256_digest(data) != digest:
            raise BuildError(f"task manifest {path} is corrupt (its bytes hash to something else)")
        return data

    # The build cache ------------------------------------------------------------------------------------

    def cached_build(self, key: str) -> dict[str, Any] | None:
        """What the build with BuildSpec `key` made, or None. A corrupt record counts as a miss."""
        path = self.cache / "builds" / f"{key.removeprefix('sha256:')}.json"
        try:
            record = json.loads(path.read_text(encoding="utf-8"))
        except (FileNotFoundError, ValueError, UnicodeDecodeError):
            return None
        return record if isinstance(record, dict) else None

    def record_build(self, key: str, record: dict[str, Any]) -> None:
        write_file(self.cache / "builds" / f"{key.removeprefix('sha256:')}.json", canonical_json(record))

    def cached_layer(self, key: str) -> Layer | None:
        """A layer made before from the same inputs (`key`), if its blob is still in the image store."""
        path = self.cache / "layers" / f"{key.removeprefix('sha256:')}.json"
        try:
            record = json.loads(path.read_text(encoding="utf-8"))
            layer = Layer(str(record["diff_id"]), str(record["digest"]), int(record["size"]))
        except (FileNotFoundError, ValueError, KeyError, TypeError, UnicodeDecodeError):
            return None
        blob = blob_path(self.images, layer.digest)
        return layer if blob.is_file() and blob.stat().st_size == layer.size else None

    def record_layer(self, key: str, layer: Layer) -> None:
        record = {"diff_id": layer.diff_id, "digest": layer.digest, "size": layer.size}
        write_file(self.cache / "layers" / f"{key.removeprefix('sha256:')}.json", canonical_json(record))


@contextlib.contextmanager
def file_lock(path: Path) -> Iterator[None]:
    """An exclusive lock on `path` (made if missing): two builds of the same thing wait for each other."""
    path.parent.mkdir(mode=FOLDER_MODE, parents=True, exist_ok=True)
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND | os.O_CLOEXEC, 0o600)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        yield
    finally:
        os.close(fd)  # closing drops the lock
