"""The InferenceEndpoint controller: an endpoint is a service on the project's executor serving its model.

Who calls it: `controllers/inferenceendpoint_controller.py` (registered for InferenceEndpoint): `nodus apply`,
`nodus refresh`, the waits and `nodus controller`; `nodus stop/start ep/NAME` patch `spec.state` and land here.

A pass: `spec.state: Stopped` stops the service (Stopped, Ready False: the gateway answers 503). Otherwise the model
is resolved (`endpoints/served.py`: a catalog id through the model table, a pinned revision, a Volume, a trained
adapter), its base imported once from the local Hugging Face cache (never downloaded: Pending ModelNotCached until
it is there), and the service launched on the executor's service host: `python -m nodus.runtimes.serving` over the
model folder with the adapters, on a Unix socket of the host's (`executors/service.py`). A new generation of the
endpoint (another model) replaces the service; limits and the cap change in place and never restart it (the gateway
reads them from the store at each request). Each service reports its readiness changes (`report_of`: its supervisor
runs a refresh of the endpoint), so `nodus start` or `create` without `--wait` leave it Running once it answers,
with no later command. The gateway is stopped with the project's last endpoint (deleted): a stopped endpoint still
answers 503 through it until it is started, as the seeds say of `nodus stop`.

Status it writes (what the gateway, `nodus get ep` and `describe` read):
    phase        Pending (starting, or waiting: reason ModelNotCached, VolumeNotReady, TrainingJobNotSucceeded),
                 Running (its model answers), Stopped, Failed (reason and the cause)
    conditions   Ready: True while the model can serve now (derived by `controllers.status`)
    model        the id prices and `GET /v1/models` know it by; servedModel: the name the upstream knows
    upstream     `unix:/path/to.sock`: where the gateway forwards requests
    url          `http://127.0.0.1:8400/endpoints/PROJECT/NAME/v1`: its own base URL on the project's gateway (which
                 this controller keeps up too, on the project's own port: `inference.gateway_address`)
    weights      where the weights came from; restarts: how often its process was started again
"""

from __future__ import annotations

from typing import Any, Final

from nodus.errors import ConfigError
from nodus.reconciler.controllers.trainingjob import executor
from nodus.reconciler.controllers.volume import ensure_model
from nodus.reconciler.endpoints.model_table import load_models
from nodus.reconciler.endpoints.served import NotYet, Served, served_model
from nodus.reconciler.executors.process_env import STATE_STORE_SETTINGS
from nodus.reconciler.executors.service import Report, Service, ServiceHost, ServiceKey, ServiceObservation
from nodus.reconciler.executors.workload import GpuResources, Resources
from nodus.reconciler.inference.api import gateway_command
from nodus.reconciler.inference.gateway_address import Address, choose_address
from nodus.reconciler.project import Project
from nodus.reconciler.state import STATE_FILE
from nodus.reconciler.state.records import JSONObject, ResourceKey, ResourceRecord, StateStore
from nodus.specs.status_names import Phase, Reason

KEPT: Final = ("model", "servedModel", "weights")
"""Status fields a refresh keeps: what the last reconcile resolved (a refresh resolves nothing)."""
HOST_PYTHON: Final = "python"
"""A service's interpreter as its host runs it: the one nodus runs in there (`LocalServices`), as in runtimes."""
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


def service_of(record: ResourceRecord, served: Served, project: Project) -> Service:
    """The model server of `served`, as the executor's host runs it; once it answers (or stops answering), the
    endpoint's status says so (its report: a refresh of the endpoint)."""
    base_name = served.model_id if served.adapters else served.served_name  # an adapter goes by its own name
    command = [HOST_PYTHON, "-m", SERVER_MODULE, "--model", "{model}", "--name", base_name]
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
        resources=Resources(gpu=GpuResources(types=served.gpu[0], count=served.gpu[1])) if served.gpu else None,
        report=report_of(project, "InferenceEndpoint", record.key.name, namespace=record.key.project),
    )


GATEWAY: Final = ServiceKey(project="nodus", name="gateway", kind="Service")
"""The project's inference gateway, a service of the host like the model servers (`nodus.reconciler.inference`)."""
REFRESH_MODULE: Final = "nodus.reconciler.refresh"


