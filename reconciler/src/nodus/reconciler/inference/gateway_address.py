"""Where a project's gateway listens, and whose gateway answers at an address.

Who uses it: the InferenceEndpoint controller (`choose_address` when it starts the gateway), the gateway (`/health`
names its project: `identity`), and `nodus inference chat` (`address` and `check_gateway` before a key is sent).
Two projects on one host so get two ports, and a CLI never sends its key to another project's gateway.

The port is nodus.yaml's `inference.gateway.port` when it gives one (taken by another project's gateway: one line
naming that project's folder and pid). Otherwise it is chosen at the gateway's first start, 8400 or the next free
port above it, and kept in the state store (`inference.gateway.port`), so the project's base URL stays the same; it
is chosen again only when another process took it meanwhile.
"""

from __future__ import annotations

import http.client
import json
import secrets
import socket
from dataclasses import dataclass
from typing import Final

from nodus.errors import ConfigError
from nodus.reconciler.project import Project
from nodus.reconciler.state.records import StateStore

PORT_VALUE: Final = "inference.gateway.port"
PROJECT_ID_VALUE: Final = "project.id"
DEFAULT_PORT: Final = 8400
PORTS_TRIED: Final = 100
PROBE_TIMEOUT_S: Final = 2.0
SETTING: Final = "nodus.yaml: inference.gateway.port"


@dataclass(frozen=True)
class Address:
    host: str
    port: int

    @property
    def url(self) -> str:
        host = f"[{self.host}]" if ":" in self.host else self.host
        return f"http://{host}:{self.port}"

    @property
    def listen(self) -> str:
        return f"{self.host}:{self.port}"


@dataclass(frozen=True)
class Holder:
    """What answers `GET /health` at an address: a gateway names its project (id, folder) and pid; anything else
    names nothing."""

    project: str | None = None
    root: str | None = None
    pid: int | None = None

    def describe(self) -> str:
        if self.project is None:
            return "another process (not a nodus gateway)"
        where = f" {self.root}" if self.root else ""
        pid = f" (pid {self.pid})" if self.pid is not None else ""
        return f"the gateway of project{where}{pid}"


def project_id(store: StateStore, *, create: bool = False) -> str | None:
    """The id of the project's state store, made once (by the controller, under the apply lease)."""
    found = store.get_value(PROJECT_ID_VALUE)
    if found is None and create:
        found = f"prj_{secrets.token_hex(8)}"
        store.set_value(PROJECT_ID_VALUE, found)
    return found


def holder(address: Address, timeout: float = PROBE_TIMEOUT_S) -> Holder | None:
    """Who answers at `address` (loopback): None when nothing listens there."""
    connection = http.client.HTTPConnection(address.host, address.port, timeout=timeout)
    try:
        connection.request("GET", "/health")
        raw = connection.getresponse().read()
    except ConnectionRefusedError:
        return None
    except (OSError, http.client.HTTPException):
        return Holder()
    finally:
        connection.close()
    try:
        document = json.loads(raw)
    except ValueError:
        return Holder()
    if not isinstance(document, dict) or not isinstance(document.get("project"), str):
        return Holder()
    pid = document.get("pid")
    root = document.get("root")
    return Holder(document["project"], root if isinstance(root, str) else None, pid if isinstance(pid, int) else None)


def port_free(address: Address) -> bool:
    family = socket.AF_INET6 if ":" in address.host else socket.AF_INET
    with socket.socket(family, socket.SOCK_STREAM) as probe:
        probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)  # as the gateway binds it
        try:
            probe.bind((address.host, address.port))
        except OSError:
            return False
    return True


def address(project: Project, store: StateStore) -> Address:
    """The address the project's gateway listens on (or will, once an endpoint starts it): a read."""
    where = project.settings().inference.gateway
    if where.port is not None:
        return Address(where.host, where.port)
    stored = store.get_value(PORT_VALUE)
    return Address(where.host, int(stored) if stored and stored.isdigit() else DEFAULT_PORT)


def choose_address(project: Project, store: StateStore, running: str | None = None) -> Address:
    """Where to start the project's gateway (see the module docstring); `running` is the `HOST:PORT` its gateway
    listens on now, if it runs. ConfigError when nodus.yaml's port is another's, or no port is free."""
    own = project_id(store, create=True)
    where = project.settings().inference.gateway
    if where.port is not None:
        chosen = Address(where.host, where.port)
        if chosen.listen != running and not _usable(chosen, own):
            held = holder(chosen) or Holder()
            raise ConfigError(
                f"{SETTING} {chosen.port}: {chosen.listen} is taken by {held.describe()}",
                hint="give this project another port there, or leave it out to have a free one chosen",
            )
        return chosen
    stored = store.get_value(PORT_VALUE)
    # Its running gateway first (no restart), then the kept port, then 8400 and up.
    candidates = [int(running.rpartition(":")[2])] if running and running.startswith(f"{where.host}:") else []
    candidates += [int(stored)] if stored and stored.isdigit() else []
    candidates += [port for port in range(DEFAULT_PORT, DEFAULT_PORT + PORTS_TRIED) if port not in candidates]
    for port in candidates:
        chosen = Address(where.host, port)
        if chosen.listen == running or _usable(chosen, own):
            if str(port) != stored:
                store.set_value(PORT_VALUE, str(port))
            return chosen
    raise ConfigError(
        f"no free port for the gateway on {where.host} in {DEFAULT_PORT}-{DEFAULT_PORT + PORTS_TRIED - 1}",
        hint="give this project a port in nodus.yaml (inference: {gateway: {port: N}})",
    )


def _usable(chosen: Address, own: str | None) -> bool:
    """Free, or its own gateway's (started by an earlier nodus)."""
    if port_free(chosen):
        return True
    held = holder(chosen)
    return held is not None and held.project is not None and held.project == own


def check_gateway(project: Project, store: StateStore) -> Address:
    """The project's gateway address, once what answers there is its gateway: ConfigError (before any key is sent)
    when another project's gateway or another process answers, naming it."""
    found = address(project, store)
    held = holder(found)
    if held is None:
        raise ConfigError(
            f"{found.url}: no gateway answers (the project's gateway runs while one of its endpoints does)",
            hint="nodus get ep shows whether an endpoint runs; nodus start ep/NAME starts one",
        )
    own = project_id(store)
    if held.project is None or held.project != own:
        raise ConfigError(
            f"{found.url}: {held.describe()} answers there, not this project's ({project.root}): no key was sent",
            hint="nodus get ep shows this project's endpoints; each project's gateway has a port of its own",
        )
    return found
