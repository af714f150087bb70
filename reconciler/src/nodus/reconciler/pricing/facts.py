"""What the estimator needs to know beyond the documents, gathered from this host and the state store.

Who calls it: `nodus plan` (through `nodus.reconciler.pricing.costs`) and `nodus apply --dry-run` (through
`nodus.reconciler.dry_run`, which `nodus run --dry-run` shares). One `Context` per command holds the time, the price
table, the project and the store's records; `estimate_job` finds a job's runtime and Environment (the plan's
documents first, then the store), gathers its `Facts` and runs the pure estimator. It only reads: model folders
(imported, or in the local Hugging Face cache, for the parameter count), nodus.lock (split sizes) and the records it
was given."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path

from nodus.builder.lockfile import Lock
from nodus.reconciler import volume_models
from nodus.reconciler.model_cache import imported, model_folder, snapshot
from nodus.reconciler.pricing import model_size
from nodus.reconciler.pricing.estimate import Estimate, Facts, RunningJob, estimate_plain_job, estimate_trainingjob
from nodus.reconciler.pricing.model_size import ModelSize
from nodus.reconciler.pricing.prices import PriceTable
from nodus.reconciler.project import Project
from nodus.reconciler.references import environment_ref, runtime_key
from nodus.reconciler.state.records import JSONObject, ResourceKey, ResourceRecord
from nodus.specs.status_names import Phase

RUNNING_PHASES = frozenset({Phase.RUNNING})


@dataclass(frozen=True)
class Context:
    """What every estimate of one command shares."""

    now: datetime
    prices: PriceTable
    project: Project | None = None
    """None in the golden tests: nothing is read from disk, `cached_models` says what is imported."""
    records: tuple[ResourceRecord, ...] = ()
    cached_models: frozenset[str] | None = None
    """Model URIs taken as imported; None: ask the project's model folders."""
    _by_key: dict[ResourceKey, ResourceRecord] = field(default_factory=dict, compare=False, repr=False)

    def __post_init__(self) -> None:
        self._by_key.update({record.key: record for record in self.records})

    def record(self, key: ResourceKey) -> ResourceRecord | None:
        return self._by_key.get(key)


def estimate_job(
    job: JSONObject,
    context: Context,
    documents: Mapping[ResourceKey, JSONObject] | None = None,
    *,
    key: ResourceKey | None = None,
    parameters: JSONObject | None = None,
) -> Estimate:
    """The estimate of a TrainingJob document; its runtime and Environment come from `documents` (what the plan
    or the files hold) before the store. `key`: the job's own key, left out of the running jobs."""
    runtime = document(runtime_key(job), context, documents)
    facts = facts_for(job, context, documents, key=key)
    return estimate_trainingjob(job, runtime, facts, context.prices, parameters)


def estimate_job_run(job: JSONObject, context: Context, *, key: ResourceKey | None = None) -> Estimate:
    """The estimate of a plain Job document (one `nodus run` compiled, or one of the files): its own resources
    at the table's rates, started after what the local host runs now. `key`: the Job's own, left out of those."""
    facts = Facts(now=context.now, running=tuple(running_jobs(context, exclude=key)))
    return estimate_plain_job(job, facts, context.prices)


def document(
    key: ResourceKey, context: Context, documents: Mapping[ResourceKey, JSONObject] | None = None
) -> JSONObject | None:
    if documents is not None and key in documents:
        return documents[key]
    record = context.record(key)
    return None if record is None else record.spec


def facts_for(
    job: JSONObject,
    context: Context,
    documents: Mapping[ResourceKey, JSONObject] | None = None,
    *,
    key: ResourceKey | None = None,
) -> Facts:
    model = _model(job, context, documents)
    uri = str(model.get("uri") or "")
    return Facts(
        now=context.now,
        model_size=size_of(job, model, context) or _producer_size(job, model, context, documents),
        model_cached=not uri or _imported(uri, context),
        held_out_available=_held_out_available(job, context, documents),
        running=tuple(running_jobs(context, exclude=key)),
        host_timings=tuple(host_timings(job, context)),
    )


def host_timings(job: JSONObject, context: Context) -> list[JSONObject]:
    """`status.timing` of every finished TrainingJob of `job`'s runtime in the store (the estimator picks the
    ones of the same shape)."""
    runtime = (job.get("spec") or {}).get("runtime")
    found = []
    for record in context.records:
        timing = record.status.get("timing")
        if (
            record.key.kind == "TrainingJob"
            and isinstance(timing, dict)
            and record.spec["spec"].get("runtime") == runtime
        ):
            found.append(timing)
    return found


def _model(job: JSONObject, context: Context, documents: Mapping[ResourceKey, JSONObject] | None) -> JSONObject:
    model = (job.get("spec") or {}).get("model")
    if model:
        return dict(model)
    runtime = document(runtime_key(job), context, documents) or {}
    return dict((runtime.get("spec") or {}).get("defaultModel") or {})


