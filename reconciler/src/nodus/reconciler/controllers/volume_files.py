"""Files in and out of a Volume: an upload commits a new revision, a download is checked against its sha256.

Who calls it: `nodus cp LOCAL vol/NAME:PATH` (`local_files`, `upload`) and `nodus cp vol/NAME:PATH LOCAL`
(`download`), through `nodus.cli.jobs`. Exports of a run's outputs are `controllers/export.py`'s, under the same lock.

An upload is the seeds' "uploads and commits a new revision with a sha256 per file": revision N+1 holds every file
of revision N and the uploaded ones (a file at the same path replaced), read-only, with its manifest, made whole
before the Volume's status names it (`commit_tree`). The Volume is Ready at that revision; a TrainingJob fixes its
data to the revision it launched with, so later uploads never change a run that was admitted. A ReadOnlyMany Volume
(a model imported from a pinned revision) takes no uploads; `spec.size` bounds a revision.

No link is ever followed, either way. An upload refuses a symbolic link anywhere in what it is given (the file or
folder named, or anything under the folder), and anything that is not a regular file or a folder, in one line
naming it, before anything is written; each file is opened without following a link and must still be the file
that was checked. A revision holds regular files only: a link found in the one an upload builds on refuses the
upload. A download never reads a link out of the Volume (nor through a folder of it that is one) and never
writes through one in the destination (`copy_verified`, as for a job's outputs). A Volume path is relative: a
leading `/` is refused like `..`, never re-rooted. A refused upload leaves no revision, not even a partial one.
"""

from __future__ import annotations

import errno
import json
import os
import shutil
import stat
from collections.abc import Sequence
from pathlib import Path, PurePosixPath
from typing import Any

from nodus.errors import ConfigError
from nodus.reconciler.controllers.volume import commit_tree, make_writable, size_bytes, volume_path
from nodus.reconciler.executors import (
    copy_verified,
    file_sha256,
    locked,
    open_regular,
    refuse_links_between,
    write_beside,
)
from nodus.reconciler.model_cache import MANIFEST
from nodus.reconciler.project import Project
from nodus.reconciler.state.records import JSONObject, ResourceKey, ResourceRecord, StateStore
from nodus.specs.status_names import Phase


def volume_lock(project: Project, key: ResourceKey) -> Path:
    """The lock every new revision of the Volume is made under (uploads and exports)."""
    return project.files.root / "volumes" / key.project / f".{key.name}.lock"


def inside_volume(relative: str, label: str) -> str:
    """A path in a Volume: relative (a leading `/` is refused like `..`, never re-rooted), no `..`, not the
    manifest. A trailing `/` (a folder) is dropped."""
    path = PurePosixPath(relative.rstrip("/"))
    if relative.startswith("/") or not path.parts or ".." in path.parts or path.as_posix() == MANIFEST:
        why = "is absolute: a path inside the Volume starts at its top" if relative.startswith("/") else ""
        raise ConfigError(
            f"{label}: {relative!r} {why or 'is not a path inside the Volume'}",
            hint="write paths from the Volume's top (vol/NAME:dir/file); vol/NAME: alone is the top itself",
        )
    return path.as_posix()


LINK_HINT = "nodus cp never follows a link: copy what it points to in its place, or leave it out"


def _refused(path: Path, mode: int) -> ConfigError | None:
    """Why `path` (of `lstat` mode `mode`) cannot be uploaded, or None for a regular file or a folder."""
    if stat.S_ISLNK(mode):
        return ConfigError(f"{path} is a symbolic link: nothing was uploaded", hint=LINK_HINT)
    if not (stat.S_ISREG(mode) or stat.S_ISDIR(mode)):
        return ConfigError(f"{path} is not a regular file or a folder: nothing was uploaded")
    return None


