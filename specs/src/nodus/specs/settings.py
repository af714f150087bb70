"""Project settings: `nodus.yaml` beside `nodus.lock`, what a project decides for all its resources on a host.

Who uses it: `nodus.reconciler.project.Project.settings` reads it (once per command); the TrainingJob controller
takes the grading sandbox and the executor from it. The file is plain YAML without `apiVersion` (it is not a
resource, so `nodus plan` skips it as other YAML), unknown keys are errors, and every key has a default, so a
project without the file behaves as before:

    # nodus.yaml
    executor: local        # where the project's jobs run: local (default), or a Ray cluster:
    # executor:
    #   ray:
    #     address: http://HOST:8265   # the cluster's dashboard (Jobs API); else RAY_ADDRESS
    #     tokenSecret: ray-token      # a Secret holding the token; else RAY_AUTH_TOKEN
    #     registry: 10.0.0.5:5000/nodus   # where inputs and outputs travel when the nodes do not see this folder
    grading:
      sandbox: container   # auto (default) | container | process
    inference:
      gateway: {port: 8400}  # the gateway's base URL: http://127.0.0.1:8400/v1 (default: one chosen per project)
"""

from __future__ import annotations

from pathlib import Path
from typing import Literal

import yaml
from pydantic import Field, ValidationError, field_validator, model_validator
from pydantic_core import ErrorDetails

from nodus.errors import ConfigError
from nodus.specs.base import SpecModel

SETTINGS_FILE = "nodus.yaml"


class GradingSettings(SpecModel):
    """How this project's graders are sandboxed on the hosts that run its jobs."""

    sandbox: Literal["auto", "container", "process"] = "auto"
    """auto: in the grader image under podman where the host has it, else in process mode (said at apply, as an
    event and as the job's ContainerSandbox condition); container: always in the image, and a job is refused on a
    host that cannot (reason SandboxUnavailable); process: always in process mode (namespaces, a dropped uid,
    rlimits, exactly the files the image would hold)."""


class RaySettings(SpecModel):
    """Where the project's Ray cluster is and how to authenticate to it (`executor: {ray: {...}}`)."""

    address: str | None = None
    """The cluster's dashboard, `http://HOST:8265` (its Jobs API); None: RAY_ADDRESS when nodus runs."""
    token_secret: str | None = None
    """The Secret holding the cluster's auth token (`RAY_AUTH_MODE=token`); None: RAY_AUTH_TOKEN when nodus runs."""
    shared_filesystem: bool = False
    """The nodes see this project's folder at the same path (a cluster on one machine, as `nodus cluster up` starts
    it, or the project on a shared filesystem): a job's session on the node reads the grader images, task
    manifests, models and Volumes the workload names from the project's store there. Without it, the node has
    only its own store (or `registry`), and a workload naming an artifact it lacks fails its launch (LaunchFailed)."""
    registry: str | None = None
    """An OCI registry repository, `HOST[:PORT]/REPOSITORY`, that this host and the nodes both reach, for nodes that
    do not see this project's folder: a job's inputs travel to its node through it by digest (the grader image, the
    task manifests, the model's files) and its outputs come back through it, each file checked against the sha256 its
    node recorded (`nodus cp`, `exportTo`). Credentials: NODUS_REGISTRY_USERNAME/PASSWORD on each side."""
    insecure_registry: bool = False
    """Speak plain HTTP to `registry` (a registry inside the cluster's own network); loopback always is."""

    @model_validator(mode="after")
    def _one_way_to_the_nodes(self) -> RaySettings:
        if self.registry is not None and self.shared_filesystem:
            raise ValueError(
                "registry and sharedFilesystem: true are two ways to reach the nodes' files; keep one "
                "(sharedFilesystem where the nodes see this folder, registry where they do not)"
            )
        if self.insecure_registry and self.registry is None:
            raise ValueError("insecureRegistry is set but registry is not")
        return self

    @field_validator("address")
    @classmethod
    def _dashboard_url(cls, value: str | None) -> str | None:
        if value is not None and not value.startswith(("http://", "https://")):
            raise ValueError(f"must be the dashboard's http(s)://HOST:PORT (got {value!r})")
        return value


