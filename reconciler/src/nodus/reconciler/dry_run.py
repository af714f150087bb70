"""`nodus apply -f FILE --dry-run`: the workload each TrainingJob (and each Job) would launch, priced, with what
blocks it.

Who calls it: the `nodus apply` command with `--dry-run` (`nodus.cli.plan_apply`), and `nodus run --dry-run`
(`nodus.cli.run`, with the one Job its flags compile into: `inputs_of_job`), so both print the same document. It
writes nothing and takes no lease: the files are read, the state store only read (and not opened at all when the
project has none yet), and the workload comes from the same `compile_workload` the TrainingJob controller launches
with. It sits above pricing, apply and the controllers (it asks all three), not inside `pricing`, which must stay
pure.

What it reads, as `nodus apply -f FILE` would: the resources of the files named (`-f` may repeat, and take
folders), the managed runtimes (`runtime: nodus/grpo-lora`) and catalog Environments (`nodus/graph-coloring@1.0.0`)
they name, then the state store. Nothing else of the repository: `-f FILE` means that file (as kubectl's does), so
a runtime or Environment of another file counts once it is applied, for the dry run and apply alike.

Each TrainingJob of the files gives one `kind: Job` document: `spec` (owner, command, image, launcher, env,
resources and the cap: the workload in the Job kind's fields, so `nodus validate` reads it back), and `status`:
`workload`, the whole workload an executor would be given (`nodus.reconciler.executors.workload`: the Environment
by image and manifest digests, the model by URI or Volume revision, params.json's content, the host's price),
`platformEnv`, the names of the variables nodus sets at run time, the action apply would take, `estimate`
(`nodus.reconciler.pricing.estimate`) and
`blockingReasons` (admission refusals, the same `nodus plan` and apply make, with the placement apply would have:
a GPU request this host cannot meet, a cap below the first hold, `controllers/placement.py`; an Environment not
built or not Ready, a model not in the local cache), each `{reason, message}`; and `notes`, what apply will do that
does not block it (a catalog Environment not built yet, which apply builds from the catalog).

Each Job of the files gives its own document back: its spec as apply would store it, and `status` with the action,
`topology` (the gang's resolved shape, `nodus.specs.topology`, when it has a `distributed` block), `estimate`
(`pricing.estimate_plain_job`: every member, `gangHoldUSD` and `assemblyBoundUSD` for a gang) and
`blockingReasons` (admission refusals, a cap below the first hold).
"""

from __future__ import annotations

import copy
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import Any, cast

from nodus.builder.lockfile import Lock
from nodus.builder.oci import tags_of
from nodus.errors import ConfigError, SpecError
from nodus.reconciler.apply import operations_of, refusals
from nodus.reconciler.controllers.admission import Admission, admit, suggest
from nodus.reconciler.controllers.placement import placement_of
from nodus.reconciler.controllers.trainingjob import compile_workload, package_source_digest, volume_model_artifact
from nodus.reconciler.executors.workload import ModelArtifact, VolumeRevision
from nodus.reconciler.model_cache import imported, not_cached, snapshot
from nodus.reconciler.planning.desired import Desired, desired_from
from nodus.reconciler.planning.diff import Action, plan
from nodus.reconciler.planning.managed import with_managed
from nodus.reconciler.planning.managed_environments import is_managed_source
from nodus.reconciler.planning.render import short_ref
from nodus.reconciler.pricing.facts import Context, estimate_job, estimate_job_run
from nodus.reconciler.pricing.prices import PriceTable, launch_price
from nodus.reconciler.project import Project
from nodus.reconciler.references import environment_ref, merge, produced, runtime_key
from nodus.reconciler.state.records import JSONObject, ResourceKey, ResourceRecord, StateStore, spec_hash
from nodus.reconciler.volume_models import UnusableModelError
from nodus.specs import topology
from nodus.specs.parse import DRY_RUN_ANNOTATION, parse_resources
from nodus.specs.status_names import Phase, Reason

PLATFORM_ENV = (
    "NODUS_ATTEMPT_API",
    "NODUS_INPUT_PARAMS",
    "NODUS_INPUT_MODEL",
    "NODUS_STATE_DIR",
    "NODUS_OUTPUT_DIR",
    "NODUS_JOB_NAME",
    "NODUS_PROJECT",
    "NODUS_ATTEMPT",
)
"""What the supervisor sets for the trainer when it runs (values known only then)."""
DRY_RUN_KINDS = ("TrainingJob", "Job")
"""The kinds a dry run prints a document for."""