def size_of(job: JSONObject, model: JSONObject, context: Context) -> ModelSize | None:
    """The parameter count: the job's annotation, the model's files on this host, else its name."""
    annotated = model_size.from_annotation(dict((job.get("metadata") or {}).get("annotations") or {}))
    if annotated is not None:
        return annotated
    for folder in _model_folders(job, model, context):
        found = model_size.from_folder(folder)
        if found is not None:
            return found
    uri = model.get("uri")
    return model_size.from_name(str(uri)) if uri else None


def _producer_size(
    job: JSONObject,
    model: JSONObject,
    context: Context,
    documents: Mapping[ResourceKey, JSONObject] | None,
    seen: frozenset[str] = frozenset(),
) -> ModelSize | None:
    """For a model from a Volume revision not exported yet: the size of the model the TrainingJob of the same plan
    that exports to that Volume (`spec.exportTo`) trains, full or LoRA (an adapter resolves to that base); else None."""
    volume = model.get("volume")
    if not isinstance(volume, Mapping) or documents is None or str(volume.get("name")) in seen:
        return None
    name = str(volume.get("name"))
    project = str((job.get("metadata") or {}).get("project") or "default")
    for key, producer in documents.items():
        export = (producer.get("spec") or {}).get("exportTo")
        if key.kind != "TrainingJob" or key.project != project or not isinstance(export, Mapping):
            continue
        if str(export.get("volume")) == name:
            started = _model(producer, context, documents)
            found = size_of(producer, started, context)
            return found or _producer_size(producer, started, context, documents, seen | {name})
    return None


def _model_folders(job: JSONObject, model: JSONObject, context: Context) -> list[Path]:
    if context.project is None:
        return []
    uri = model.get("uri")
    if uri:
        found = [model_folder(context.project, str(uri))]
        cached = snapshot(str(uri))
        return [*found, *([cached] if cached is not None else [])]
    volume = model.get("volume")
    if volume:
        project = str((job.get("metadata") or {}).get("project") or "default")
        record = context.record(ResourceKey("Volume", project, str(volume.get("name"))))
        revision = int(volume.get("revision") or (record.status if record else {}).get("revision") or 0)
        if not revision:
            return []
        try:
            # The revision named (else the latest): a full model's folder, or the base model of a LoRA adapter.
            resolved = volume_models.resolve(context.project, project, str(volume.get("name")), revision)
        except volume_models.UnusableModelError:
            return []  # admission refuses it, naming why
        return [resolved.base_folder] if resolved is not None else []
    return []


def _imported(uri: str, context: Context) -> bool:
    if context.cached_models is not None:
        return uri in context.cached_models
    if context.project is None:
        return False
    return imported(context.project, uri)


def _held_out_available(
    job: JSONObject, context: Context, documents: Mapping[ResourceKey, JSONObject] | None
) -> int | None:
    """The Environment version's test split size: from its record's status, else nodus.lock."""
    reference = environment_ref(job)
    if reference is None:
        return None
    key, version = reference
    record = context.record(key)
    if record is not None and record.spec.get("spec", {}).get("version") == version:
        splits = record.status.get("splits") or {}
        if isinstance(splits.get("test"), int):
            return int(splits["test"])
    if context.project is None:
        return None
    try:
        entry = Lock.load(context.project.lock_path).get(key.name, version)
    except Exception:  # a broken lock file is `nodus apply`'s to report; the estimate goes on without it
        return None
    test = entry.splits.get("test") if entry is not None else None
    return int(test) if isinstance(test, int) else None


def running_jobs(context: Context, *, exclude: ResourceKey | None = None) -> list[RunningJob]:
    """The jobs the local host runs now, with their estimated time left (None when not known)."""
    found = []
    for record in context.records:
        if record.key.kind not in ("TrainingJob", "Job") or record.key == exclude:
            continue
        if record.status.get("phase") not in RUNNING_PHASES:
            continue
        found.append(RunningJob(f"{record.key.kind}/{record.key.name}", _remaining(record, context)))
    return found


def _remaining(record: ResourceRecord, context: Context) -> float | None:
    """A running TrainingJob's estimate times the share of its steps left (a Job's end is not estimated)."""
    if record.key.kind != "TrainingJob":
        return None
    runtime = document(runtime_key(record.spec), context)
    facts = Facts(now=context.now, model_size=size_of(record.spec, _model(record.spec, context, None), context))
    duration = estimate_trainingjob(record.spec, runtime, facts, context.prices).duration_seconds
    if duration is None:
        return None
    step, total = record.status.get("step"), record.status.get("totalSteps")
    if isinstance(step, int) and isinstance(total, int) and total > 0:
        return duration * max(0.0, 1 - step / total)
    return duration
