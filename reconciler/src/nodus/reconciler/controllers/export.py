"""`spec.exportTo`: a succeeded run's outputs copied into a new revision of a ReadWriteOnce Volume.

Who calls it: the TrainingJob controller (`nodus apply`) and `nodus.reconciler.refresh` (`nodus get`,
`describe`, `wait`), through `exported_status`, once the job has Succeeded. Admission
(`nodus.reconciler.controllers.admission`) has already checked that the Volume exists in the job's project, is
ReadWriteOnce, and that the runtime declares an output at `/nodus/outputs`.

What it does, as the seeds say: every file the trainer wrote under its outputs is committed to the Volume as
its next revision (`.nodus/volumes/<project>/<name>/rev<N>/`, read-only, with a sha256 per file), and the
TrainingJob's `status.export` (shown as the `Exported` condition) records that exact revision. A symbolic link
in the outputs (what the executor recorded as skipped: links, special files) is refused, not followed. The
files come from the executor (`Executor.outputs` and `copy_outputs`, each verified against its recorded sha256),
never from its job folder. A Volume not Ready yet is waited for (`Pending`, tried again at the
next look); a failed copy (a link, `spec.size` exceeded) leaves the run Succeeded with its files still
downloadable as outputs (`nodus cp`), and the condition says why.

Once only: the Volume folder's lock is held while the TrainingJob's record is read again, so two processes
looking at the same finished run (a `nodus get` beside a `nodus wait`) commit one revision between them.
"""

from __future__ import annotations

import shutil
import time
from pathlib import Path

from nodus.errors import ConfigError
from nodus.reconciler.controllers.volume import commit_tree, make_writable, size_bytes, volume_path
from nodus.reconciler.executors import Executor, OutputManifest, locked
from nodus.reconciler.model_cache import MANIFEST
from nodus.reconciler.project import Project
from nodus.reconciler.state.records import JSONObject, ResourceKey, ResourceRecord, StateStore
from nodus.specs.status_names import Phase, Reason, Stage

EXPORTED = Phase.EXPORTED
PENDING = Phase.PENDING
FAILED = Phase.FAILED


def exported_status(
    record: ResourceRecord, status: JSONObject, jobs: Executor, *, project: Project, store: StateStore
) -> JSONObject:
    """`status` with its `export` field: kept when this generation's export is done (or failed), else the
    export carried out now. Unchanged for a job without `spec.exportTo` or that has not Succeeded."""
    target = (record.spec.get("spec") or {}).get("exportTo")
    if not target or status.get("phase") != Phase.SUCCEEDED:
        return status
    generation = int(record.status.get("launchGeneration") or record.generation)
    previous = record.status.get("export")
    if isinstance(previous, dict) and previous.get("generation") == generation and previous.get("phase") != PENDING:
        return {**status, "export": previous}
    volume_key = ResourceKey("Volume", record.key.project, str(target["volume"]))
    lock = project.files.root / "volumes" / volume_key.project / f".{volume_key.name}.lock"
    with locked(lock):
        current = store.get(record.key)
        done = (current.status if current else {}).get("export")
        if isinstance(done, dict) and done.get("generation") == generation and done.get("phase") != PENDING:
            return {**status, "export": done}
        export = _export(record, jobs, volume_key, project=project, store=store)
    status = {**status, "export": {**export, "volume": volume_key.name, "generation": generation}}
    # The seeds' STAGE: `Exporting` while the outputs are still to be written to spec.exportTo, none once they are.
    return {**status, "stage": Stage.EXPORTING} if export.get("phase") == PENDING else status


def _export(
    record: ResourceRecord, jobs: Executor, volume_key: ResourceKey, *, project: Project, store: StateStore
) -> JSONObject:
    volume = store.get(volume_key)
    if volume is None:
        return _failed(Reason.VOLUME_NOT_FOUND, f"Volume {volume_key.project}/{volume_key.name} does not exist")
    if volume.status.get("phase") != Phase.READY:
        message = f"Volume {volume_key.name} is {volume.status.get('phase', PENDING)}; the export waits for it"
        return {"phase": PENDING, "reason": Reason.VOLUME_NOT_READY, "message": message}
    outputs = jobs.outputs(record.key.project, record.key.name)
    if outputs is None:
        return _failed(Reason.NO_OUTPUTS, "the run recorded no outputs; nothing was exported")
    links = sorted(outputs.skipped)
    if links:
        shown = ", ".join(links[:3]) + (f" and {len(links) - 3} more" if len(links) > 3 else "")
        return _failed(Reason.SYMLINK_REJECTED, f"the outputs hold symbolic links ({shown}); nothing was exported")
    revision = int(volume.status.get("revision") or 0) + 1
    folder = volume_path(project, volume, revision)
    if (folder / MANIFEST).is_file():  # a copy an interrupted export finished but did not record: not reused
        _remove(folder)
    started = time.monotonic()
    try:
        manifest = commit_tree(folder, lambda partial: _copy_outputs(jobs, record, outputs, partial))
    except ConfigError as exc:  # an output changed after it was recorded, or cannot be read
        return _failed(Reason.COPY_FAILED, str(exc))
    limit = size_bytes((volume.spec.get("spec") or {}).get("size"))
    if limit is not None and int(manifest["sizeBytes"]) > limit:
        _remove(folder)
        message = f"{manifest['sizeBytes']} bytes is more than Volume {volume_key.name}'s spec.size"
        return _failed(Reason.SIZE_EXCEEDED, message)
    store.set_status(
        volume_key,
        {
            **volume.status,
            "revision": revision,
            "files": len(manifest["files"]),
            "sizeBytes": manifest["sizeBytes"],
            "path": str(folder),
            "exportedFrom": f"TrainingJob/{record.key.name}",
        },
    )
    return {
        "phase": EXPORTED,
        "revision": revision,
        "files": len(manifest["files"]),
        "sizeBytes": manifest["sizeBytes"],
        "seconds": round(time.monotonic() - started, 3),
    }


def _failed(reason: Reason, message: str) -> JSONObject:
    return {"phase": FAILED, "reason": reason, "message": message}


def _copy_outputs(jobs: Executor, record: ResourceRecord, outputs: OutputManifest, partial: Path) -> JSONObject:
    """Every recorded output copied into the revision's folder, each checked against its sha256 by the executor."""
    copies = [(relative, partial / relative) for relative in sorted(outputs.files)]
    label = f"TrainingJob/{record.key.name}"
    jobs.copy_outputs(record.key.project, record.key.name, copies, label=label, root=partial)
    return outputs.to_json()


def _remove(folder: Path) -> None:
    """A revision folder is read-only (`import_tree`): make it writable, then delete it."""
    make_writable(folder)
    shutil.rmtree(folder)
