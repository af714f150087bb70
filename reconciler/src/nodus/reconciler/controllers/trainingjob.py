"""The TrainingJob controller: admit, compile to a job, launch it once, and follow it.

Who calls it: `nodus apply` (after the Environments and runtimes of the same apply are written and Ready)
and `nodus.reconciler.refresh`, which copies the running job's status back into the TrainingJob record.

A TrainingJob compiles into a `Workload` (`nodus.reconciler.executors.workload`), which names artifacts by
content and no host path (the executor resolves them on its own host at launch): the runtime's command and env
as written, the merged and schema-checked parameters (written to `NODUS_INPUT_PARAMS/params.json` as the seeds'
"Bring your own runtime" table describes), the Environment to serve tasks and gradings from through the attempt
API (by image digest, manifest digests and package source digest), the model (by pinned URI or Volume revision),
the resources, the host's price and the job's cap. params.json also says what ran: the runtime (name, digest of
its document, whether it is managed, its image), the Environment's version and image, and the pinned model, which
the trainers copy into provenance.json. Launches are recorded under `<key>/gen<generation>/attempt1` before the
executor is asked, and the executor starts nothing twice, so repeated or interrupted applies launch once.

The price: when a generation launches, the host's price in force then (`$NODUS_LOCAL_PRICE_PER_HOUR`, else the
price table's `cpu.local`, see `nodus.reconciler.pricing.prices`) goes into the job's spec, which the executor
accounts with, and into `status.price` (`{version, perHourUSD, source}`). Both stay as they are for that
generation: a later change of the table never re-prices a run; only a replacement (a new generation) is priced
again.
"""

from __future__ import annotations

import os
import time
from decimal import Decimal
from pathlib import Path
from typing import Any

from nodus.builder.lockfile import Lock
from nodus.errors import ConfigError
from nodus.reconciler import volume_models
from nodus.reconciler.controllers import sandbox as sandboxes
from nodus.reconciler.controllers.admission import Admission, admit
from nodus.reconciler.controllers.attempts import attempts_of
from nodus.reconciler.controllers.budgets import InferenceSpend, blocking_budget, budget_status, first_hold
from nodus.reconciler.controllers.evaluation_endpoint import evaluation_endpoint
from nodus.reconciler.controllers.export import exported_status
from nodus.reconciler.controllers.headline import headline
from nodus.reconciler.controllers.producers import missing_volume_status, producer_status
from nodus.reconciler.controllers.run_secrets import run_secrets, tracking_params
from nodus.reconciler.controllers.status import write_status
from nodus.reconciler.controllers.volume import ensure_model
from nodus.reconciler.executors import Executor, choose_executor, wait_for
from nodus.reconciler.executors.workload import (
    AdapterArtifact,
    DataArtifact,
    EnvironmentArtifact,
    GpuResources,
    Intervals,
    ModelArtifact,
    PackageSource,
    Resources,
    VolumeRevision,
    Workload,
    WorkloadKey,
)
from nodus.reconciler.inference.api import budget_spend
from nodus.reconciler.model_cache import imported
from nodus.reconciler.pricing.host_timing import measure, model_identity
from nodus.reconciler.pricing.prices import LOCAL_PRICE_VARIABLE, LaunchPrice, launch_price, load_prices
from nodus.reconciler.project import Project
from nodus.reconciler.references import runtime_key
from nodus.reconciler.state.records import JSONObject, Launch, ResourceKey, ResourceRecord, StateStore, spec_hash
from nodus.specs import topology
from nodus.specs.status_names import Phase, Reason
from nodus.specs.types import parse_duration, parse_quantity

PRICE_VARIABLE = LOCAL_PRICE_VARIABLE
"""US dollars per hour this machine costs (else the price table's `cpu.local`, 0 by default: your own machine);
cost = running time x price."""
INTERVAL_VARIABLE = "NODUS_ACCOUNTING_INTERVAL"
"""Seconds between cost accounting steps of the local executor (default 10)."""
DEFAULT_EVALUATION = {"baseline": True, "final": True, "minComparisonTasks": 16}


def executor(project: Project) -> Executor:
    """The executor the project names in nodus.yaml (`executor: local` by default)."""
    record_wire = os.environ.get("NODUS_RECORD_WIRE") == "1"
    return choose_executor(project.settings().executor_name, project.jobs, record_wire=record_wire, project=project)


KEPT = ("source", "launchGeneration", "price", "export", "sandbox", "data", "model")
"""Status fields the controllers own, carried over when the job's status is copied in (the events watermark is
`nodus.reconciler.controllers.status.write_status`'s, which carries it whoever writes)."""


