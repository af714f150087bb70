"""Services: long-running workloads an executor keeps up (an inference endpoint's model server, the host's gateway).

Who uses it: the InferenceEndpoint controller builds a `Service` and hands it to the executor's service host
(`ServiceHost`, which `LocalExecutor.services` implements: `executors/local/services.py`); `nodus stop/start ep/NAME`
and deletes go through the same seam. A job runs to an end; a service runs until it is stopped, is restarted by its
supervisor when its process dies, and is Running only while it answers its readiness probe.

What a service names, as a workload does: the command as written, with `{socket}` standing for the Unix socket the
host gives it to listen on (a folder of the host's, never a path the controller chose); the model by pinned URI or
Volume revision, and adapters by the TrainingJob whose outputs hold them or by Volume revision, each resolved on the
host (`{model}` and `{adapter:NAME}` in the command). Its observation says where it listens (`address`:
`unix:/path/to.sock`, or `http://IP:PORT` on a Ray node), whether it is ready, and how often it was restarted.

A model server on another machine (the Ray executor's services) listens on that node's address, so it takes a key
(`NODUS_SERVING_API_KEY`) that `nodus.reconciler.inference.upstream_keys` derives from the project's state folder;
the gateway, on the project's host, derives the same one when the endpoint's status says its upstream wants one
(`upstreamAuth: Bearer`). No key is in any status.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Final, Literal, Protocol

from pydantic import Field

from .workload import ModelArtifact, Resources, VolumeRevision, WorkloadModel

SOCKET_PLACEHOLDER: Final = "{socket}"
MODEL_PLACEHOLDER: Final = "{model}"
ADAPTER_PLACEHOLDER: Final = "{adapter:%s}"
UDS_FLAG: Final = "--uds"
SERVING_KEY_VARIABLE: Final = "NODUS_SERVING_API_KEY"
"""Where nodus's model server (`nodus.runtimes.serving`) reads the key a client must send; `vllm serve` takes the
same as `--api-key`."""


class ServiceKey(WorkloadModel):
    """Which service: an InferenceEndpoint's model server, or a host Service (the gateway)."""

    project: str
    name: str
    kind: Literal["InferenceEndpoint", "Service"] = "InferenceEndpoint"


class JobOutput(WorkloadModel):
    """A folder of a job's outputs (a TrainingJob's `adapter/`), as the executor that ran it keeps them."""

    project: str
    name: str
    path: str = "adapter"


class Adapter(WorkloadModel):
    """A LoRA adapter served over the model under `name`: from a job's outputs or a Volume revision."""

    name: str
    job: JobOutput | None = None
    volume: VolumeRevision | None = None
    path: str = ""
    """With `volume`: the adapter's folder in the revision (`adapter` for a run's export, empty at its top)."""


class Report(WorkloadModel):
    """A command the service's host runs each time the service becomes ready or stops being ready, so the resource's
    stored status (which the gateway routes by) follows without a later `nodus` command: for an endpoint,
    `python -m nodus.reconciler.report` (its observed status written to the store)."""

    command: tuple[str, ...] = Field(min_length=1)
    pass_env: tuple[str, ...] = ()
    """Variables of the starting `nodus`'s environment the command gets besides the base ones (the state store's
    connection); the service itself does not get them."""


class Service(WorkloadModel):
    """One service to keep up: see the module docstring."""

    key: ServiceKey
    generation: int = Field(default=1, ge=1)
    command: tuple[str, ...] = Field(min_length=1)
    env: dict[str, str] = Field(default_factory=dict)
    pass_env: tuple[str, ...] = ()
    """Variables of the starting `nodus`'s environment this service gets besides the base ones (names or `PREFIX*`,
    `process_env.py`): the gateway's state store connection. Read where it is started, never written down."""
    model: ModelArtifact | None = None
    adapters: tuple[Adapter, ...] = ()
    resources: Resources | None = None
    """What its machine must have (GPU type and count, CPU, memory), where an executor places it (Ray); None: one
    CPU there, or this machine."""
    ready_path: str = "/health"
    """An HTTP GET on the socket that answers 200 once it serves."""
    listen: str | None = None
    """`HOST:PORT` of a loopback TCP address it listens on, as its command says (the gateway: a base URL clients
    can reach); None: the Unix socket the host gives it (`{socket}`)."""
    start_timeout_s: float = Field(default=600.0, gt=0, alias="startTimeoutS")
    """How long one start may take to become ready before it counts as a failed start."""
    max_restarts: int = Field(default=5, ge=0)
    """Restarts in a row without becoming ready before the service is Failed (its log's last lines say why)."""
    report: Report | None = None
    """Run on each change of its readiness (see `Report`); None: its status is read only by the reconcile loop."""

    def to_json(self) -> str:
        return self.model_dump_json(by_alias=True)

    @classmethod
    def from_json(cls, text: str | bytes) -> Service:
        return cls.model_validate_json(text)

    def on_tcp(self, host: str, port: int) -> Service:
        """This service listening on `host:port` instead of the host's Unix socket (`--uds {socket}` in its
        command becomes `--host HOST --port PORT`); ValueError for a command that takes no `--uds {socket}`."""
        command = list(self.command)
        for index, part in enumerate(command[:-1]):
            if part == UDS_FLAG and command[index + 1] == SOCKET_PLACEHOLDER:
                command[index : index + 2] = ["--host", host, "--port", str(port)]
                return self.model_copy(update={"command": tuple(command), "listen": f"{host}:{port}"})
        raise ValueError(f"{self.key.kind}/{self.key.name}: its command takes no {UDS_FLAG} {SOCKET_PLACEHOLDER}")


@dataclass(frozen=True)
class ServiceObservation:
    """A service as its host sees it now."""

    phase: str
    ready: bool = False
    address: str | None = None
    """Where it listens: `unix:/path/to.sock`, or `http://IP:PORT` on another machine."""
    auth: str | None = None
    """`Bearer` when the server there takes the endpoint's `upstream_key`; None for a Unix socket."""
    message: str | None = None
    reason: str | None = None
    generation: int | None = None
    restarts: int = 0
    started_at: float | None = None
    raw: Mapping[str, Any] = field(default_factory=dict)


class ServiceHost(Protocol):
    """What an executor that runs services does with them (`Capabilities.services`)."""

    def launch_service(self, service: Service) -> None:
        """Start it unless this generation runs (idempotent); a new generation replaces the old one. A stopped
        service of the same generation starts again."""
        ...

    def observe_service(self, project: str, name: str) -> ServiceObservation:
        """Its state now; Pending with reason NotReady for one this host has never started."""
        ...

    def stop_service(self, project: str, name: str) -> None:
        """Stop it (its process ends, its socket goes); it stays Stopped until launched again."""
        ...

    def service_log(self, project: str, name: str) -> str:
        """The last lines its processes printed."""
        ...
