"""The data set of a supervised, preference or distillation run: read it, map its columns, hold a part out.

Who calls it: `finetune.run` (for `sft`, `dpo`, `orpo`, `kto`, `reward_model`, `distill`) at the start of a run,
before any model is loaded, so a bad file or column fails the run in one line. What it reads:

- `NODUS_INPUT_DATA`, the folder of the data Volume's revision, and params.json `data`
  (`{volume, revision, path, format, columns}`, the TrainingJob's `spec.data` as written);
- `path` is a file or a folder inside that folder; without one, every file of the format in the whole folder
  (recursively, hidden files left out, in name order);
- formats: JSONL (one JSON object a line), Parquet, CSV (a header row; a message list is a JSON string), Text
  (one row a non-empty line, in the column `text`);
- `columns` maps the runtime's names (prompt, completion, chosen, rejected, label, messages, text) onto the
  file's columns; a name it leaves out is read from the column of that same name.

Each runtime says which `Shape`s it reads (SFT: prompt + completion, or messages). A column that a file lacks,
an unknown runtime name in `columns`, a path outside the folder, or an unknown format is a `Refusal` naming the
file, the column and the `spec.data` field. `split` keeps a held-out part the trainer never trains on: whole
prompts go to one side (two replies to one prompt never straddle it), chosen by the seed.
"""

from __future__ import annotations

import csv
import hashlib
import json
import math
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from nodus.runtimes.outputs import sha256
from nodus.runtimes.refusal import Refusal

FORMATS: dict[str, tuple[str, ...]] = {
    "JSONL": (".jsonl",),
    "Parquet": (".parquet",),
    "CSV": (".csv",),
    "Text": (".txt", ".text"),
}
"""The formats nodus reads, and the file name endings it takes from a folder."""

TEXT_NAMES = ("prompt", "completion", "chosen", "rejected")
"""Runtime names whose value is a text or a list of chat messages."""

LABEL_WORDS = {
    "true": True,
    "1": True,
    "yes": True,
    "up": True,
    "desirable": True,
    "false": False,
    "0": False,
    "no": False,
    "down": False,
    "undesirable": False,
}
"""How a `label` (KTO's thumbs-up or thumbs-down) may be written, beside JSON booleans and 0/1."""


@dataclass(frozen=True)
class Shape:
    """One way a runtime reads a row: the runtime names it needs, all of them."""

    names: tuple[str, ...]

    def describe(self) -> str:
        return " + ".join(self.names)


@dataclass(frozen=True)
class DataSpec:
    """params.json `data`: which Volume revision, which file or folder, the format and the column mapping."""

    volume: str | None = None
    revision: int | None = None
    path: str | None = None
    format: str = "JSONL"
    columns: dict[str, str] = field(default_factory=dict)

    @classmethod
    def from_params(cls, params: dict[str, Any], runtime: str) -> DataSpec:
        data = params.get("data")
        if not isinstance(data, dict):
            raise Refusal(f"spec.data: {runtime} trains on a data set; name its Volume in spec.data.volume")
        columns = data.get("columns") or {}
        if not isinstance(columns, dict) or not all(isinstance(v, str) for v in columns.values()):
            raise Refusal("spec.data.columns: must map runtime names to column names (strings)")
        return cls(
            volume=data.get("volume"),
            revision=data.get("revision"),
            path=data.get("path"),
            format=str(data.get("format") or "JSONL"),
            columns={str(k): str(v) for k, v in columns.items()},
        )

    def where(self, relative: str) -> str:
        """A file as a user finds it: its path in the Volume, and the Volume's name and revision."""
        volume = f"Volume {self.volume}" if self.volume else "the data Volume"
        revision = f" revision {self.revision}" if self.revision is not None else ""
        return f"{relative} ({volume}{revision})"


@dataclass(frozen=True)
class DataFile:
    """A file the rows came from, for provenance."""

    path: Path
    relative: str
    sha256: str
    size: int

    def to_json(self) -> dict[str, Any]:
        return {"path": self.relative, "sha256": self.sha256, "size": self.size}


@dataclass
class Data:
    """The rows under the runtime's names, the shape they were read as, and the files they came from."""

    rows: list[dict[str, Any]]
    shape: Shape
    files: list[DataFile]
    spec: DataSpec

    def provenance(self) -> dict[str, Any]:
        return {
            "volume": self.spec.volume,
            "revision": self.spec.revision,
            "path": self.spec.path,
            "format": self.spec.format,
            "columns": dict(self.spec.columns),
            "rows": len(self.rows),
            "files": [f.to_json() for f in self.files],
        }


# --- reading ----------------------------------------------------------------------------------------------