@dataclass(frozen=True)
class Inputs:
    """Everything a dry run looks at, gathered once."""

    files: list[Desired]
    """The resources of the files named."""
    desired: list[Desired]
    """The files' resources, then the managed runtimes and catalog Environments they name."""
    records: list[ResourceRecord]
    notes: tuple[str, ...] = ()
    """What reading the files left out (a saved dry run in a folder named), for the caller to say on stderr."""


def read_inputs(paths: Sequence[Path], records: list[ResourceRecord]) -> Inputs:
    """The files' resources (errors raised whole) and what nodus manages that they name; nothing else of the
    repository is read (`-f FILE` means that file)."""
    result = parse_resources(list(paths))
    result.raise_for_errors()
    resources, notes, refused = result.without_dry_runs(path for path in paths if path.is_file())
    if refused:
        raise SpecError([str(problem) for problem in refused], hint="nodus apply -f the TrainingJob's own file")
    files = desired_from(resources)
    if not any(item.key.kind in DRY_RUN_KINDS for item in files):
        names = ", ".join(str(path) for path in paths)
        raise ConfigError(
            f"{names}: no TrainingJob or Job to dry-run",
            hint="a dry run prices TrainingJobs and Jobs; `nodus plan PATH` shows the rest",
        )
    said = tuple(dict.fromkeys(str(problem) for problem in notes))
    return Inputs(files, with_managed(files), records, said)


def inputs_of_job(job: Desired, records: list[ResourceRecord]) -> Inputs:
    """A dry run of one Job that no file holds (`nodus run`): it names no runtime, Environment or model, so
    nothing else of the project is read."""
    return Inputs([job], [job], records)


def dry_run(inputs: Inputs, *, project: Project, prices: PriceTable, now: datetime) -> list[JSONObject]:
    """One `kind: Job` document per TrainingJob of the files, in file order."""
    made = plan(inputs.desired, inputs.records)
    actions = {action.key: action for action in made.actions}
    documents = {item.key: item.document for item in inputs.desired}
    sources = {item.key: item.source for item in inputs.desired}
    context = Context(now=now, prices=prices, project=project, records=tuple(inputs.records))
    refused: dict[ResourceKey, list[JSONObject]] = {}
    # `refusals` reads only get() and list(): the records already read stand in for the store (nothing is opened).
    # The admission apply runs, with the placement apply would have: what blocks here refuses apply alike.
    placement = placement_of(project, prices, now)
    store = cast("StateStore", _Records(inputs.records))
    for refusal in refusals(operations_of(made.actions), store, project.root, placement=placement):
        reason = refusal.reason or Reason.MAX_COST_LOWERED
        refused.setdefault(refusal.operation.key, []).append({"reason": reason, "message": refusal.message})
    out = []
    for item in inputs.files:
        blocking = refused.get(item.key, [])
        if item.key.kind == "TrainingJob":
            out.append(_job_document(item, actions[item.key], documents, sources, context, blocking, prices=prices))
        elif item.key.kind == "Job":
            out.append(_plain_job_document(item, actions[item.key], context, blocking))
        else:
            continue
        _note_drift(out[-1], actions[item.key])
    for document in out:  # a saved dry run is never applied: parse leaves a marked document out, with a note
        annotations = document["metadata"].setdefault("annotations", {})
        annotations[DRY_RUN_ANNOTATION] = "true"
    return out


def _note_drift(document: JSONObject, action: Action) -> None:
    """A cap the file would lower below its live value stays live (`planning.diff`): a note, as plan warns of it."""
    source = (action.source or "").rsplit(":", 1)[0]
    notes = [f"warning: {drift.detail(source)}" for drift in action.drift]
    if notes:
        document["status"]["notes"] = [*document["status"].get("notes", []), *notes]


def _plain_job_document(item: Desired, action: Action, context: Context, blocking: list[JSONObject]) -> JSONObject:
    """A Job of the files (or of `nodus run`) as apply would store it, priced: every member of a gang."""
    job = item.document
    estimate = estimate_job_run(job, context, key=item.key)
    spec = job["spec"]
    shape = {"topology": topology.of_spec(spec).to_dict()} if spec.get("distributed") else {}
    return {
        "apiVersion": job["apiVersion"],
        "kind": "Job",
        "metadata": copy.deepcopy(job["metadata"]),
        "spec": copy.deepcopy(spec),
        "status": {
            "dryRun": True,
            "action": action.type,
            "source": item.source,
            **shape,
            "estimate": estimate.to_dict(),
            "blockingReasons": blocking,
        },
    }


