"""What an InferenceEndpoint serves: its `spec.model` turned into base weights, adapters and the names requests use.

Who calls it: the InferenceEndpoint controller (`controllers/endpoint.py`), at every reconcile, and its admission
(a catalog id the model table does not have is refused at plan time). Pure but for reads: the model table, the store's
records (a TrainingJob, a Volume) and, for a trained adapter, its `provenance.json` through the executor.

    spec.model                          serves
    nodus/tiny-qwen3 (catalog id)       the table's pinned revision (or Volume), as `nodus/tiny-qwen3`
    {uri: hf://org/name@commit}         that revision, as `org/name`
    {volume: {name, revision}}          a model folder as `volume/NAME`; a LoRA adapter (adapter_config.json at the
                                        top, or a run's export with adapter/) over the base its provenance.json
                                        names, as NAME (`nodus.reconciler.volume_models`)
    {trainingJob: NAME}                 the Succeeded job's outputs/adapter/ over the model it trained (its
                                        provenance.json), as NAME

`model_id` is what prices and `GET /v1/models` know it by: the catalog id, else the catalog id of its base where the
table has one, else the base's `org/name`.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from nodus.errors import ConfigError, NodusError
from nodus.reconciler import volume_models
from nodus.reconciler.endpoints.model_table import OPERATIONS, ModelEntry, ModelTable
from nodus.reconciler.executors.protocol import Executor
from nodus.reconciler.executors.service import Adapter, JobOutput
from nodus.reconciler.executors.workload import ModelArtifact, VolumeRevision
from nodus.reconciler.project import Project
from nodus.reconciler.state.records import ResourceKey, ResourceRecord, StateStore
from nodus.specs.status_names import Phase, Reason


@dataclass(frozen=True)
class Served:
    """The weights an endpoint serves and the names they go by."""

    model_id: str
    served_name: str
    """The `model` the upstream server knows (requests are forwarded with it)."""
    base: ModelArtifact
    adapters: tuple[Adapter, ...] = ()
    operations: tuple[str, ...] = OPERATIONS
    context: int | None = None
    max_output: int | None = None
    source: str = ""
    """Where it came from, for the status (`TrainingJob/quickstart outputs/adapter over hf://...`)."""
    gpu: tuple[tuple[str, ...], int] | None = None
    """The GPU types (any of them) and count its server needs, from the model table; None: a CPU will do."""


@dataclass(frozen=True)
class NotYet:
    """Why it cannot be served yet (Pending): the TrainingJob has not Succeeded, the Volume is not Ready."""

    reason: str
    message: str


def served_model(
    record: ResourceRecord, table: ModelTable, project: Project, store: StateStore, jobs: Executor
) -> Served | NotYet:
    """What `record` (an InferenceEndpoint) serves. ConfigError naming `spec.model` when it can never be served."""
    model = record.spec["spec"]["model"]
    if isinstance(model, str):
        entry = table.get(model)
        if entry is not None and entry.repo is not None:
            return NotYet(
                Reason.MODEL_NOT_PINNED,
                f"{model} is listed with no pinned revision of {entry.repo}: pin the one you have in models.yaml "
                f'beside nodus.lock ({entry.id}: {{uri: "hf://{entry.repo}@<commit>"}}); nodus never downloads weights',
            )
        if entry is None:
            raise ConfigError(
                f"spec.model: {model} is not in the model table ({', '.join(table.files) or 'none read'})"
            )
        return _catalog(entry)
    if model.get("uri"):
        uri = str(model["uri"])
        return _base(uri, table, ModelArtifact(uri=uri), served_name=_repo(uri), source=uri)
    if model.get("trainingJob"):
        return _trained(record, str(model["trainingJob"]), table, store, jobs)
    return _volume(record, model["volume"], table, project, store)


def catalog_entry_of(uri: str, table: ModelTable) -> ModelEntry | None:
    """The catalog entry that pins this revision, if any."""
    return next((entry for entry in table.entries.values() if entry.uri == uri), None)


def _catalog(entry: ModelEntry) -> Served:
    base = ModelArtifact(uri=entry.uri) if entry.uri else ModelArtifact(volume=_revision(*entry.volume or ("", 0)))
    where = f"Volume {entry.volume[0]} revision {entry.volume[1]}" if entry.volume else entry.id
    return Served(
        model_id=entry.id,
        served_name=entry.id,
        base=base,
        operations=entry.operations,
        context=entry.context,
        max_output=entry.max_output,
        source=entry.uri or where,
        gpu=entry.gpu,
    )


def _base(uri: str, table: ModelTable, base: ModelArtifact, *, served_name: str, source: str) -> Served:
    entry = catalog_entry_of(uri, table)
    return Served(
        model_id=entry.id if entry else _repo(uri),
        served_name=served_name,
        base=base,
        operations=entry.operations if entry else OPERATIONS,
        context=entry.context if entry else None,
        max_output=entry.max_output if entry else None,
        source=source,
        gpu=entry.gpu if entry else None,
    )


def _trained(record: ResourceRecord, job: str, table: ModelTable, store: StateStore, jobs: Executor) -> Served | NotYet:
    key = ResourceKey("TrainingJob", record.key.project, job)
    trained = store.get(key)
    if trained is None:
        return NotYet(Reason.TRAINING_JOB_NOT_SUCCEEDED, f"TrainingJob/{job} does not exist (yet)")
    phase = trained.status.get("phase")
    if phase != Phase.SUCCEEDED:
        return NotYet(Reason.TRAINING_JOB_NOT_SUCCEEDED, f"TrainingJob/{job} is {phase or Phase.PENDING}")
    names = {entry.get("name") for entry in trained.status.get("outputs") or [] if isinstance(entry, Mapping)}
    if "adapter/adapter_config.json" not in names:
        raise ConfigError(f"spec.model.trainingJob: TrainingJob/{job} has no adapter/ in its outputs (a full model?)")
    uri = _base_of(_provenance(jobs, record.key.project, job), f"spec.model.trainingJob: TrainingJob/{job}")
    adapter = Adapter(name=job, job=JobOutput(project=record.key.project, name=job, path="adapter"))
    served = _base(uri, table, ModelArtifact(uri=uri), served_name=job, source=f"TrainingJob/{job} over {uri}")
    return Served(**{**served.__dict__, "adapters": (adapter,)})


def _volume(
    record: ResourceRecord, volume: Mapping[str, Any], table: ModelTable, project: Project, store: StateStore
) -> Served | NotYet:
    name = str(volume["name"])
    stored = store.get(ResourceKey("Volume", record.key.project, name))
    if stored is None or stored.status.get("phase") != Phase.READY:
        return NotYet(Reason.VOLUME_NOT_READY, f"Volume {name} is not Ready")
    revision = int(volume.get("revision") or stored.status.get("revision") or 0)
    where = f"spec.model.volume: Volume {name} revision {revision}"
    try:
        resolved = volume_models.resolve(project, record.key.project, name, revision)
    except volume_models.UnusableModelError as exc:
        raise ConfigError(f"spec.model.volume: {exc.message}", hint=exc.hint) from None
    if resolved is None:
        raise ConfigError(f"spec.model.volume: Volume {name} has no revision {revision}")
    if not resolved.adapters:
        artifact = ModelArtifact(volume=_revision(name, revision))
        return Served(model_id=f"volume/{name}", served_name=f"volume/{name}", base=artifact, source=where)
    if resolved.base_uri is None or len(resolved.adapters) > 1:
        raise ConfigError(
            f"{where} holds a LoRA adapter trained over {resolved.base_name} with "
            f"{len(resolved.adapters) - 1} earlier adapter(s) merged in: an endpoint serves one adapter over a pinned "
            "base model; export a full model to serve it"
        )
    uri = resolved.base_uri
    adapter = Adapter(name=name, volume=_revision(name, revision), path=resolved.adapters[0].path)
    served = _base(uri, table, ModelArtifact(uri=uri), served_name=name, source=f"{where} over {uri}")
    return Served(**{**served.__dict__, "adapters": (adapter,)})


def _provenance(jobs: Executor, project: str, job: str) -> dict[str, Any]:
    try:
        with jobs.open_output(project, job, "provenance.json") as handle:
            return _json(handle.read(), f"TrainingJob/{job} outputs/provenance.json")
    except NodusError as exc:
        raise ConfigError(f"spec.model.trainingJob: {exc.message}") from None


def _base_of(provenance: Mapping[str, Any], where: str) -> str:
    model = provenance.get("model")
    revision = model.get("revision") if isinstance(model, Mapping) else None
    if not isinstance(revision, str) or not revision.startswith("hf://"):
        raise ConfigError(f"{where}: its provenance.json names no pinned base model (model.revision)")
    return revision


def _json(data: bytes, where: str) -> dict[str, Any]:
    try:
        document = json.loads(data)
    except ValueError as exc:
        raise ConfigError(f"{where} is not JSON ({exc})") from None
    if not isinstance(document, dict):
        raise ConfigError(f"{where} is not a JSON object")
    return document


def _repo(uri: str) -> str:
    return uri.removeprefix("hf://").partition("@")[0]


def _revision(name: str, revision: int) -> VolumeRevision:
    return VolumeRevision(name=name, revision=revision)