def launch_generation(record: ResourceRecord) -> int:
    """The generation the job runs: set when the TrainingJob was created or replaced, kept by in-place
    updates (raising a cap changes the spec, not the run)."""
    return int(record.status.get("launchGeneration") or record.generation)


def launch_key(record: ResourceRecord) -> str:
    key = record.key
    return f"{key.kind}/{key.project}/{key.name}/gen{launch_generation(record)}/attempt1"


def reconcile_trainingjob(
    record: ResourceRecord, *, project: Project, store: StateStore
) -> tuple[JSONObject, str | None]:
    """The job's status after this pass, and the launch key if this pass launched it.

    A generation that did not launch in this pass (it waits on a dependency, or was refused) keeps the launch
    generation its record has (an in-place update never becomes a replacement by waiting), and an earlier
    generation still running is stopped: it was replaced, and the status shown is the new generation's, so the
    old run must not go on (and cost) out of sight."""
    status, launched = _reconcile_trainingjob(record, project=project, store=store)
    if launched is None and "launchGeneration" not in status:
        # Any pass that launched nothing (a wait, a refusal, a suspension asked in place) keeps the generation that
        # runs: without it a patched record's generation would be taken for an unlaunched replacement.
        if record.status.get("launchGeneration") is not None:
            status = {**status, "launchGeneration": record.status["launchGeneration"]}
        if status.get("phase") in (Phase.PENDING, Phase.FAILED) and store.launches(record.key):
            stop_superseded(executor(project), record)  # an earlier generation ran; one never launched asks none
    return status, launched


def stop_superseded(jobs: Executor, record: ResourceRecord) -> None:
    """Cancel the executor's run of an earlier generation than the record's, if it still runs (not waited for:
    the launch of the new generation waits, `_stop_replaced`)."""
    project, name = record.key.project, record.key.name
    if not jobs.exists(project, name) or jobs.spec_of(project, name).generation >= launch_generation(record):
        return
    if not jobs.observe(project, name).ended:
        jobs.cancel(project, name)


def _reconcile_trainingjob(
    record: ResourceRecord, *, project: Project, store: StateStore
) -> tuple[JSONObject, str | None]:
    runtime = store.get(runtime_key(record.spec))
    known = {r.key: r.spec for kind in ("Environment", "Volume") for r in store.list(kind)}
    verdict = admit(record.spec, runtime.spec if runtime else None, known)
    if not verdict.admitted:
        return {"phase": Phase.FAILED, "reason": verdict.reason, "message": verdict.message}, None
    environment = store.get(verdict.environment) if verdict.environment else None
    if environment is not None and environment.status.get("phase") != Phase.READY:
        reason = environment.status.get("reason", Reason.NOT_READY)
        return {
            "phase": Phase.PENDING,
            "reason": Reason.ENVIRONMENT_NOT_READY,
            "message": f"Environment {environment.key.name} is not Ready ({reason})",
        }, None
    assert runtime is not None  # admitted
    through, waiting = evaluation_endpoint(record, project=project, store=store)
    if waiting is not None:
        return waiting, None
    model, waiting = (None, None) if through is not None else _model(record, verdict, project=project, store=store)
    if waiting is not None:
        return waiting, None
    teacher, waiting = _teacher(record, project=project, store=store)
    if waiting is not None:
        return waiting, None
    data, waiting = _data(record, project=project, store=store)
    if waiting is not None:
        return waiting, None
    sandbox = sandbox_in_force(record, project, environment)
    if sandbox is not None and sandbox.refused:
        return sandbox.refusal(), None
    jobs = executor(project)
    price = price_in_force(record, project, jobs)
    container = sandbox is None or sandbox.container
    source = package_source_digest(project, environment) if environment is not None else None
    spec = compile_workload(
        record, verdict, runtime, environment, price=price, container=container, model=model, source_digest=source
    ).with_changes(teacher=teacher, data=data)
    if data is not None:
        spec = spec.with_changes(params={**spec.params, "data": data_params(data)})
    try:
        extra = run_secrets(record.spec["spec"], project, f"TrainingJob/{record.key.name}")
    except ConfigError as exc:
        return {"phase": Phase.FAILED, "reason": Reason.LAUNCH_FAILED, "message": exc.message}, None
    tracking = tracking_params(record.spec["spec"])
    if through is not None:
        extra.env.update(through.env)
        extra.secrets.append(through.key)
    spec = spec.with_changes(
        env={**spec.env, **extra.env},
        secrets=tuple(extra.secrets),
        params={**spec.params, **({"tracking": tracking} if tracking else {})},
    )
    if teacher is not None:
        spec = spec.with_changes(params={**spec.params, "teacherRevision": teacher.uri or _volume_name(teacher)})
    refused = gang_refusal(spec.resources, jobs, "spec.resources.nodes") or unschedulable_refusal(spec.resources, jobs)
    if refused is not None:
        return refused, None
    exists = jobs.exists(record.key.project, record.key.name)
    if record.spec["spec"].get("state") == "Suspended":
        if exists:
            jobs.suspend(record.key.project, record.key.name)
            return job_status(jobs, record), None
        return {
            "phase": Phase.SUSPENDED,
            "reason": Reason.SUSPEND_REQUESTED,
            "message": "spec.state is Suspended",
        }, None
    if not exists or jobs.spec_of(record.key.project, record.key.name).generation < spec.generation:
        nodes = spec.resources.nodes if spec.resources is not None else 1
        hold = first_hold(price.per_hour_usd, nodes, spec.max_cost)
        blocking = blocking_budget(record, store, hold, now=time.time(), inference_spend=_inference_spend(store))
        if blocking is not None:
            return budget_status(blocking), None
    _, new = store.record_launch(Launch(launch_key(record), record.key, job=record.key.name))
    if exists and jobs.spec_of(record.key.project, record.key.name).generation < spec.generation:
        _stop_replaced(jobs, record)
    elif exists:
        _follow_cap(jobs, record, spec)
    jobs.launch(spec)
    status = {**job_status(jobs, record), "launchGeneration": launch_generation(record), "price": price.to_status()}
    if data is not None:
        status["data"] = {"volume": data.volume.name, "revision": data.volume.revision, "path": data.path}
    if (named := model_status(model)) is not None:
        status["model"] = named
    if sandbox is not None:
        status["sandbox"] = sandbox.to_status()
    status = exported_status(record, status, jobs, project=project, store=store)
    return status, (launch_key(record) if new else None)