def _job_document(
    item: Desired,
    action: Action,
    documents: Mapping[ResourceKey, JSONObject],
    sources: Mapping[ResourceKey, str],
    context: Context,
    blocking: list[JSONObject],
    *,
    prices: PriceTable,
) -> JSONObject:
    job = item.document
    runtime = _document(runtime_key(job), documents, context)
    known = {
        key: document
        for key, document in [*((r.key, r.spec) for r in context.records), *documents.items()]
        if key.kind in ("Environment", "Volume")
    }
    verdict = admit(job, runtime, known)
    if not verdict.admitted and not any(entry["reason"] == verdict.reason for entry in blocking):
        blocking.insert(0, {"reason": verdict.reason, "message": verdict.message})
    if verdict.reason == "InvalidParameters" and runtime is not None:
        # Admission stops at the first bad parameter; a dry run lists them all, so one run shows every fix.
        blocking[:] = [entry for entry in blocking if entry["reason"] != Reason.INVALID_PARAMETERS]
        blocking[:0] = _parameter_blocking(job, runtime)
    estimate = estimate_job(
        job, context, documents, key=item.key, parameters=verdict.parameters if verdict.admitted else None
    )
    # What else blocks it is found whether or not it is admitted: a typo does not hide an unbuilt Environment.
    notes: list[str] = []
    if verdict.reason not in ("EnvironmentNotFound", "EnvironmentVersionNotFound"):
        unbuilt = _environment_blocking(job, documents, context)
        managed = _managed_environment_source(job, sources)
        if unbuilt and managed is not None:
            # A catalog Environment is built by apply itself (no --build): not built yet is not a blocker.
            notes.append(f"{unbuilt[0]['message'].split(': `', 1)[0]}: nodus apply builds it from {managed}")
        else:
            blocking += unbuilt
    # A Volume a job of the same plan exports into is not a blocker: apply starts this job once that export lands.
    producers = [waited for waited in action.waits_for if waited in documents and produced(documents[waited])]
    made_here = {key for waited in producers for key in produced(documents[waited])}
    if producers:
        waited_for = ", ".join(short_ref(key, item.key.project) for key in producers)
        notes.append(f"waits for {waited_for}: apply starts it once their exports are committed (WaitingFor)")
    model = _model_of(job, runtime)
    if _model_volume(model, item.key.project) not in made_here:
        blocking += _model_blocking(model, job, context)
    compiled, details = (
        _compiled(item, action, verdict, runtime, documents, sources, context, prices)
        if verdict.admitted
        else (_uncompiled(runtime), {})
    )
    metadata = {key: value for key, value in job["metadata"].items() if key in ("name", "project", "labels") and value}
    spec: JSONObject = {"owner": f"TrainingJob/{item.key.name}", **compiled}
    if estimate.resources is not None:
        spec["resources"] = copy.deepcopy(estimate.resources)  # a copy: YAML would write the same object as an alias
    return {
        "apiVersion": "nodus.dev/v1beta1",
        "kind": "Job",
        "metadata": metadata,
        "spec": spec,
        "status": {
            "dryRun": True,
            "action": action.type,
            "source": item.source,
            **details,
            "estimate": estimate.to_dict(),
            "blockingReasons": blocking,
            **({"notes": notes} if notes else {}),
        },
    }


def _managed_environment_source(job: JSONObject, sources: Mapping[ResourceKey, str]) -> str | None:
    """The `managed:catalog/...` source of the catalog Environment the job names, or None (the user's own)."""
    reference = environment_ref(job)
    source = sources.get(reference[0]) if reference is not None else None
    return source if is_managed_source(source) else None


def _uncompiled(runtime: JSONObject | None) -> JSONObject:
    """The spec of a job that is not admitted: nothing compiles, but the runtime's command (when there is a
    runtime) keeps the document a Job `nodus validate` accepts."""
    command = ((runtime or {}).get("spec") or {}).get("command")
    return {"command": list(command)} if command else {}


def _model_of(job: JSONObject, runtime: JSONObject | None) -> JSONObject:
    """The model the job would run (its own, else the runtime's default), as admission picks it."""
    model = job["spec"].get("model") or ((runtime or {}).get("spec") or {}).get("defaultModel")
    return dict(model) if isinstance(model, dict) else {}


