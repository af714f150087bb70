"""Files in and out of a Volume: an upload commits a new revision, a download is checked against its sha256.

Who calls it: `nodus cp LOCAL vol/NAME:PATH` (`upload`) and `nodus cp vol/NAME:PATH LOCAL` (`stored_file`), through
`nodus.cli.jobs`. Exports of a run's outputs are `controllers/export.py`'s, under the same lock.

An upload is the seeds' "uploads and commits a new revision with a sha256 per file": revision N+1 holds every file
of revision N and the uploaded ones (a file at the same path replaced), read-only, with its manifest, made whole
before the Volume's status names it (`commit_tree`). The Volume is Ready at that revision; a TrainingJob fixes its
data to the revision it launched with, so later uploads never change a run that was admitted. A ReadOnlyMany Volume
(a model imported from a pinned revision) takes no uploads; `spec.size` bounds a revision.
"""

from __future__ import annotations

import json
import shutil
from collections.abc import Sequence
from pathlib import Path, PurePosixPath
from typing import Any

from nodus.errors import ConfigError
from nodus.reconciler.controllers.volume import commit_tree, make_writable, size_bytes, volume_path
from nodus.reconciler.executors import file_sha256, locked
from nodus.reconciler.model_cache import MANIFEST
from nodus.reconciler.project import Project
from nodus.reconciler.state.records import JSONObject, ResourceKey, ResourceRecord, StateStore
from nodus.specs.status_names import Phase


def volume_lock(project: Project, key: ResourceKey) -> Path:
    """The lock every new revision of the Volume is made under (uploads and exports)."""
    return project.files.root / "volumes" / key.project / f".{key.name}.lock"


def inside_volume(relative: str, label: str) -> str:
    """A path in a Volume: relative, no `..`, not the manifest."""
    path = PurePosixPath(relative.strip("/"))
    if not path.parts or path.is_absolute() or ".." in path.parts or path.as_posix() == MANIFEST:
        raise ConfigError(f"{label}: {relative!r} is not a path inside the Volume")
    return path.as_posix()


def upload(
    project: Project, store: StateStore, key: ResourceKey, files: Sequence[tuple[Path, str]]
) -> tuple[int, JSONObject]:
    """Commit `(local file, path in the Volume)` pairs as the Volume's next revision; (revision, manifest)."""
    label = f"Volume/{key.name}"
    record = _volume(store, key)
    if (record.spec.get("spec") or {}).get("accessMode") == "ReadOnlyMany":
        raise ConfigError(f"{label} is ReadOnlyMany: uploads go to a ReadWriteOnce Volume")
    for local, _ in files:
        if not local.is_file():
            raise ConfigError(f"{local} is not a file: nothing was uploaded")
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
                shutil.copytree(previous, partial, ignore=shutil.ignore_patterns(MANIFEST), dirs_exist_ok=True)
                make_writable(partial)
            for local, relative in files:
                destination = partial / relative
                destination.parent.mkdir(parents=True, exist_ok=True)
                shutil.copyfile(local, destination)
            found = {}
            for path in sorted(p for p in partial.rglob("*") if p.is_file() and p.name != MANIFEST):
                found[path.relative_to(partial).as_posix()] = {"sha256": file_sha256(path), "size": path.stat().st_size}
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


def stored_file(project: Project, store: StateStore, key: ResourceKey, relative: str, revision: int | None) -> Path:
    """A file of the Volume (its latest revision, or `revision`), checked against the sha256 its manifest records."""
    label = f"Volume/{key.name}"
    record = _volume(store, key)
    number = int(revision if revision is not None else record.status.get("revision") or 0)
    folder = volume_path(project, record, number)
    manifest = _manifest(folder, f"{label} revision {number}")
    entry = (manifest.get("files") or {}).get(relative)
    if entry is None:
        listed = ", ".join(sorted(manifest.get("files") or {})[:10]) or "no files"
        raise ConfigError(f"{label} revision {number} has no {relative!r} (it has: {listed})")
    path = folder / relative
    if file_sha256(path) != entry.get("sha256"):
        raise ConfigError(f"{label} revision {number}: {relative} no longer matches the sha256 committed with it")
    return path


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