def _inference_spend(store: StateStore) -> InferenceSpend:
    """What the project's endpoints spent under a Budget, from the gateway's ledger in the same store."""

    def spend(project: str, budget: ResourceRecord, now: float) -> Decimal:
        return budget_spend(store, project, budget, now)

    return spend


def sandbox_in_force(
    record: ResourceRecord, project: Project, environment: ResourceRecord | None
) -> sandboxes.Sandbox | None:
    """The graders' sandbox of the generation this pass runs: the one recorded when it launched, else the one the
    project's setting and this host give now (None for a job without an Environment)."""
    if environment is None:
        return None
    launched = record.status.get("launchGeneration") == launch_generation(record)
    kept = sandboxes.from_status(record.status) if launched and record.status.get("phase") != Phase.FAILED else None
    return kept or sandboxes.choose(project.settings().grading.sandbox, environment.status)


def price_in_force(record: ResourceRecord, project: Project, jobs: Executor | None = None) -> LaunchPrice:
    """The price of the generation this pass runs: the one stored when it launched (in status, else in the job
    spec of a run launched before status recorded prices), else the price table's now."""
    kept = record.status.get("price")
    launched = record.status.get("launchGeneration") == launch_generation(record)
    if launched and isinstance(kept, dict) and kept.get("perHourUSD") is not None:
        return LaunchPrice(Decimal(str(kept["perHourUSD"])), str(kept.get("version", "")), str(kept.get("source", "")))
    if jobs is not None and jobs.exists(record.key.project, record.key.name):
        running = jobs.spec_of(record.key.project, record.key.name)
        if running.generation == launch_generation(record):
            return LaunchPrice(running.price_per_hour, "", "the job spec it was launched with")
    return launch_price(load_prices(project_root=project.root))


