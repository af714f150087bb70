"""A TrainingJob's `spec.data.columns` checked against the data set at plan time: a mapping that names a column the
file lacks is refused before anything runs, naming the file, the resource and the field.

Who calls it: the TrainingJob controller's admission (`trainingjob_refusals`, `nodus plan` and `apply` before anything
is written), with the project's folder. It reads only: the Volume's record (its latest committed revision, or the
revision named) and the head of its data file (a JSONL line, a CSV header, a Parquet schema). Where there is nothing
to read yet (no Volume, no upload, a folder of files) nothing is refused here: the run waits for its data at launch
(`VolumeNotReady`), and the trainer checks the columns of every file it reads.
"""

from __future__ import annotations

import csv
import json
from collections.abc import Mapping
from pathlib import Path
from typing import Any, Final

from nodus.reconciler.controllers.base import AdmissionContext, Refusal
from nodus.reconciler.project import Project
from nodus.reconciler.state.records import DEFAULT_PROJECT, ResourceKey
from nodus.specs.status_names import Reason

HEAD_BYTES: Final = 1 << 20
"""How much of a JSONL or CSV file is read for its first record (a first line longer than this is not checked)."""


def column_refusals(job: Mapping[str, Any], context: AdmissionContext) -> list[Refusal]:
    """Why `job`'s column mapping cannot be right for its data file, one refusal per missing column."""
    data = (job.get("spec") or {}).get("data") or {}
    columns = data.get("columns") or {}
    if not columns or not data.get("path") or context.project_root is None:
        return []
    project_name = str((job.get("metadata") or {}).get("project") or DEFAULT_PROJECT)
    volume = context.planned.store.get(ResourceKey("Volume", project_name, str(data["volume"])))
    if volume is None:
        return []
    revision = int(data.get("revision") or volume.status.get("revision") or 0)
    project = Project.find(context.project_root)
    file = project.volume_revision(project_name, str(data["volume"]), revision) / str(data["path"])
    if not file.is_file():
        return []
    found = columns_of(file, str(data.get("format") or "JSONL"))
    if found is None:
        return []
    where = f"vol/{data['volume']}:{data['path']} (revision {revision})"
    return [
        Refusal(
            Reason.DATA_COLUMN_MISSING,
            f"spec.data.columns.{name}: column {column!r} is not in {where}; it has: {', '.join(found) or 'none'}",
        )
        for name, column in columns.items()
        if column not in found
    ]


def columns_of(file: Path, format: str) -> list[str] | None:
    """The column names of a data file's first record, or None when they cannot be read cheaply."""
    if format == "JSONL":
        with file.open("rb") as handle:
            first = handle.readline(HEAD_BYTES)
        try:
            record = json.loads(first)
        except ValueError:
            return None
        return list(record) if isinstance(record, dict) else None
    if format == "CSV":
        with file.open(encoding="utf-8", newline="") as handle:
            header = next(csv.reader(handle), None)
        return list(header) if header else None
    if format == "Parquet":
        try:
            import pyarrow.parquet as parquet  # type: ignore[import-untyped]  # optional: installed with datasets
        except ImportError:
            return None
        return list(parquet.read_schema(file).names)
    return None