def local_files(local: Path, base: str, label: str) -> list[tuple[Path, str]]:
    """Every file under the folder `local` with its path in the Volume under `base` (`""`: its top), in order.
    A symbolic link anywhere (the folder itself included: `lstat`, never followed) or a special file is refused
    in one line naming it, before anything is uploaded."""
    refusal = _refused(local, local.lstat().st_mode)
    if refusal is not None:
        raise refusal
    pairs: list[tuple[Path, str]] = []

    def failed(error: OSError) -> None:
        raise ConfigError(f"cannot read {error.filename}: {error.strerror}: nothing was uploaded")

    for current, dirs, names in os.walk(local, onerror=failed):  # followlinks=False: a link is never entered
        here = Path(current)
        dirs.sort()
        for name in [*dirs, *sorted(names)]:
            path = here / name
            mode = path.lstat().st_mode
            refusal = _refused(path, mode)
            if refusal is not None:
                raise refusal
            if stat.S_ISREG(mode):
                relative = "/".join(part for part in (base, path.relative_to(local).as_posix()) if part)
                pairs.append((path, inside_volume(relative, label)))
    return pairs


def _identity(local: Path) -> tuple[int, int]:
    """(device, inode) of a regular file that is not a link, or ConfigError naming it."""
    try:
        found = local.lstat()
    except OSError:
        raise ConfigError(f"{local} is not a file: nothing was uploaded") from None
    refusal = _refused(local, found.st_mode)
    if refusal is not None:
        raise refusal
    if not stat.S_ISREG(found.st_mode):
        raise ConfigError(f"{local} is not a file: nothing was uploaded")
    return found.st_dev, found.st_ino


def _refuse_links_in(folder: Path, label: str) -> None:
    """ConfigError when the revision copied into `folder` holds a symbolic link (a revision holds files only)."""
    for current, dirs, names in os.walk(folder):
        for name in [*dirs, *names]:
            path = Path(current) / name
            if path.is_symlink():
                shown = path.relative_to(folder).as_posix()
                raise ConfigError(f"{label} holds a symbolic link at {shown}: nothing was uploaded")


def _put(partial: Path, local: Path, relative: str, identity: tuple[int, int], label: str) -> None:
    """Copy `local` (still the file `identity` names, never through a link) to `relative` in the revision being
    made in `partial`; ConfigError when the revision has a file where a folder of the path would be, or a folder
    where the file would be."""
    destination = partial / relative
    for folder in reversed(PurePosixPath(relative).parents):
        here = partial / folder
        if folder.parts and (here.is_symlink() or (here.exists() and not here.is_dir())):
            raise ConfigError(f"{folder} is a file in {label}: {relative} cannot go under it; nothing was uploaded")
    destination.parent.mkdir(parents=True, exist_ok=True)
    if destination.is_dir() and not destination.is_symlink():
        raise ConfigError(f"{relative} is a folder in {label}: a file cannot replace it; nothing was uploaded")
    try:
        with open_regular(local) as source:
            opened = os.fstat(source.fileno())
            if (opened.st_dev, opened.st_ino) != identity:
                raise ConfigError(f"{local} changed while it was uploaded: nothing was uploaded")
            written, _ = write_beside(destination, source)
    except OSError as exc:
        if exc.errno == errno.ELOOP:
            raise ConfigError(f"{local} is a symbolic link: nothing was uploaded", hint=LINK_HINT) from None
        raise ConfigError(f"cannot upload {local}: {exc.strerror}: nothing was uploaded") from None
    written.replace(destination)