def _model(
    record: ResourceRecord, verdict: Admission, *, project: Project, store: StateStore, field: str = "spec.model.volume"
) -> tuple[ModelArtifact | None, JSONObject | None]:
    """The model the workload names (a pinned URI once it is imported from the local cache: stage CachingModel;
    a Volume's revision once it is Ready), or the status to wait with (ModelNotCached, VolumeNotReady; WaitingFor
    while another TrainingJob is still to export it, `controllers/producers.py`) or to fail with (DependencyFailed,
    VolumeNotFound): the workload names only artifacts that exist. `field` names the model's field in messages."""
    model = verdict.model or {}
    if model.get("uri"):
        if not imported(project, str(model["uri"])):
            # Importing can take minutes for a large model: say so while it runs (`nodus get` shows it).
            write_status(store, record, {**record.status, "phase": Phase.PENDING, "stage": "CachingModel"})
        path, status = ensure_model(project, str(model["uri"]))
        if path is None:
            return None, {**status, "stage": "CachingModel"}
        return ModelArtifact(uri=str(model["uri"])), None
    volume = model.get("volume")
    if volume:
        name = str(volume["name"])
        pinned = int(volume["revision"]) if volume.get("revision") else None
        found = store.get(ResourceKey("Volume", record.key.project, name))
        if found is None:
            return None, missing_volume_status(record, store, field, name)
        if not launched(record, store):  # a launched generation keeps what it launched with
            waiting = producer_status(record, store, field, name, pinned)
            if waiting is not None:
                return None, waiting
        if found.status.get("phase") != Phase.READY:
            message = f"Volume {name} is not Ready"
            return None, {"phase": Phase.PENDING, "reason": Reason.VOLUME_NOT_READY, "message": message}
        latest = int(found.status.get("revision") or 0)
        if pinned is not None and pinned > latest:
            upload = f"nodus cp -r DIR vol/{name}:"
            message = f"{field}: Volume {name} has no revision {pinned} yet (its latest is {latest}): {upload}"
            return None, {"phase": Phase.PENDING, "reason": Reason.VOLUME_NOT_READY, "message": message}
        revision = VolumeRevision(name=name, revision=pinned or latest)
        return _volume_model(record, revision, project=project, store=store, field=field)
    return None, None


def launched(record: ResourceRecord, store: StateStore) -> bool:
    """Whether the generation this pass runs was launched already (its launch is recorded)."""
    key = launch_key(record)
    return any(launch.launch_key == key for launch in store.launches(record.key))


def _volume_model(
    record: ResourceRecord,
    revision: VolumeRevision,
    *,
    project: Project,
    store: StateStore,
    field: str = "spec.model.volume",
) -> tuple[ModelArtifact | None, JSONObject | None]:
    """A Volume revision as the workload's model: a full model as it is; a LoRA adapter as its base model (imported
    as a pinned URI is) with the adapters the trainer merges into it (`nodus.reconciler.volume_models`). A revision
    that holds nothing trainable Fails: no later look can change a committed revision."""
    try:
        artifact = volume_model_artifact(project, record.key.project, revision)
    except volume_models.UnusableModelError as exc:
        return None, {"phase": Phase.FAILED, "reason": exc.reason, "message": f"{field}: {exc.message}"}
    if artifact.uri is not None:  # the base of an adapter: imported from the local cache as a pinned URI is
        pinned = Admission(True, model={"uri": artifact.uri})
        base_model, waiting = _model(record, pinned, project=project, store=store)
        if waiting is not None or base_model is None:
            return None, waiting
    return artifact, None


def volume_model_artifact(project: Project, owner: str, revision: VolumeRevision) -> ModelArtifact:
    """The workload's model for a Volume revision (of project `owner`): the revision itself for a full model (or one
    not committed yet), its base with the adapters over it for a LoRA adapter. Raises UnusableModelError."""
    resolved = volume_models.resolve(project, owner, revision.name, revision.revision)
    if resolved is None or not resolved.adapters:
        return ModelArtifact(volume=revision)
    adapters = tuple(
        AdapterArtifact(volume=VolumeRevision(name=a.volume, revision=a.revision), path=a.path)
        for a in resolved.adapters
    )
    if resolved.base_uri is not None:
        return ModelArtifact(uri=resolved.base_uri, adapters=adapters)
    assert resolved.base_volume is not None
    base = VolumeRevision(name=resolved.base_volume[0], revision=resolved.base_volume[1])
    return ModelArtifact(volume=base, adapters=adapters)


def model_status(model: ModelArtifact | None) -> JSONObject | None:
    """`status.model` of a run whose model is a LoRA adapter over a base: both named (None for any other run)."""
    if model is None or not model.adapters:
        return None
    base = model.uri or (_volume_name(model) if model.volume is not None else None)
    return {"base": base, "adapters": [_adapter_name(adapter) for adapter in model.adapters], "merged": True}


def _adapter_name(adapter: AdapterArtifact) -> str:
    """`volume:NAME@REV` (with `/adapter` for a run's exported adapter folder)."""
    return f"volume:{adapter.volume.name}@{adapter.volume.revision}" + (f"/{adapter.path}" if adapter.path else "")