class ExecutorSettings(SpecModel):
    """`executor:` as a mapping: the one executor named, with its settings."""

    ray: RaySettings
    """Jobs on a Ray cluster, each with its session on the node that runs its trainer."""


class GatewaySettings(SpecModel):
    """Where the project's inference gateway listens (`nodus.reconciler.inference.gateway`): the base URL clients use,
    `http://HOST:PORT/v1`."""

    host: str = "127.0.0.1"
    """A loopback address: the gateway is reached from this machine (put a TLS proxy in front to share it)."""
    port: int | None = Field(default=None, ge=1, le=65535)
    """Its TCP port. None (the default): chosen at the gateway's first start, 8400 or the next port above it that no
    other project's gateway holds, and kept in the project's state store."""

    @field_validator("host")
    @classmethod
    def _loopback(cls, value: str) -> str:
        if value not in ("127.0.0.1", "localhost", "::1") and not value.startswith("127."):
            raise ValueError(f"must be a loopback address such as 127.0.0.1 (got {value!r})")
        return value


class InferenceSettings(SpecModel):
    """Inference on this project's hosts."""

    gateway: GatewaySettings = GatewaySettings()
    """The gateway every InferenceEndpoint of the project is called through."""


class ProjectSettings(SpecModel):
    """The settings of one project (`nodus.yaml`)."""

    executor: Literal["local", "ray"] | ExecutorSettings = "local"
    """Which executor runs the project's jobs (`nodus.reconciler.executors.choose`): local, processes on this
    machine under a supervisor each; ray (or `{ray: {address, tokenSecret}}`), jobs on a Ray cluster."""
    grading: GradingSettings = GradingSettings()
    """Grading sandboxes."""
    inference: InferenceSettings = InferenceSettings()
    """The inference gateway's address."""

    @property
    def executor_name(self) -> str:
        """The executor's name (`local`, `ray`), whichever way `executor:` was written."""
        return self.executor if isinstance(self.executor, str) else "ray"

    @property
    def ray(self) -> RaySettings:
        """The Ray settings (all defaults where `executor:` names no mapping)."""
        return self.executor.ray if isinstance(self.executor, ExecutorSettings) else RaySettings()


def load_settings(root: Path) -> ProjectSettings:
    """The settings in `root/nodus.yaml`, or the defaults where there is none; a bad file is one ConfigError
    naming the file and the field."""
    path = root / SETTINGS_FILE
    if not path.is_file():
        return ProjectSettings()
    try:
        data = yaml.safe_load(path.read_text(encoding="utf-8"))
    except yaml.YAMLError as exc:
        raise ConfigError(f"{path}: not valid YAML ({exc})") from None
    if data is None:
        return ProjectSettings()
    if not isinstance(data, dict):
        raise ConfigError(f"{path}: project settings are a mapping (grading: {{sandbox: ...}})")
    try:
        return ProjectSettings.model_validate(data)
    except ValidationError as exc:
        first = _first_error(exc, data)
        field = ".".join(str(part) for part in first["loc"] if part not in UNION_BRANCHES)
        raise ConfigError(
            f"{path}: {field}: {first['msg']}",
            hint="see the README's Project settings: " + field.partition(".")[0],
        ) from None


UNION_BRANCHES = frozenset({"literal['local','ray']", "ExecutorSettings"})
"""The names pydantic puts in an error's location for the branch of `executor:`'s union it tried."""


def _first_error(exc: ValidationError, data: dict[str, object]) -> ErrorDetails:
    """The first error, of the branch of `executor:` that was written (a name, or a mapping) when it is there."""
    errors = exc.errors()
    branch = "ExecutorSettings" if isinstance(data.get("executor"), dict) else "literal['local','ray']"
    for error in errors:
        if error["loc"][:1] != ("executor",) or branch in error["loc"]:
            return error
    return errors[0]