def upload(
    project: Project, store: StateStore, key: ResourceKey, files: Sequence[tuple[Path, str]]
) -> tuple[int, JSONObject]:
    """Commit `(local file, path in the Volume)` pairs as the Volume's next revision; (revision, manifest)."""
    label = f"Volume/{key.name}"
    record = _volume(store, key)
    if (record.spec.get("spec") or {}).get("accessMode") == "ReadOnlyMany":
        raise ConfigError(f"{label} is ReadOnlyMany: uploads go to a ReadWriteOnce Volume")
    identities = {local: _identity(local) for local, _ in files}  # links refused before anything is written
    with locked(volume_lock(project, key)):
        record = _volume(store, key)  # again, under the lock: an export or another upload may have moved it
        if record.status.get("phase") not in (Phase.READY, None) and record.status.get("revision") is None:
            raise ConfigError(f"{label} is {record.status.get('phase')}: {record.status.get('message', '')}")
        current = int(record.status.get("revision") or 0)
        previous = volume_path(project, record, current)
        revision = current + 1
        target = volume_path(project, record, revision)
        if (target / MANIFEST).is_file():  # an upload that committed but was not recorded: made again
            make_writable(target)
            shutil.rmtree(target)

        def fill(partial: Path) -> dict[str, Any]:
            if previous.is_dir():
                # Links copied as links, never followed, then refused: a revision holds regular files only.
                shutil.copytree(previous, partial, symlinks=True, ignore=_top_manifest(previous), dirs_exist_ok=True)
                _refuse_links_in(partial, f"{label} revision {current}")
                make_writable(partial)
            partial.mkdir(parents=True, exist_ok=True)
            for local, relative in files:
                _put(partial, local, relative, identities[local], f"{label} revision {current}")
            found = {}
            for path in sorted(p for p in partial.rglob("*") if p.is_file() and not p.is_symlink()):
                name = path.relative_to(partial).as_posix()
                if name != MANIFEST:
                    found[name] = {"sha256": file_sha256(path), "size": path.stat().st_size}
            return found

        manifest = commit_tree(target, fill)
        limit = size_bytes((record.spec.get("spec") or {}).get("size"))
        if limit is not None and int(manifest["sizeBytes"]) > limit:
            make_writable(target)
            shutil.rmtree(target)
            raise ConfigError(f"{label}: revision {revision} would hold {manifest['sizeBytes']} bytes, over spec.size")
        status = {
            **record.status,
            "phase": Phase.READY,
            "revision": revision,
            "files": len(manifest["files"]),
            "sizeBytes": manifest["sizeBytes"],
            "path": str(target),
        }
        status.pop("reason", None)
        status.pop("message", None)
        store.set_status(key, status)
    return revision, manifest


def _top_manifest(previous: Path) -> Any:
    """copytree's `ignore` for the manifest at the top of `previous` only (a file of that name deeper is data)."""

    def ignore(folder: str, names: list[str]) -> set[str]:
        return {MANIFEST} if Path(folder) == previous and MANIFEST in names else set()

    return ignore


def download(
    project: Project, store: StateStore, key: ResourceKey, relative: str, final: Path, revision: int | None = None
) -> Path:
    """Copy a file of the Volume (its latest revision, or `revision`) to `final`, checked against the sha256 its
    manifest records, never through a link on either side (`copy_verified`); the path written."""
    label = f"Volume/{key.name}"
    record = _volume(store, key)
    number = int(revision if revision is not None else record.status.get("revision") or 0)
    folder = volume_path(project, record, number)
    manifest = _manifest(folder, f"{label} revision {number}")
    entry = (manifest.get("files") or {}).get(relative)
    if entry is None:
        listed = ", ".join(sorted(manifest.get("files") or {})[:10]) or "no files"
        raise ConfigError(f"{label} revision {number} has no {relative!r} (it has: {listed})")

    def named(path: str) -> str:
        return f"{path} of {label} revision {number}"

    source = folder / relative
    refuse_links_between(folder, source, named)
    copied = copy_verified(
        {relative: source},
        [(relative, final)],
        {relative: entry},
        label,
        root=final,
        named=named,
        recorded_as=("committed with it", "the file changed after its commit"),
    )
    return copied[0]


def _manifest(folder: Path, label: str) -> dict[str, Any]:
    try:
        document: dict[str, Any] = json.loads((folder / MANIFEST).read_text(encoding="utf-8"))
    except FileNotFoundError:
        return {"files": {}}
    except ValueError as exc:
        raise ConfigError(f"{label}: its manifest is not JSON ({exc})") from None
    return document


def _volume(store: StateStore, key: ResourceKey) -> ResourceRecord:
    record = store.get(key)
    if record is None:
        raise ConfigError(f"Volume/{key.name} not found in project {key.project}", hint="apply a Volume first")
    return record