def _teacher(
    record: ResourceRecord, *, project: Project, store: StateStore
) -> tuple[ModelArtifact | None, JSONObject | None]:
    """A distillation's teacher (`spec.teacher`), imported and found as the model is; None for a run without one."""
    teacher = record.spec["spec"].get("teacher")
    if not teacher:
        return None, None
    model = Admission(True, model=teacher)
    found, waiting = _model(record, model, project=project, store=store, field="spec.teacher.volume")
    if waiting is not None:
        message = str(waiting.get("message", ""))
        return None, {**waiting, "message": message if message.startswith("spec.") else f"spec.teacher: {message}"}
    if found is not None and found.adapters:  # only spec.model is merged (NODUS_INPUT_ADAPTERS): never a bare base
        message = "spec.teacher.volume: it holds a LoRA adapter; a teacher must be a full model"
        return None, {"phase": Phase.FAILED, "reason": Reason.MODEL_NOT_FOUND, "message": message}
    return found, None


def _data(
    record: ResourceRecord, *, project: Project, store: StateStore
) -> tuple[DataArtifact | None, JSONObject | None]:
    """The data set the run reads (`spec.data`), fixed to a Volume revision: the one named, else the one this generation
    launched with, else the Volume's latest now (so later uploads never change a run that launched). Pending while the
    Volume is not Ready or its revision lacks `path` (upload it: `nodus cp`)."""
    data = record.spec["spec"].get("data")
    if not data:
        return None, None
    name = str(data["volume"])
    volume = store.get(ResourceKey("Volume", record.key.project, name))
    if volume is None:
        return None, missing_volume_status(record, store, "spec.data.volume", name)
    if not launched(record, store):  # a launched generation keeps the revision it launched with
        waiting = producer_status(record, store, "spec.data.volume", name, data.get("revision") or None)
        if waiting is not None:
            return None, waiting
    if volume.status.get("phase") != Phase.READY:
        message = f"spec.data.volume: Volume {name} is not Ready"
        return None, {"phase": Phase.PENDING, "reason": Reason.VOLUME_NOT_READY, "message": message}
    pinned = record.status.get("data") if record.status.get("launchGeneration") == launch_generation(record) else None
    if data.get("revision"):
        number = int(data["revision"])
    elif isinstance(pinned, dict) and pinned.get("volume") == name and pinned.get("revision") is not None:
        number = int(pinned["revision"])
    else:
        number = int(volume.status.get("revision") or 0)
    path = data.get("path")
    folder = project.volume_revision(record.key.project, name, number)
    if path and not (folder / str(path)).exists():
        where = f"vol/{name}:{path}"
        message = f"spec.data.path: Volume {name} revision {number} has no {path} (upload it: nodus cp FILE {where})"
        return None, {"phase": Phase.PENDING, "reason": Reason.VOLUME_NOT_READY, "message": message}
    artifact = DataArtifact(
        volume=VolumeRevision(name=name, revision=number),
        path=str(path) if path else None,
        format=str(data.get("format") or "JSONL"),
        columns={str(k): str(v) for k, v in (data.get("columns") or {}).items()},
    )
    return artifact, None


def data_params(data: DataArtifact) -> JSONObject:
    """`params.json`'s `data`: the Volume and revision it was fixed to, the path in it, the format and columns."""
    return {
        "volume": data.volume.name,
        "revision": data.volume.revision,
        "path": data.path,
        "format": data.format,
        "columns": dict(data.columns),
    }


def _volume_revision_name(model: ModelArtifact | None) -> str | None:
    """`volume:NAME@REV` of a model from a Volume (what provenance.json names it by), else None. For an adapter over
    a base, the revision the job named (the last adapter): a run trained on it resolves to the same base and
    adapters again (`nodus.reconciler.volume_models`)."""
    if model is not None and model.adapters:
        last = model.adapters[-1].volume
        return f"volume:{last.name}@{last.revision}"
    return None if model is None or model.volume is None else _volume_name(model)


def _volume_name(model: ModelArtifact) -> str:
    assert model.volume is not None
    return f"volume:{model.volume.name}@{model.volume.revision}"


def _stop_replaced(jobs: Executor, record: ResourceRecord) -> None:
    """A replaced TrainingJob: the old run is cancelled and waited for before the new generation starts."""
    project, name = record.key.project, record.key.name
    if not jobs.observe(project, name).ended:
        jobs.cancel(project, name)
        wait_for(jobs, project, name, phases=("Succeeded", "Failed", "Cancelled"), timeout_s=120)


