"""The InferenceEndpoint controller: an endpoint is a service on the project's executor serving its model.

Who calls it: `controllers/inferenceendpoint_controller.py` (registered for InferenceEndpoint): `nodus apply`,
`nodus refresh`, the waits and `nodus controller`; `nodus stop/start ep/NAME` patch `spec.state` and land here.

A pass: `spec.state: Stopped` stops the service (Stopped, Ready False: the gateway answers 503). Otherwise the model
is resolved (`endpoints/served.py`: a catalog id through the model table, a pinned revision, a Volume, a trained
adapter), its base imported once from the local Hugging Face cache (never downloaded: Pending ModelNotCached until
it is there), and the service launched on the executor's service host: `python -m nodus.runtimes.serving` over the
model folder with the adapters, on a Unix socket of the host's (`executors/service.py`). A new generation of the
endpoint (another model) replaces the service; limits and the cap change in place and never restart it (the gateway
reads them from the store at each request).

Status it writes (what the gateway, `nodus get ep` and `describe` read):
    phase        Pending (starting, or waiting: reason ModelNotCached, VolumeNotReady, TrainingJobNotSucceeded),
                 Running (its model answers), Stopped, Failed (reason and the cause)
    conditions   Ready: True while the model can serve now (derived by `controllers.status`)
    model        the id prices and `GET /v1/models` know it by; servedModel: the name the upstream knows
    upstream     `unix:/path/to.sock`: where the gateway forwards requests
    weights      where the weights came from; restarts: how often its process was started again
"""

from __future__ import annotations

from typing import Any, Final

from nodus.errors import ConfigError
from nodus.reconciler.controllers.trainingjob import executor
from nodus.reconciler.controllers.volume import ensure_model
from nodus.reconciler.endpoints.model_table import load_models
from nodus.reconciler.endpoints.served import NotYet, Served, served_model
from nodus.reconciler.executors.service import Service, ServiceHost, ServiceKey, ServiceObservation
from nodus.reconciler.project import Project
from nodus.reconciler.state.records import JSONObject, ResourceRecord, StateStore
from nodus.specs.status_names import Phase, Reason

KEPT: Final = ("model", "servedModel", "weights")
"""Status fields a refresh keeps: what the last reconcile resolved (a refresh resolves nothing)."""
SERVER_MODULE: Final = "nodus.runtimes.serving"
"""The model server (nodus-runtimes): OpenAI's HTTP API over transformers on a Unix socket (vLLM on GPU hosts)."""


def service_host(project: Project) -> ServiceHost:
    """The service host of the project's executor; ConfigError where its executor keeps no services."""
    jobs = executor(project)
    services = getattr(jobs, "services", None)
    if not jobs.capabilities.services or services is None:
        raise ConfigError(f"the {project.settings().executor_name} executor keeps no services yet: nothing can serve")
    host: ServiceHost = services
    return host


def service_of(record: ResourceRecord, served: Served) -> Service:
    """The model server of `served`, as the executor's host runs it."""
    command = ["python", "-m", SERVER_MODULE, "--model", "{model}", "--name", served.served_name]
    for adapter in served.adapters:
        command += ["--adapter", f"{adapter.name}={{adapter:{adapter.name}}}"]
    if "Embeddings" in served.operations:
        command.append("--embeddings")
    if served.context is not None:
        command += ["--max-model-len", str(served.context)]
    command += ["--uds", "{socket}"]
    return Service(
        key=ServiceKey(project=record.key.project, name=record.key.name, kind="InferenceEndpoint"),
        generation=record.generation,
        command=tuple(command),
        env={"HF_HUB_OFFLINE": "1", "TOKENIZERS_PARALLELISM": "false"},
        model=served.base,
        adapters=served.adapters,
    )


def reconcile_endpoint(record: ResourceRecord, *, project: Project, store: StateStore) -> JSONObject:
    """The endpoint's status after this pass (see the module docstring)."""
    spec = record.spec["spec"]
    services = service_host(project)
    if spec.get("state") == "Stopped":
        services.stop_service(record.key.project, record.key.name)
        return _status(record, services.observe_service(record.key.project, record.key.name), None)
    try:
        served = served_model(record, load_models(project.root), project, store, executor(project))
    except ConfigError as exc:
        return _waiting(Phase.FAILED, Reason.MODEL_NOT_FOUND, exc.message)
    if isinstance(served, NotYet):
        return _waiting(Phase.PENDING, served.reason, served.message)
    if served.base.uri is not None:
        folder, why = ensure_model(project, served.base.uri)
        if folder is None:
            return _waiting(Phase.PENDING, str(why.get("reason")), str(why.get("message")))
    try:
        services.launch_service(service_of(record, served))
    except ConfigError as exc:
        return _waiting(Phase.FAILED, Reason.LAUNCH_FAILED, exc.message)
    return _status(record, services.observe_service(record.key.project, record.key.name), served)


def observe_endpoint(record: ResourceRecord, project: Project) -> JSONObject | None:
    """`nodus refresh` and the waits: the service's state now (a stopped or failed one stays as it is); None when
    nothing was started for it."""
    if record.status.get("phase") in (None, Phase.FAILED) and not record.status.get("upstream"):
        return None
    try:
        services = service_host(project)
    except ConfigError:
        return None
    seen = services.observe_service(record.key.project, record.key.name)
    kept: dict[str, Any] = {key: record.status[key] for key in KEPT if key in record.status}
    status = _status(record, seen, None)
    return {**kept, **status}


def _status(record: ResourceRecord, seen: ServiceObservation, served: Served | None) -> JSONObject:
    ready = seen.ready and seen.phase == Phase.RUNNING
    phase = Phase.RUNNING if ready else seen.phase
    if phase == Phase.RUNNING and not ready:
        phase = Phase.PENDING  # up, but not answering its probe: the gateway answers 503 meanwhile
    status: dict[str, Any] = {"phase": phase}
    if seen.reason and not ready:
        status["reason"] = seen.reason
    if seen.message and not ready:
        status["message"] = seen.message
    if seen.address:
        status["upstream"] = seen.address
    if served is not None:
        status.update(model=served.model_id, servedModel=served.served_name, weights=served.source)
    status["restarts"] = seen.restarts
    return status


def _waiting(phase: str, reason: str, message: str) -> JSONObject:
    """A status with no service serving, and why (its Ready condition says so: `controllers.status`)."""
    return {"phase": phase, "reason": reason, "message": message}
