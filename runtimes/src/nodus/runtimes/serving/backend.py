"""The serving seam: what an inference endpoint's model server is asked to serve, and how a backend starts it.

Who uses it: the InferenceEndpoint controller (through its executor's workload command) and the tests. A backend
turns a `ServeSpec` (a base model folder, its named LoRA adapters, where to listen) into the command line of one
server process (`LaunchCommand`) and says when that process is ready (`wait_ready`). Two implementations, one
module each: `transformers_backend.TransformersBackend` (this package's own server; any host) and
`vllm_backend.VLLMBackend` (`vllm serve`; CUDA hosts). Both serve OpenAI's HTTP API (`/v1/models`,
`/v1/chat/completions`, `/v1/completions`, `/v1/embeddings`, `/health`) on loopback or a Unix socket, so the gateway
forwards to either the same way. A new backend is a new module with these two methods, not a branch elsewhere.
"""

from __future__ import annotations

import ipaddress
import subprocess
from dataclasses import dataclass, field
from pathlib import Path
from typing import Protocol

API_KEY_ENV = "NODUS_SERVING_API_KEY"
"""Where this package's server reads the key a client must send (never on the command line, which `ps` shows)."""


class ServingError(Exception):
    """A serving failure a person can act on; its message is one line naming the flag, file or field first."""


@dataclass(frozen=True)
class AdapterSpec:
    """A LoRA adapter served under `name` over the base model: a PEFT folder (adapter_config.json + weights)."""

    name: str
    path: Path


@dataclass(frozen=True)
class Listen:
    """Where a server binds: a Unix socket, or a loopback host and TCP port. Another address only for a server
    that takes a key (`keyed`: a Ray node's model server, which the gateway on another machine calls with the
    endpoint's key): the gateway is what listens outside, with keys, limits and holds."""

    uds: Path | None = None
    host: str = "127.0.0.1"
    port: int | None = None
    keyed: bool = False

    def __post_init__(self) -> None:
        if (self.uds is None) == (self.port is None):
            raise ServingError("listen: give exactly one of a Unix socket (--uds) or a TCP port (--port)")
        if self.uds is None and not self.keyed:
            check_loopback(self.host)

    @property
    def url(self) -> str:
        """The base URL a client uses: http://HOST:PORT, or http://localhost over the socket (see `describe`)."""
        if self.uds is not None:
            return "http://localhost"
        host = f"[{self.host}]" if ":" in self.host else self.host
        return f"http://{host}:{self.port}"

    def describe(self) -> str:
        return f"unix:{self.uds}" if self.uds is not None else self.url


def check_loopback(host: str) -> None:
    """Refuse any host that is not a loopback address: the model server has no keys, limits or holds of its own."""
    if host == "localhost":
        return
    try:
        loopback = ipaddress.ip_address(host).is_loopback
    except ValueError:
        loopback = False
    if not loopback:
        raise ServingError(
            f"--host {host}: the model server binds only a loopback address (127.0.0.1, ::1) or a Unix socket, "
            f"unless {API_KEY_ENV} gives it a key; the gateway is what listens outside"
        )


@dataclass(frozen=True)
class ServeSpec:
    """One server process: a base model folder served as `served_name`, with `adapters` over it."""

    model: Path
    served_name: str
    listen: Listen
    adapters: tuple[AdapterSpec, ...] = ()
    embeddings: bool = False
    max_model_len: int | None = None

    def model_names(self) -> list[str]:
        """Every name a request may give as `model`: the base's, then each adapter's."""
        return [self.served_name, *(adapter.name for adapter in self.adapters)]


@dataclass(frozen=True)
class LaunchCommand:
    """The process to start: `argv`, and `env` to add to its environment (secrets go there, never into argv)."""

    argv: list[str]
    env: dict[str, str] = field(default_factory=dict)


class ServingBackend(Protocol):
    """How one kind of model server is started and known to be ready."""

    name: str

    def command(self, spec: ServeSpec, *, api_key: str | None = None) -> LaunchCommand:
        """The command line of a server for `spec`; raises ServingError (one line) for a spec it cannot serve."""
        ...

    def wait_ready(
        self,
        spec: ServeSpec,
        *,
        timeout: float,
        process: subprocess.Popen[bytes] | None = None,
        api_key: str | None = None,
    ) -> None:
        """Return once the server started for `spec` answers /health and lists every name of the spec in
        /v1/models; raise ServingError naming the cause (the process ended, the time ran out, a model missing)."""
        ...