def _follow_cap(jobs: Executor, record: ResourceRecord, spec: Workload) -> None:
    """A raised cap (or `state: Running` again) resumes a Suspended job from its checkpoint; a job stopped at
    a cap that was not raised stays Suspended (any other change of the job leaves it so)."""
    project, name = record.key.project, record.key.name
    status = jobs.observe(project, name)
    running_cap = jobs.spec_of(project, name).max_cost
    wanted = spec.max_cost
    raised = running_cap is not None and wanted is not None and wanted > running_cap
    if status.phase != "Suspended":
        if raised and not status.ended:
            jobs.resume(project, name, max_cost_usd=spec.max_cost_usd)  # a running job only takes the new cap
        return
    if status.reason == "MaxCostReached" and not raised:
        return
    try:
        jobs.resume(project, name, max_cost_usd=spec.max_cost_usd)
    except ConfigError:
        return  # no room under the cap yet: it stays Suspended, and its status says why


def compile_workload(
    record: ResourceRecord,
    verdict: Admission,
    runtime: ResourceRecord,
    environment: ResourceRecord | None,
    *,
    price: LaunchPrice | None = None,
    container: bool = True,
    model: ModelArtifact | None = None,
    source_digest: str | None = None,
) -> Workload:
    """The workload of an admitted TrainingJob (`price`: the host's price for this run, the price table's in force
    now when left out; `container`: graders run in the Environment's image where podman has it, else, or when
    False, in process mode from the package; `model`: the model as `_model` found it, None for none;
    `source_digest`: the package's source digest from nodus.lock, `package_source_digest`)."""
    spec = record.spec["spec"]
    runtime_spec = runtime.spec["spec"]
    env_artifact = None
    if environment is not None:
        tasks = spec.get("environment") or {}
        paths = _package_paths(environment)
        env_artifact = EnvironmentArtifact(
            project=environment.key.project,
            name=environment.key.name,
            version=environment.spec["spec"]["version"],
            # Graders run in the built image when podman has it (container mode); the package folder is for
            # process mode (still sandboxed), which `controllers/sandbox.py` chose and said so.
            grader_image=environment.status.get("graderImage") if container else None,
            grader_image_digest=environment.status.get("graderImageId") if container else None,
            image_digest=environment.status.get("image"),
            manifests={str(key): str(digest) for key, digest in (environment.status.get("manifests") or {}).items()},
            package=PackageSource(
                source_digest=source_digest or None,
                # Where the package folder is on the host that applied it, for process-mode graders (the grading
                # service's own mode setting may ask for them, container mode or not): a hint, never an artifact.
                host_hint=Path(paths[0]).as_uri() if paths else None,
            ),
            loader=environment.spec["spec"]["package"].get("loader"),
            train_tasks=int(tasks.get("trainTasks") or 256),
            held_out_tasks=int(tasks.get("heldOutTasks") or 64),
            seed=int(tasks.get("seed") or 0),
        )
    params = {
        "task": spec.get("task") or (runtime_spec.get("tasks") or ["RL"])[0],
        "mode": spec.get("mode", "Train"),
        "parameters": verdict.parameters,
        "data": spec.get("data"),
        "environment": _environment_params(spec.get("environment"), environment),
        "evaluation": {**DEFAULT_EVALUATION, **(spec.get("evaluation") or {})},
        "trainingJob": record.key.name,
        "modelRevision": (verdict.model or {}).get("uri") or _volume_revision_name(model),
        **({"modelBase": named["base"], "modelAdapters": named["adapters"]} if (named := model_status(model)) else {}),
        "runtime": {
            "name": f"{runtime.key.project}/{runtime.key.name}",
            # The document as applied (normalised, canonical JSON): a changed schema or default is a new digest.
            "digest": spec_hash(runtime.spec),
            "managed": bool(runtime_spec.get("managed")),
            "image": runtime_spec.get("image"),
        },
    }
    return Workload(
        key=WorkloadKey(project=record.key.project, name=record.key.name, kind="TrainingJob"),
        generation=launch_generation(record),
        attempt=1,
        # As the runtime wrote it: `python` stays `python` (the executor knows which interpreter that is on its host).
        command=tuple(str(part) for part in runtime_spec["command"]),
        image=runtime_spec.get("image"),
        env={**(runtime_spec.get("env") or {}), **(spec.get("env") or {})},
        resources=resources_of(spec, runtime_spec.get("launcher")),
        price_per_hour_usd=str((price or launch_price(load_prices())).per_hour_usd),
        max_cost_usd=spec.get("maxCostUSD"),
        intervals=intervals(),
        params=params,
        environment=env_artifact,
        model=model,
    )


def intervals() -> Intervals:
    """Cost accounting every `$NODUS_ACCOUNTING_INTERVAL` seconds (10 by default); the rest as the executor's."""
    return Intervals(accounting_s=float(os.environ.get(INTERVAL_VARIABLE, "10")))