def files_of(folder: Path, spec: DataSpec) -> list[Path]:
    """The files to read: `path` itself, or every file of the format under it (or under the folder)."""
    if spec.format not in FORMATS:
        known = ", ".join(FORMATS)
        raise Refusal(f"spec.data.format: {spec.format!r} is not a format nodus reads ({known})")
    root = folder.resolve()
    target = root
    if spec.path:
        target = (root / spec.path).resolve()
        if target != root and root not in target.parents:
            raise Refusal(f"spec.data.path: {spec.path!r} leads outside the data Volume")
        if not target.exists():
            raise Refusal(f"spec.data.path: {spec.where(spec.path)} does not exist")
    if target.is_file():
        return [target]
    endings = FORMATS[spec.format]
    found = sorted(
        p
        for p in target.rglob("*")
        if p.is_file()
        and p.name.lower().endswith(endings)
        and not any(part.startswith(".") for part in p.relative_to(root).parts)
    )
    if not found:
        where = spec.where(spec.path or ".")
        raise Refusal(f"spec.data: {where} holds no {spec.format} file (a name ending in {', '.join(endings)})")
    return found


def read_rows(path: Path, fmt: str, where: str) -> Iterator[tuple[int, dict[str, Any]]]:
    """(row number, row) of one file; JSONL and Text count lines, CSV and Parquet count data rows."""
    if fmt == "JSONL":
        yield from _jsonl(path, where)
    elif fmt == "CSV":
        with path.open(newline="", encoding="utf-8") as handle:
            for number, row in enumerate(csv.DictReader(handle), start=1):
                yield number, dict(row)
    elif fmt == "Parquet":
        import pyarrow.parquet as parquet  # type: ignore[import-untyped]

        try:
            table = parquet.read_table(path)
        except Exception as exc:  # pyarrow raises several types for a file that is not Parquet
            raise Refusal(f"{where}: not a readable Parquet file ({exc})") from None
        for number, row in enumerate(table.to_pylist(), start=1):
            yield number, row
    else:  # Text
        with path.open(encoding="utf-8") as handle:
            for number, line in enumerate(handle, start=1):
                if line.strip():
                    yield number, {"text": line.rstrip("\n")}


def _jsonl(path: Path, where: str) -> Iterator[tuple[int, dict[str, Any]]]:
    with path.open(encoding="utf-8") as handle:
        for number, line in enumerate(handle, start=1):
            if not line.strip():
                continue
            try:
                row = json.loads(line)
            except ValueError as exc:
                raise Refusal(f"{where} line {number}: not JSON ({exc})") from None
            if not isinstance(row, dict):
                raise Refusal(f"{where} line {number}: a row must be a JSON object, not {type(row).__name__}")
            yield number, row


# --- mapping ----------------------------------------------------------------------------------------------


def choose_shape(spec: DataSpec, shapes: Sequence[Shape], present: set[str], where: str, runtime: str) -> Shape:
    """The shape whose columns the mapping names, or else the first whose columns the file has."""
    known = {name for shape in shapes for name in shape.names}
    reads = " or ".join(shape.describe() for shape in shapes)
    for name in spec.columns:
        if name not in known:
            raise Refusal(f"spec.data.columns.{name}: {runtime} reads no column {name!r}; it reads {reads}")
    mapped = set(spec.columns)
    candidates = [shape for shape in shapes if mapped <= set(shape.names)]
    if not candidates:
        raise Refusal(f"spec.data.columns: {', '.join(sorted(mapped))} do not go together; {runtime} reads {reads}")
    for shape in candidates:
        if all(spec.columns.get(name, name) in present for name in shape.names):
            return shape
    shape = candidates[0]
    missing = next(name for name in shape.names if spec.columns.get(name, name) not in present)
    raise Refusal(missing_column(where, missing, spec, present, runtime))


def missing_column(where: str, name: str, spec: DataSpec, present: set[str], runtime: str) -> str:
    has = ", ".join(sorted(present)) or "none"
    if name in spec.columns:
        column = spec.columns[name]
        return f"{where}: no column {column!r}, which spec.data.columns.{name} names (its columns: {has})"
    return (
        f"{where}: no column {name!r}, which {runtime} reads; name yours in spec.data.columns.{name} "
        f"(its columns: {has})"
    )


def convert(name: str, value: Any, where: str) -> Any:
    """A cell as the trainers take it: texts and message lists, labels as booleans."""
    if value is None:
        raise Refusal(f"{where}: {name} is empty")
    if name == "label":
        return _label(value, where)
    if name == "text":
        if not isinstance(value, str):
            raise Refusal(f"{where}: text must be a string, not {type(value).__name__}")
        return value
    if name == "messages":
        return _messages(_maybe_json(value), where, name)
    if isinstance(value, str):
        return value
    return _messages(value, where, name)