def report_of(project: Project, kind: str, *names: str, namespace: str | None = None) -> Report:
    """What a service's supervisor runs when the service becomes ready or stops being so: a refresh of these
    records, so their stored status (which the gateway routes by) follows without a later nodus command."""
    # The state folder and store as this process found them (NODUS_HOME, NODUS_STATE): the report gets neither.
    command = [HOST_PYTHON, "-m", REFRESH_MODULE, "--path", str(project.root), "--state-dir", str(project.files.root)]
    if project.state_url is not None:
        command += ["--state", project.state_url]
    if namespace is not None:
        command += ["--project", namespace]
    return Report(command=(*command, kind, *names), pass_env=STATE_STORE_SETTINGS)


def gateway_service(project: Project, where: Address) -> Service:
    """The gateway on `where` (`gateway_address.choose_address`), reading the project's state store."""
    state = project.state_url or str(project.files.root / STATE_FILE)
    argv = gateway_command(state, port=where.port, host=where.host, project_root=project.root, python=HOST_PYTHON)
    # The gateway opens the state store as this process did: libpq's settings (a PostgreSQL password) go with it.
    # Once it answers, the endpoints waiting for it are Running (their refresh).
    return Service(
        key=GATEWAY,
        command=tuple(argv),
        listen=where.listen,
        pass_env=STATE_STORE_SETTINGS,
        report=report_of(project, "InferenceEndpoint"),
    )


def ensure_gateway(project: Project, store: StateStore, services: ServiceHost) -> ServiceObservation:
    """The gateway up (started, or started again on a changed address); its state. Its address is the project's
    own (`gateway_address`): ConfigError when nodus.yaml's port is held by another project's gateway."""
    seen = services.observe_service(GATEWAY.project, GATEWAY.name)
    up = seen.phase in (Phase.PENDING, Phase.RUNNING) and (seen.address or "").startswith("http://")
    running = (seen.address or "").removeprefix("http://") if up else None
    services.launch_service(gateway_service(project, choose_address(project, store, running)))
    return services.observe_service(GATEWAY.project, GATEWAY.name)


def gateway_needed(store: StateStore, leaving: ResourceKey) -> bool:
    """Whether an endpoint other than `leaving` (deleted now) still wants the gateway: a stopped one does (it answers
    503 through the gateway until it is started)."""
    return any(other.key != leaving and not other.deleting for other in store.list("InferenceEndpoint"))


def reconcile_endpoint(record: ResourceRecord, *, project: Project, store: StateStore) -> JSONObject:
    """The endpoint's status after this pass (see the module docstring)."""
    spec = record.spec["spec"]
    services = service_host(project)
    if spec.get("state") == "Stopped":
        services.stop_service(record.key.project, record.key.name)  # the gateway stays: it answers 503 for it
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
        gateway = ensure_gateway(project, store, services)  # first: a port it cannot have starts no model server
        services.launch_service(service_of(record, served, project))
    except ConfigError as exc:
        hint = f" (hint: {exc.hint})" if exc.hint else ""
        return _waiting(Phase.FAILED, Reason.LAUNCH_FAILED, exc.message + hint)
    status = _status(record, services.observe_service(record.key.project, record.key.name), served)
    return _with_gateway(status, record, gateway)


def _with_gateway(status: JSONObject, record: ResourceRecord, gateway: ServiceObservation) -> JSONObject:
    """The endpoint's own base URL on the gateway (where it listens now), once the gateway serves; Pending while it
    starts."""
    if gateway.ready and gateway.address:
        return {**status, "url": f"{gateway.address}/endpoints/{record.key.project}/{record.key.name}/v1"}
    if status.get("phase") == Phase.RUNNING:
        why = gateway.message or "starting"
        return {**status, "phase": Phase.PENDING, "reason": Reason.NOT_READY, "message": f"the gateway: {why}"}
    return status


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
    status = {**kept, **_status(record, seen, None)}
    if status.get("phase") in (Phase.STOPPED, Phase.FAILED):
        return status
    return _with_gateway(status, record, services.observe_service(GATEWAY.project, GATEWAY.name))


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
    if seen.auth:  # the server is on another machine and takes the endpoint's key (executors/service.py)
        status["upstreamAuth"] = seen.auth
    if served is not None:
        status.update(model=served.model_id, servedModel=served.served_name, weights=served.source)
    status["restarts"] = seen.restarts
    return status


def _waiting(phase: str, reason: str, message: str) -> JSONObject:
    """A status with no service serving, and why (its Ready condition says so: `controllers.status`)."""
    return {"phase": phase, "reason": reason, "message": message}