def resources_of(spec: JSONObject, launcher: str | None = None) -> Resources | None:
    """`spec.resources` of a TrainingJob or Job as the workload names them (GPU types and count, nodes, CPU cores and
    memory per node), and a Job's gang (`spec.distributed`: its nodes, startupTimeout and maxAssemblyRetries;
    `spec.recovery.maxAttempts` for its restarts) with its launcher (`spec.launcher`, else `launcher`, the
    runtime's); None where the resource leaves them all out and the launcher is Plain (the runtime's presets are the
    estimator's, not a request)."""
    resources = spec.get("resources")
    distributed = spec.get("distributed")
    chosen = str(spec.get("launcher") or launcher or "Plain")
    if not isinstance(resources, dict) and not isinstance(distributed, dict):
        return None if chosen == "Plain" else Resources(launcher=chosen)
    resources = resources if isinstance(resources, dict) else {}
    distributed = distributed if isinstance(distributed, dict) else {}
    gpu = resources.get("gpu")
    # The one shape the estimate priced: `totalGPUs` resolved, `gpusPerNode` over `resources.gpu.count`.
    shape = topology.of_spec(spec)
    wanted = None
    if isinstance(gpu, dict) and gpu.get("type"):
        types = gpu["type"] if isinstance(gpu["type"], list) else [gpu["type"]]
        wanted = GpuResources(types=tuple(str(kind) for kind in types), count=shape.gpus_per_node)
    gang: dict[str, Any] = {}
    if distributed.get("startupTimeout") is not None:
        gang["startup_timeout_s"] = parse_duration(distributed["startupTimeout"]).total_seconds()
    if distributed.get("maxAssemblyRetries") is not None:
        gang["max_assembly_retries"] = int(distributed["maxAssemblyRetries"])
    recovery = spec.get("recovery")
    if isinstance(recovery, dict) and recovery.get("maxAttempts") is not None:
        gang["max_restarts"] = int(recovery["maxAttempts"])
    memory = resources.get("memory")
    return Resources(
        gpu=wanted,
        nodes=shape.nodes,
        cpu=int(resources["cpu"]) if resources.get("cpu") is not None else None,
        memory_bytes=parse_quantity(memory) if memory is not None else None,
        launcher=str(spec.get("launcher") or launcher or "Plain"),
        **gang,
    )


def gang_refusal(resources: Resources | None, jobs: Executor, where: str) -> JSONObject | None:
    """The Failed status of a run of several nodes on an executor without gangs (the local one would run one
    process and call it the gang), None otherwise. `where`: the field that asked for the nodes."""
    if resources is None or resources.nodes <= 1 or jobs.capabilities.gangs:
        return None
    message = (
        f"{where}: {resources.nodes} nodes need an executor that starts gangs; this project's runs one process on "
        "this machine (set executor: {ray: {address: ...}} in nodus.yaml)"
    )
    return {"phase": Phase.FAILED, "reason": Reason.EXECUTOR_LACKS_GANGS, "message": message}


def unschedulable_refusal(resources: Resources | None, jobs: Executor) -> JSONObject | None:
    """The Failed status of a run whose GPUs the executor's one host does not have (admitted elsewhere, or before
    the machine changed): never run on the CPU instead. None where they are, or a cluster places it at launch."""
    host = jobs.capabilities.host_gpus if resources is not None and resources.gpu is not None else None
    why = host.unschedulable(resources) if host is not None else None
    if why is None:
        return None
    return {"phase": Phase.FAILED, "reason": Reason.UNSCHEDULABLE, "message": f"spec.resources.gpu.type: {why}"}


def package_source_digest(project: Project, environment: ResourceRecord) -> str | None:
    """The source digest nodus-build recorded in nodus.lock for the Environment's path package (None for pip and
    image packages, and for an entry written before nodus-build recorded it)."""
    entry = Lock.load(project.lock_path).get(
        environment.key.name, environment.spec["spec"]["version"], environment.key.project
    )
    return (entry.source or None) if entry is not None else None


def _environment_params(tasks: JSONObject | None, environment: ResourceRecord | None) -> JSONObject | None:
    """params.json's `environment`: the job's tasks block plus the Environment's version and grader image."""
    if tasks is None and environment is None:
        return None
    out: JSONObject = dict(tasks or {})
    if environment is not None:
        out["version"] = environment.spec["spec"]["version"]
        # The image the graders run (its id as podman has it), else the built image's digest, else none
        # (graders from the package folder).
        out["image"] = environment.status.get("graderImageId") or environment.status.get("image")
    return out


