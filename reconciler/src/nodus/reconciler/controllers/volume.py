"""Volumes and model caching: pinned model revisions imported once, read-only, and reused by every run.

Who calls it: `nodus apply` for Volume resources (first wave), and the TrainingJob controller for the model a
job names (`spec.model.uri` or `spec.model.volume`), which it hands to the trainer as `NODUS_INPUT_MODEL`.

Where models come from: nodus never downloads weights at run time. A revision `hf://org/name@<commit>` is
imported from the local Hugging Face cache (`HF_HUB_CACHE`, else `HF_HOME/hub`, else
`~/.cache/huggingface/hub`: the layout `huggingface-cli download` writes, `models--org--name/snapshots/<commit>`);
a Volume with `source.path` copies a local folder. Each import is copied (symlinks into the cache's blobs
followed, never out of it), checked, made read-only and recorded with a sha256 per file, into:

    .nodus/models/<org>--<name>@<commit>/        models named by a TrainingJob (shared by all its runs)
    .nodus/volumes/<project>/<name>/rev<N>/      Volumes, by revision

Status of a Volume: `phase` Ready (with `revision`, `files`, `sizeBytes`, `path`) or Pending/Failed with the
reason `ModelNotCached`, `SourceMissing` or `SizeExceeded`.

Where a model already is (imported, or in the cache) is `nodus.reconciler.model_cache`: the estimator and
`nodus apply --dry-run` ask it too, without importing a controller.
"""

from __future__ import annotations

import json
import os
import shutil
import stat
from collections.abc import Callable
from pathlib import Path
from typing import Any

from nodus.reconciler.executors import file_sha256
from nodus.reconciler.model_cache import MANIFEST, imported, model_folder, not_cached, snapshot
from nodus.reconciler.project import Project
from nodus.reconciler.state.records import JSONObject, ResourceRecord
from nodus.specs.status_names import Phase, Reason
from nodus.specs.types import parse_quantity


def import_tree(source: Path, target: Path, *, allowed: Path | None = None) -> JSONObject:
    """Copy `source` to `target` once (atomically), read-only, with a sha256 per file; the manifest.

    Symlinks are followed only to files under `allowed` (default: `source` itself; for a cache snapshot, the
    model's folder with its blobs). An existing complete import is reused as it is: later runs are cheap.
    """
    root = (allowed or source).resolve()

    def fill(partial: Path) -> dict[str, Any]:
        files: dict[str, Any] = {}
        for current, dirs, names in os.walk(source):
            dirs.sort()
            for name in sorted(names):
                path = Path(current) / name
                real = path.resolve()
                # The cache's snapshot files are symlinks into its blobs; anything pointing elsewhere is refused.
                if not real.is_relative_to(root) or not real.is_file():
                    continue
                relative = path.relative_to(source).as_posix()
                destination = partial / relative
                destination.parent.mkdir(parents=True, exist_ok=True)
                shutil.copyfile(real, destination)
                files[relative] = {"sha256": file_sha256(destination), "size": destination.stat().st_size}
        return files

    return commit_tree(target, fill)


def commit_tree(target: Path, fill: Callable[[Path], dict[str, Any]]) -> JSONObject:
    """Make `target` once (atomically) and read-only: `fill(partial)` writes the files into the folder beside it
    and returns `path -> {"sha256", "size"}` of each; the manifest. An existing complete one is reused as it is.
    Export (`controllers/export.py`) fills it with the executor's verified copies of a run's outputs."""
    manifest_path = target / MANIFEST
    if manifest_path.is_file():
        recorded: JSONObject = json.loads(manifest_path.read_text(encoding="utf-8"))
        return recorded
    partial = target.with_name(target.name + ".partial")
    if partial.exists():
        make_writable(partial)
        shutil.rmtree(partial)
    try:
        files = fill(partial)
    except BaseException:  # refused or failed: no half-made revision is left beside the Volume's
        if partial.exists() or partial.is_symlink():
            make_writable(partial)
            shutil.rmtree(partial, ignore_errors=True)
        raise
    partial.mkdir(parents=True, exist_ok=True)
    manifest = {"files": files, "sizeBytes": sum(item["size"] for item in files.values())}
    (partial / MANIFEST).write_text(json.dumps(manifest, sort_keys=True, indent=2) + "\n", encoding="utf-8")
    _make_read_only(partial)
    target.parent.mkdir(parents=True, exist_ok=True)
    partial.rename(target)
    return manifest


def ensure_model(project: Project, uri: str) -> tuple[Path | None, JSONObject]:
    """The imported model folder of a pinned revision (imported now if needed), or None and why not."""
    target = model_folder(project, uri)
    if imported(project, uri):
        return target, {"phase": Phase.READY}
    found = snapshot(uri)
    if found is None:
        return None, not_cached(uri)
    import_tree(found, target, allowed=found.parents[1])
    return target, {"phase": Phase.READY}


def volume_path(project: Project, record: ResourceRecord, revision: int) -> Path:
    return project.volume_revision(record.key.project, record.key.name, revision)


def reconcile_volume(record: ResourceRecord, *, project: Project, spec_file: Path | None) -> JSONObject:
    """Fill a Volume from its source once (revision 1); an empty Volume is Ready at revision 0."""
    if record.status.get("phase") == Phase.READY:
        return record.status
    spec = record.spec["spec"]
    source = spec.get("source") or {}
    if not source:
        folder = volume_path(project, record, 0)
        folder.mkdir(parents=True, exist_ok=True)
        return {"phase": Phase.READY, "revision": 0, "files": 0, "sizeBytes": 0, "path": str(folder)}
    if source.get("uri"):
        found = snapshot(source["uri"])
        if found is None:
            return not_cached(source["uri"])
    else:
        found = (spec_file.parent if spec_file else Path.cwd()) / source["path"]
        if not found.is_dir():
            return {"phase": Phase.FAILED, "reason": Reason.SOURCE_MISSING, "message": f"{found} is not a folder"}
    target = volume_path(project, record, 1)
    manifest = import_tree(found, target, allowed=found.parents[1] if source.get("uri") else None)
    limit = size_bytes(spec.get("size"))
    if limit is not None and manifest["sizeBytes"] > limit:
        return {
            "phase": Phase.FAILED,
            "reason": Reason.SIZE_EXCEEDED,
            "message": f"{manifest['sizeBytes']} bytes is more than spec.size {spec['size']}",
        }
    return {
        "phase": Phase.READY,
        "revision": 1,
        "files": len(manifest["files"]),
        "sizeBytes": manifest["sizeBytes"],
        "path": str(target),
    }


def size_bytes(value: Any) -> int | None:
    """A Volume's `spec.size` in bytes (None: unbounded)."""
    if value is None:
        return None
    return parse_quantity(value)


def _make_read_only(folder: Path) -> None:
    for current, _, names in os.walk(folder):
        for name in names:
            path = Path(current) / name
            if not path.is_symlink():  # a link's target is never touched
                path.chmod(stat.S_IMODE(path.stat().st_mode) & ~0o222)
    for current, dirs, _ in os.walk(folder, topdown=False):
        for name in dirs:
            path = Path(current) / name
            path.chmod(0o555)
    folder.chmod(0o555)


def make_writable(folder: Path) -> None:
    """Undo `_make_read_only` (an import is read-only), so the folder can be replaced or deleted. A symbolic link
    in it is left alone: chmod would change the file it points to."""
    if folder.is_symlink():
        return
    for current, _dirs, names in os.walk(folder):
        Path(current).chmod(0o755)
        for name in names:
            path = Path(current) / name
            if not path.is_symlink():
                path.chmod(0o644)