def _maybe_json(value: Any) -> Any:
    """CSV cells hold message lists as JSON text."""
    if isinstance(value, str) and value.lstrip().startswith("["):
        try:
            return json.loads(value)
        except ValueError:
            return value
    return value


def _messages(value: Any, where: str, name: str) -> list[dict[str, Any]]:
    if not isinstance(value, list) or not value:
        raise Refusal(f"{where}: {name} must be a text or a non-empty list of {{role, content}} messages")
    for message in value:
        if not isinstance(message, dict) or "role" not in message or "content" not in message:
            raise Refusal(f"{where}: {name} must be a text or a list of {{role, content}} messages")
    return [{"role": str(m["role"]), "content": str(m["content"])} for m in value]


def _label(value: Any, where: str) -> bool:
    if isinstance(value, bool):
        return value
    if isinstance(value, int | float) and value in (0, 1):
        return bool(value)
    if isinstance(value, str) and value.strip().lower() in LABEL_WORDS:
        return LABEL_WORDS[value.strip().lower()]
    raise Refusal(f"{where}: label {value!r} is not a thumbs-up or thumbs-down (true/false, 1/0, up/down)")


def load(folder: Path, spec: DataSpec, shapes: Sequence[Shape], runtime: str) -> Data:
    """Every row of the data set under the runtime's names; refuses at the first file or row it cannot use."""
    paths = files_of(folder, spec)
    root = folder.resolve()
    rows: list[dict[str, Any]] = []
    files: list[DataFile] = []
    shape: Shape | None = None
    for path in paths:
        relative = path.relative_to(root).as_posix()
        where = spec.where(relative)
        for number, raw in read_rows(path, spec.format, where):
            if shape is None:
                shape = choose_shape(spec, shapes, set(raw), where, runtime)
            row = {}
            for name in shape.names:
                column = spec.columns.get(name, name)
                if column not in raw:
                    raise Refusal(missing_column(f"{where} row {number}", name, spec, set(raw), runtime))
                row[name] = convert(name, raw[column], f"{where} row {number} column {column!r}")
            rows.append(row)
        files.append(DataFile(path, relative, sha256(path), path.stat().st_size))
    if shape is None or not rows:
        raise Refusal(f"spec.data: {spec.where(spec.path or '.')} holds no rows")
    return Data(rows=rows, shape=shape, files=files, spec=spec)


# --- chat turns -------------------------------------------------------------------------------------------


def as_chat(row: dict[str, Any], chat: bool) -> dict[str, Any]:
    """A row with its texts as chat turns when `chat` (the model has a chat template and the run wants it) or
    when the row mixes texts and message lists (TRL takes one or the other): a prompt becomes a user turn, a
    reply an assistant turn. Other rows are left as they are (plain text, no template)."""
    conversational = any(isinstance(row.get(name), list) for name in TEXT_NAMES)
    if not (chat or conversational):
        return dict(row)
    out = dict(row)
    for name in TEXT_NAMES:
        value = row.get(name)
        if isinstance(value, str):
            out[name] = [{"role": "user" if name == "prompt" else "assistant", "content": value}]
    return out


# --- the held-out part ------------------------------------------------------------------------------------


def group_key(row: dict[str, Any]) -> str:
    """What must stay on one side of the split: the prompt (else the chat, else the text)."""
    for name in ("prompt", "messages", "text"):
        if name in row:
            return json.dumps(row[name], sort_keys=True, ensure_ascii=False)
    return json.dumps(row, sort_keys=True, ensure_ascii=False)


def split(
    rows: Sequence[dict[str, Any]], fraction: float, most: int, seed: int
) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """(train, held out): `fraction` of the prompts (at least one, at most `most` rows' worth) held out, chosen
    by a seeded digest of each prompt, so the same data and seed always give the same split, whatever the
    rows' order."""
    groups: dict[str, list[dict[str, Any]]] = {}
    for row in rows:
        groups.setdefault(group_key(row), []).append(row)
    if len(groups) < 2:
        raise Refusal(
            f"spec.data: {len(rows)} rows with {len(groups)} distinct prompt; a held-out part needs at least two"
        )
    order = sorted(groups, key=lambda key: hashlib.sha256(f"{seed}\0{key}".encode()).hexdigest())
    wanted = min(len(groups) - 1, max(1, math.ceil(fraction * len(groups))))
    chosen: set[str] = set()
    size = 0
    for key in order:
        if len(chosen) >= wanted or (chosen and size + len(groups[key]) > most):
            break
        chosen.add(key)
        size += len(groups[key])
    keys = [group_key(row) for row in rows]
    train = [row for row, key in zip(rows, keys, strict=True) if key not in chosen]
    held = [row for row, key in zip(rows, keys, strict=True) if key in chosen]
    return train, held