def _package_paths(environment: ResourceRecord) -> list[str]:
    """Where a path package lives on this host (graders in process mode load it from there)."""
    package = environment.spec["spec"]["package"]
    source = environment.status.get("source")
    if not package.get("path") or not source:
        return []
    spec_file = Path(str(source).rsplit(":", 1)[0])
    return [str((spec_file.parent / package["path"]).resolve())]


def runs_current_generation(jobs: Executor, record: ResourceRecord) -> bool:
    """Whether the executor's job is the generation the record runs now. After a replace that has not launched
    (its model not cached, its Environment not Ready), the executor still holds the earlier generation's job: its
    phase, events and heartbeat are that generation's, never this record's."""
    project, name = record.key.project, record.key.name
    return jobs.exists(project, name) and jobs.spec_of(project, name).generation == launch_generation(record)


def reported_events(jobs: Executor, record: ResourceRecord) -> list[JSONObject]:
    """The executor's recent events of the job (stage reports among them), oldest first; none while the job
    folder still holds an earlier generation (a replacement not launched yet): those are not this record's."""
    if not runs_current_generation(jobs, record):
        return []
    return [dict(event) for event in jobs.observe(record.key.project, record.key.name).events]


def job_status(jobs: Executor, record: ResourceRecord) -> JSONObject:
    """The executor's view of a job as TrainingJob status: phase, reason, stage, step, metrics, cost..."""
    project, name = record.key.project, record.key.name
    if not jobs.exists(project, name):
        return {"phase": Phase.PENDING}
    seen = jobs.observe(project, name)
    raw = seen.raw
    status: dict[str, Any] = {"phase": seen.phase}
    for field in ("reason", "message", "stage", "step", "totalSteps", "metrics", "summary", "diagnostics", "attempt"):
        if raw.get(field) not in (None, "", {}):
            status[field] = raw[field]
    if status["phase"] == Phase.SUCCEEDED:
        # The trainer's last report (Exporting: writing its outputs) ended when it succeeded; a run still being
        # exported to `spec.exportTo` is said so by `exported_status`. A failed run keeps the stage it failed in.
        status.pop("stage", None)
    if seen.cost_usd is not None:
        status["cost"] = {"totalUSD": seen.cost_usd, "limitUSD": record.spec["spec"].get("maxCostUSD")}
    if isinstance(raw.get("topology"), dict):  # a gang's shape: written once, the same across restarts
        status["topology"] = record.status.get("topology") or raw["topology"]
    if isinstance(raw.get("gang"), dict):  # its epoch, restarts and where each rank runs now
        status["gang"] = raw["gang"]
    rows = attempts_of(raw)
    if rows:  # each rank's attempts with placement and cost (`nodus get attempts`)
        status["attempts"] = rows
    if status["phase"] == Phase.SUCCEEDED:
        # Every file the trainer wrote under its outputs is an output, named by its path (the seeds'
        # `-o jsonpath='{.status.outputs[*].name}'`), with the size and sha256 `nodus cp` checks it against.
        manifest = jobs.outputs(project, name)
        if manifest is not None:
            status["outputs"] = [
                {"name": path, "size": entry.size, "sha256": entry.sha256}
                for path, entry in sorted(manifest.files.items())
            ]
    if record.key.kind == "TrainingJob" and status["phase"] == Phase.SUCCEEDED:
        timing = record.status.get("timing")
        if not (isinstance(timing, dict) and timing.get("generation") == seen.generation):
            model = model_identity(record.spec["spec"].get("model"))
            # A run that cannot be measured (resumed: its stages span attempts) is recorded as such, so its
            # events are not read again at every look.
            timing = measure(jobs.events(project, name), jobs.spec_of(project, name).params, raw, model)
            timing = timing or {"generation": seen.generation}
        status["timing"] = timing  # measured once: later estimates of this shape on this host use it
        found = headline(jobs, project, name, seen.generation, record.status.get("headline"))
        if found is not None:  # the runtime's headline metric, for get (CHANGE) and describe
            status["headline"] = found
    return status


def stop_jobs(record: ResourceRecord, *, project: Project, store: StateStore) -> None:
    """Deleting a TrainingJob cancels its job (its folder stays for `nodus logs` until pruned)."""
    jobs = executor(project)
    if jobs.exists(record.key.project, record.key.name):
        jobs.cancel(record.key.project, record.key.name)


def keys_with_jobs(store: StateStore) -> list[ResourceKey]:
    """TrainingJobs and Jobs that were launched (their status comes from the executor)."""
    records = [*store.list("TrainingJob"), *store.list("Job")]
    return [record.key for record in records if store.launches(record.key)]