def _parameter_blocking(job: JSONObject, runtime: JSONObject) -> list[JSONObject]:
    """Every parameter the runtime's schema refuses, one entry each (`spec.parameters.<path>: what is wrong`)."""
    import jsonschema

    runtime_spec = runtime.get("spec") or {}
    schema = runtime_spec.get("parameterSchema") or {"type": "object"}
    parameters = merge(runtime_spec.get("defaults") or {}, job["spec"].get("parameters") or {})
    found: list[JSONObject] = []
    for error in jsonschema.Draft202012Validator(schema).iter_errors(parameters):
        path = ".".join(["spec.parameters", *(str(part) for part in error.absolute_path)])
        if error.validator == "additionalProperties" and isinstance(error.instance, Mapping):
            known = [str(name) for name in error.schema.get("properties", {})]
            for extra in sorted(set(error.instance) - set(known)):
                close = suggest(str(extra), known)
                why = f"did you mean {close!r}?" if close else "(the runtime's schema does not allow it)"
                found.append(_entry("InvalidParameters", f"{path}.{extra}: unknown parameter; {why}"))
        else:
            found.append(_entry("InvalidParameters", f"{path}: {error.message}"))
    return sorted(found, key=lambda entry: entry["message"])


def _entry(reason: str, message: str) -> JSONObject:
    return {"reason": reason, "message": message}


def _compiled(
    item: Desired,
    action: Action,
    verdict: Admission,
    runtime: JSONObject | None,
    documents: Mapping[ResourceKey, JSONObject],
    sources: Mapping[ResourceKey, str],
    context: Context,
    prices: PriceTable,
) -> tuple[JSONObject, JSONObject]:
    """The workload `compile_workload` makes, as the controller would launch it: in the Job kind's fields (the
    spec, which `nodus validate` reads back), and whole (`status.workload`), with the names of the variables the
    supervisor sets at run time (`status.platformEnv`)."""
    assert runtime is not None  # admitted
    assert verdict.runtime is not None
    stored = context.record(item.key)
    generation = 1 if stored is None else stored.generation + (1 if action.type == "replace" else 0)
    record = ResourceRecord(item.key, item.document, item.spec_hash, generation=generation)
    runtime_record = ResourceRecord(verdict.runtime, runtime, spec_hash(runtime))
    environment = None
    if verdict.environment is not None:
        env_document = _document(verdict.environment, documents, context)
        found = context.record(verdict.environment)
        status = dict(found.status) if found is not None and found.spec == env_document else {}
        if verdict.environment in sources:
            status["source"] = sources[verdict.environment]  # where its package folder is, for process-mode graders
        if env_document is not None:
            environment = ResourceRecord(verdict.environment, env_document, spec_hash(env_document), status=status)
    source = None
    if environment is not None and context.project is not None:
        source = package_source_digest(context.project, environment)
    workload = compile_workload(
        record,
        verdict,
        runtime_record,
        environment,
        price=launch_price(prices),
        model=_model_artifact(verdict, item.key, context),
        source_digest=source,
    )
    runtime_spec = runtime.get("spec") or {}
    spec: JSONObject = {"command": list(workload.command)}
    if runtime_spec.get("image"):
        spec["image"] = runtime_spec["image"]
    spec["launcher"] = runtime_spec.get("launcher", "Plain")
    spec["env"] = dict(workload.env)
    if workload.max_cost_usd is not None:
        spec["maxCostUSD"] = workload.max_cost_usd
    details: JSONObject = {
        "workload": workload.model_dump(mode="json", by_alias=True),
        "platformEnv": [name for name in PLATFORM_ENV if name != "NODUS_INPUT_MODEL" or verdict.model]
        + (["NODUS_INPUT_ADAPTERS"] if workload.model is not None and workload.model.adapters else []),
    }
    return spec, details


def _model_artifact(verdict: Admission, key: ResourceKey, context: Context) -> ModelArtifact | None:
    """The model as the workload would name it: its pinned URI, or its Volume's revision once the Volume is Ready
    in the store (a model not there yet is a blocking reason, `_model_blocking`, not part of the workload)."""
    model = verdict.model or {}
    if model.get("uri"):
        return ModelArtifact(uri=str(model["uri"]))
    volume = model.get("volume")
    if volume:
        found = context.record(ResourceKey("Volume", key.project, str(volume["name"])))
        if found is not None and found.status.get("phase") == Phase.READY:
            # The revision the job pins (the one its producer will export), else the latest, as the controller does.
            revision = VolumeRevision(
                name=str(volume["name"]), revision=int(volume.get("revision") or found.status.get("revision") or 0)
            )
            if context.project is None:
                return ModelArtifact(volume=revision)
            try:  # an exported adapter: its base and the adapters, as the controller names them
                return volume_model_artifact(context.project, key.project, revision)
            except UnusableModelError:
                return None  # admission refuses it (a blocking reason naming why)
    return None


