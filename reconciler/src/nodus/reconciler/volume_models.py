"""What a Volume revision holds as a model: a full model, or a LoRA adapter over the base model it was trained from.

Who calls it: the TrainingJob controller (the workload names the base and the adapters), its admission (what can
never be trained on is refused at plan time), the estimator (the base model's files give the parameter count) and
the InferenceEndpoint's `served_model`. Only reads: the revision's folder, its provenance.json and what the project
has imported; it copies, merges and downloads nothing (the trainer merges, `nodus.runtimes.contract`).

    a revision holding                          is
    config.json (or model/config.json)          a full model (model/: a run's exported outputs)
    adapter_config.json (or adapter/...)        that adapter over the model its provenance.json names as
                                                `model.revision`: a pinned `hf://` URI the project has imported or the
                                                local Hugging Face cache holds, or `volume:NAME@REV` (resolved the
                                                same way, so an adapter trained on a merged adapter resolves to the
                                                first base plus both adapters, in order)
    neither                                     nothing a trainer can load: refused
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Final

from nodus.errors import ConfigError
from nodus.reconciler.model_cache import how_to_cache, imported, model_folder, snapshot
from nodus.reconciler.project import Project
from nodus.specs.status_names import Reason

MAX_DEPTH: Final = 8
"""Adapters over adapters followed at most this deep (a provenance that names itself would loop)."""


class UnusableModelError(ConfigError):
    """The revision exists but holds nothing a trainer can load; `reason` is the admission reason."""

    def __init__(self, reason: str, message: str, hint: str | None = None) -> None:
        super().__init__(message, hint=hint)
        self.reason = reason


@dataclass(frozen=True)
class AdapterRef:
    """One adapter: a Volume revision and the folder inside it (`adapter` for a run's export, `` at its top)."""

    volume: str
    revision: int
    path: str = ""

    @property
    def name(self) -> str:
        """`volume:NAME@REV`, as params.json and provenance.json name a Volume model."""
        return f"volume:{self.volume}@{self.revision}"


@dataclass(frozen=True)
class VolumeModel:
    """A Volume revision as a model: the base (a pinned URI, or a Volume revision holding a full model), the
    adapters over it in the order they were trained, and the base's folder on this host (for its size)."""

    base_uri: str | None
    base_volume: tuple[str, int] | None
    adapters: tuple[AdapterRef, ...]
    base_folder: Path

    @property
    def base_name(self) -> str:
        if self.base_uri is not None:
            return self.base_uri
        assert self.base_volume is not None
        return f"volume:{self.base_volume[0]}@{self.base_volume[1]}"


def resolve(project: Project, owner: str, name: str, revision: int) -> VolumeModel | None:
    """Volume `owner/name` revision `revision` as a model; None when that revision is not there (yet: a run of the
    same plan may export it). Raises UnusableModelError naming the revision and what is wrong with it."""
    return _resolve(project, owner, name, revision, depth=0)


def _resolve(project: Project, owner: str, name: str, revision: int, *, depth: int) -> VolumeModel | None:
    folder = project.volume_revision(owner, name, revision)
    if not folder.is_dir():
        return None
    where = f"Volume {name} revision {revision}"
    for candidate in (folder, folder / "model"):
        if (candidate / "config.json").is_file():
            return VolumeModel(base_uri=None, base_volume=(name, revision), adapters=(), base_folder=candidate)
    adapter = next((path for path in ("", "adapter") if (folder / path / "adapter_config.json").is_file()), None)
    if adapter is None:
        raise UnusableModelError(
            Reason.MODEL_NOT_FOUND,
            f"{where} holds no model: no config.json (a full model) and no adapter_config.json (a LoRA adapter), at "
            "its top or in model/ or adapter/",
            hint=f"upload a model folder (`nodus cp ./model vol/{name}:`) or name the revision a run exported",
        )
    this = AdapterRef(name, revision, adapter)
    base = _base_of(folder, adapter, where)
    if base.startswith("hf://"):
        found = _cached(project, base)
        if found is None:
            raise UnusableModelError(
                Reason.MODEL_NOT_CACHED,
                f"{where} holds a LoRA adapter over {base}, which is neither imported into this project nor in the "
                "local Hugging Face cache (nodus never downloads weights)",
                hint=how_to_cache(base),
            )
        return VolumeModel(base_uri=base, base_volume=None, adapters=(this,), base_folder=found)
    volume, _, number = base.removeprefix("volume:").rpartition("@")
    if depth >= MAX_DEPTH or (volume, number) == (name, str(revision)):
        detail = f"{where}: its adapters over adapters go more than {MAX_DEPTH} deep"
        raise UnusableModelError(Reason.MODEL_NOT_FOUND, detail)
    below = _resolve(project, owner, volume, int(number), depth=depth + 1)
    if below is None:
        raise UnusableModelError(
            Reason.MODEL_NOT_FOUND,
            f"{where} holds a LoRA adapter over {base}, and Volume {volume} has no revision {number} on this host",
        )
    return VolumeModel(below.base_uri, below.base_volume, (*below.adapters, this), below.base_folder)


def _base_of(folder: Path, adapter: str, where: str) -> str:
    """The model the adapter was trained on, as its run's provenance.json names it (`model.revision`)."""
    for candidate in (folder / adapter, folder):
        path = candidate / "provenance.json"
        if not path.is_file():
            continue
        try:
            document = json.loads(path.read_text(encoding="utf-8"))
        except (OSError, ValueError) as exc:
            raise UnusableModelError(Reason.MODEL_NOT_FOUND, f"{where}: provenance.json is not JSON ({exc})") from None
        model = document.get("model") if isinstance(document, dict) else None
        revision = model.get("revision") if isinstance(model, dict) else None
        if isinstance(revision, str) and (
            (revision.startswith("hf://") and "@" in revision)
            or (revision.startswith("volume:") and revision.rpartition("@")[2].isdigit())
        ):
            return revision
        raise UnusableModelError(
            Reason.MODEL_NOT_FOUND,
            f"{where} holds a LoRA adapter whose provenance.json names no pinned base model (model.revision is "
            f"{revision!r})",
        )
    raise UnusableModelError(
        Reason.MODEL_NOT_FOUND,
        f"{where} holds a LoRA adapter but no provenance.json naming its base model (adapter_config.json's "
        "base_model_name_or_path is a path on the host that trained it, not a pinned revision)",
        hint="export the adapter with `spec.exportTo` (it writes provenance.json), or upload the merged model",
    )


def _cached(project: Project, uri: str) -> Path | None:
    """The base model's folder on this host: the project's imported copy, else the Hugging Face cache's."""
    if imported(project, uri):
        return model_folder(project, uri)
    return snapshot(uri)
