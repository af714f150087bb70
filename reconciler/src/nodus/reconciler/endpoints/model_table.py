"""The model table: catalog model ids (`nodus/tiny-qwen3`) -> the weights an endpoint serves and what it offers.

Who calls it: the InferenceEndpoint controller (`endpoints/served.py`), to turn `spec.model: nodus/...` into a pinned
revision or a Volume; `nodus inference models` and the gateway's `GET /v1/models`, to list what can be called.

Where it comes from, as the price table does: `catalog/models.yaml` (a wheel's packaged copy beside this module, else
this checkout's `catalog/`), then `models.yaml` beside the project's nodus.lock, merged by id (the project's entry
wins whole). Prices are not here: they are the price table's `inference:` entries (by id, else by family).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Final

import yaml
from pydantic_core import PydanticCustomError

from nodus.errors import ConfigError
from nodus.specs.types import check_hf_uri

TABLE_FILE: Final = "models.yaml"
OPERATIONS: Final = ("ChatCompletions", "Completions", "Responses", "Messages", "Embeddings")
FIELDS: Final = frozenset(
    {"name", "uri", "volume", "repo", "context", "maxOutput", "operations", "aliases", "preview", "gpu"}
)


@dataclass(frozen=True)
class ModelEntry:
    """One catalog model: its id, the weights (exactly one of `uri` or `volume`) and what it serves."""

    id: str
    name: str
    uri: str | None = None
    volume: tuple[str, int] | None = None
    """(Volume name, revision) in the project of the endpoint that serves it."""
    repo: str | None = None
    """`org/name` of a model listed with no revision pinned yet: callable once a project's models.yaml pins one."""
    context: int | None = None
    max_output: int | None = None
    operations: tuple[str, ...] = OPERATIONS
    aliases: tuple[str, ...] = ()
    preview: bool = False
    gpu: tuple[tuple[str, ...], int] | None = None
    """(GPU types, any of which will do, in order; GPUs) its server needs where an executor places it (Ray)."""

    @property
    def family(self) -> str:
        """The part after the slash: what the price table prices a model by when it has no entry for the id."""
        return self.id.rpartition("/")[2].lower()


@dataclass(frozen=True)
class ModelTable:
    version: str
    entries: Mapping[str, ModelEntry] = field(default_factory=dict)
    files: tuple[str, ...] = ()

    def get(self, model_id: str) -> ModelEntry | None:
        """The entry an id (or one of its aliases) names, case as written."""
        found = self.entries.get(model_id)
        if found is not None:
            return found
        return next((entry for entry in self.entries.values() if model_id in entry.aliases), None)


def catalog_table() -> Path | None:
    here = Path(__file__).resolve()
    for candidate in (here.parent / TABLE_FILE, here.parents[5] / "catalog" / TABLE_FILE):
        if candidate.is_file():
            return candidate
    return None


def load_models(project_root: Path | None = None, *, catalog: Path | None = None) -> ModelTable:
    """The table in force: the catalog's, then the project's models.yaml. ConfigError naming the file and the entry
    of a bad one."""
    files = [path for path in (catalog or catalog_table(), project_root / TABLE_FILE if project_root else None) if path]
    version, entries, read = "", {}, []
    for path in files:
        if not path.is_file():
            continue
        document = _document(path)
        version = str(document.get("version") or version)
        for model_id, raw in (document.get("models") or {}).items():
            entries[str(model_id)] = _entry(str(model_id), raw, path)
        read.append(str(path))
    return ModelTable(version, entries, tuple(read))


def _document(path: Path) -> dict[str, Any]:
    try:
        document = yaml.safe_load(path.read_text(encoding="utf-8")) or {}
    except yaml.YAMLError as exc:
        raise ConfigError(f"{path}: not valid YAML ({exc})") from None
    if not isinstance(document, dict) or not isinstance(document.get("models", {}), dict):
        raise ConfigError(f"{path}: a model table is a mapping with `models:` by id")
    return document


def _entry(model_id: str, raw: Any, path: Path) -> ModelEntry:
    where = f"{path}: models.{model_id}"
    if not isinstance(raw, dict):
        raise ConfigError(f"{where}: an entry is a mapping (uri or volume, context, operations, ...)")
    unknown = sorted(set(raw) - FIELDS)
    if unknown:
        raise ConfigError(f"{where}.{unknown[0]}: unknown field", hint="fields: " + ", ".join(sorted(FIELDS)))
    given = [name for name in ("uri", "volume", "repo") if raw.get(name) is not None]
    if len(given) != 1:
        raise ConfigError(f"{where}: set exactly one of uri, volume or repo (a model not pinned yet)")
    uri = raw.get("uri")
    if uri is not None:
        try:
            check_hf_uri(str(uri))
        except (ValueError, PydanticCustomError) as exc:
            raise ConfigError(f"{where}.uri: {exc}") from None
    volume = None
    if raw.get("volume") is not None:
        spec = raw["volume"]
        if not isinstance(spec, dict) or not spec.get("name") or not isinstance(spec.get("revision"), int):
            raise ConfigError(f"{where}.volume: name and a revision number, e.g. {{name: my-model, revision: 2}}")
        volume = (str(spec["name"]), int(spec["revision"]))
    operations = tuple(str(op) for op in raw.get("operations") or OPERATIONS)
    bad = [op for op in operations if op not in OPERATIONS]
    if bad:
        raise ConfigError(f"{where}.operations: {bad[0]!r} is not one of {', '.join(OPERATIONS)}")
    return ModelEntry(
        id=model_id,
        name=str(raw.get("name") or model_id),
        uri=None if uri is None else str(uri),
        volume=volume,
        repo=None if raw.get("repo") is None else str(raw["repo"]),
        context=_positive(raw.get("context"), f"{where}.context"),
        max_output=_positive(raw.get("maxOutput"), f"{where}.maxOutput"),
        operations=operations,
        aliases=tuple(str(alias) for alias in raw.get("aliases") or ()),
        preview=bool(raw.get("preview", False)),
        gpu=_gpu(raw.get("gpu"), f"{where}.gpu"),
    )


def _gpu(value: Any, where: str) -> tuple[tuple[str, ...], int] | None:
    """`gpu: {type: [h100-sxm-80g, a100-80g], count: 1}` (a type alone may be a string; count defaults to 1)."""
    if value is None:
        return None
    if not isinstance(value, dict) or set(value) - {"type", "count"} or not value.get("type"):
        raise ConfigError(
            f"{where}: type (a GPU type or a list, any of which will do) and count, e.g. {{type: [l4-24g]}}"
        )
    types = (value["type"],) if isinstance(value["type"], str) else tuple(value["type"])
    if not all(isinstance(one, str) and one for one in types):
        raise ConfigError(f"{where}.type: GPU type names such as h100-sxm-80g (got {value['type']!r})")
    count = value.get("count", 1)
    if isinstance(count, bool) or not isinstance(count, int) or count < 1:
        raise ConfigError(f"{where}.count: a positive number of GPUs (got {count!r})")
    return types, count


def _positive(value: Any, where: str) -> int | None:
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise ConfigError(f"{where}: a positive number of tokens (got {value!r})")
    return value