def _environment_blocking(
    job: JSONObject, documents: Mapping[ResourceKey, JSONObject], context: Context
) -> list[JSONObject]:
    """An Environment that is not Ready in the store, or not built (nodus.lock and the image store)."""
    reference = environment_ref(job)
    if reference is None or context.project is None:
        return []
    key, version = reference
    record = context.record(key)
    stored_same = record is not None and record.spec.get("spec", {}).get("version") == version
    if stored_same and record is not None and record.status.get("phase") == Phase.READY:
        return []
    entry = Lock.load(context.project.lock_path).get(key.name, version, key.project)
    if entry is not None and tags_of(context.project.files.images, entry.image):
        return []
    why = "not built" if entry is None else f"built, but image {entry.image} is not in the local store"
    return [
        {
            "reason": Reason.ENVIRONMENT_NOT_READY,
            "message": f"spec.environment.name: Environment {key.name}@{version} is {why}: "
            "`nodus apply --build` (or nodus-build) builds it",
        }
    ]


def _model_blocking(model: JSONObject, job: JSONObject, context: Context) -> list[JSONObject]:
    """A model revision neither imported nor in the local Hugging Face cache (nodus never downloads weights)."""
    if context.project is None:
        return []
    if model.get("uri"):
        uri = str(model["uri"])
        if "@" not in uri or imported(context.project, uri) or snapshot(uri) is not None:
            return []  # an unpinned uri is admission's ModelNotPinned
        where = "spec.model.uri" if job["spec"].get("model") else "the runtime's spec.defaultModel.uri"
        return [{"reason": Reason.MODEL_NOT_CACHED, "message": f"{where}: {not_cached(uri)['message']}"}]
    volume = model.get("volume")
    if volume:
        project = job["metadata"].get("project") or "default"
        record = context.record(ResourceKey("Volume", str(project), str(volume["name"])))
        if record is None or record.status.get("phase") != Phase.READY:
            return [
                {
                    "reason": Reason.VOLUME_NOT_READY,
                    "message": f"spec.model.volume: Volume {volume['name']} is not Ready",
                }
            ]
    return []


def _model_volume(model: JSONObject, project: str) -> ResourceKey | None:
    """The Volume of project `project` a job's `model` is read from (None for a model by URI)."""
    volume = model.get("volume")
    if not isinstance(volume, dict):
        return None
    return ResourceKey("Volume", project, str(volume.get("name")))


def _document(key: ResourceKey, documents: Mapping[ResourceKey, JSONObject], context: Context) -> JSONObject | None:
    if key in documents:
        return documents[key]
    record = context.record(key)
    return None if record is None else record.spec


class _Records:
    """The read-only part of a StateStore that `refusals` uses, over records already read."""

    def __init__(self, records: list[ResourceRecord]) -> None:
        self._records = {record.key: record for record in records}

    def get(self, key: ResourceKey) -> ResourceRecord | None:
        return self._records.get(key)

    def list(self, kind: str | None = None, project: str | None = None) -> list[ResourceRecord]:
        return [
            record
            for record in self._records.values()
            if (kind is None or record.key.kind == kind) and (project is None or record.key.project == project)
        ]


def blocking_lines(documents: list[JSONObject]) -> list[str]:
    """Every blocking reason of the documents, one line each: `file:line: TrainingJob/NAME: Reason: field: ...`."""
    found = []
    for document in documents:
        status = document["status"]
        where = f"{status['source']}: " if status.get("source") else ""
        owner = _named(document)
        found += [f"{where}{owner}: {entry['reason']}: {entry['message']}" for entry in status["blockingReasons"]]
    return found


def note_lines(documents: list[JSONObject]) -> list[str]:
    """Every note of the documents (what apply will do that blocks nothing), one line each, as blocking lines are."""
    found = []
    for document in documents:
        status = document["status"]
        where = f"{status['source']}: " if status.get("source") else ""
        found += [f"{where}{_named(document)}: {note}" for note in status.get("notes", [])]
    return found


def _named(document: JSONObject) -> str:
    """What a line is about: the TrainingJob a compiled Job comes from, else the Job itself."""
    return str(document["spec"].get("owner") or f"Job/{document['metadata']['name']}")


def as_json_output(documents: list[JSONObject]) -> Any:
    """One document as itself, several as a `kind: List` (as kubectl prints them)."""
    if len(documents) == 1:
        return documents[0]
    return {"apiVersion": "v1", "kind": "List", "items": documents}
