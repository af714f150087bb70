"""One member of a gang: a Ray actor in its bundle of the gang's placement group, running one rank's command.

Who uses it: `gang_coordinator.py` makes one per rank (`ray.remote(GangMember)`, threaded so that `output` and
`stop` answer while `run` waits on the command) and kills every one at the end of each epoch.

Why an actor and not a task: the coordinator must read a rank's output while it runs (the Ray job's log is all
anyone sees of a gang, and a member lost mid-run must not take its lines with it), stop the survivors of an epoch
that lost a member, and learn that a member is gone (its actor dies with its node: any call raises).

The command runs in a session of its own, so `stop` ends its whole process tree (torchrun and its workers) and
nothing else; and it gets SIGKILL when the thread that started it dies (`PR_SET_PDEATHSIG`), so a member whose
actor died (its raylet gone while the machine stays) leaves no rank of an old epoch running to join a new one.
Its environment is explicit (`member_env`): what the coordinator gives it over the base one of this node's, plus the
node's variables its gang's kind names (`node_variables`: Ray's settings for a `Ray` launcher's nodes, a node
session's registry credentials and Secret variables), never the whole environment of the Ray worker.
"""

from __future__ import annotations

import contextlib
import ctypes
import os
import signal
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Final

from nodus.errors import ConfigError

from ..process_env import base_environment

STOP_GRACE_S: Final = 10.0
"""Between SIGTERM and SIGKILL of a stopped member's process group."""
PR_SET_PDEATHSIG: Final = 1


def _die_with_parent() -> None:  # pragma: no cover - runs in the child between fork and exec
    with contextlib.suppress(OSError, AttributeError):
        ctypes.CDLL(None, use_errno=True).prctl(PR_SET_PDEATHSIG, signal.SIGKILL)


def member_env(environ: Mapping[str, str], env: Mapping[str, str], node_variables: Sequence[str]) -> dict[str, str]:
    """A rank's environment: of this node's (`environ`, the Ray worker's) the base one (`process_env`) and
    `node_variables`, this Python's scripts first on PATH (torchrun, accelerate: the node's PATH may lack the
    environment's bin), then `env`. A ConfigError for a bad NODUS_PASS_ENV on this node."""
    base = base_environment(environ, extra=node_variables)
    path = os.pathsep.join([str(Path(sys.executable).parent), environ.get("PATH", os.defpath)])
    return {**base, "PATH": path, **env}


class GangMember:
    """A rank's command on this node, with its output kept for the coordinator to read by offset."""

    def __init__(self) -> None:
        self._output = bytearray()
        self._lock = threading.Lock()
        self._process: subprocess.Popen[bytes] | None = None
        self._stopped = False

    def address(self) -> dict[str, str]:
        """This node's address and Ray node id (the coordinator's topology line and the rank variables)."""
        import ray

        context = ray.get_runtime_context()
        return {"ip": str(ray.util.get_node_ip_address()), "node": str(context.get_node_id())}  # type: ignore[no-untyped-call]

    def reachable(self, host: str, port: int, timeout_s: float = 5.0) -> str | None:
        """None when a TCP connection to `host:port` opens from this node, else why not (the network check)."""
        try:
            with socket.create_connection((host, port), timeout=timeout_s):
                return None
        except OSError as exc:
            return f"{host}:{port}: {exc.strerror or exc}"

    def listen(self) -> int:
        """Open a listening TCP port on this node for the other members' check; its number."""
        server = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        server.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        server.bind(("0.0.0.0", 0))
        server.listen(16)
        threading.Thread(target=self._accept, args=(server,), daemon=True).start()
        return int(server.getsockname()[1])

    @staticmethod
    def _accept(server: socket.socket) -> None:
        while True:
            try:
                connection, _ = server.accept()
            except OSError:
                return
            connection.close()

    def run(
        self, command: Sequence[str], env: Mapping[str, str], cwd: str | None, node_variables: Sequence[str] = ()
    ) -> int:
        """Run the rank's command to its end; its exit status (127 when it could not start). `env` is what the
        coordinator gives it; `node_variables` (names or `PREFIX*`) what it needs of this node's own environment
        besides the base one (`member_env`)."""
        try:
            process = subprocess.Popen(
                list(command),
                env=member_env(os.environ, env, node_variables),
                cwd=cwd if cwd and Path(cwd).is_dir() else None,
                stdin=subprocess.DEVNULL,
                stdout=subprocess.PIPE,
                stderr=subprocess.STDOUT,
                start_new_session=True,
                preexec_fn=_die_with_parent,
            )
        except (OSError, ConfigError) as exc:
            why = exc.message if isinstance(exc, ConfigError) else exc.strerror or exc
            self._append(f"{command[0]}: {why}\n".encode())
            return 127
        with self._lock:
            self._process = process
            stopped = self._stopped
        if stopped:  # stopped before it started
            self._signal(signal.SIGKILL)
        stdout = process.stdout
        assert stdout is not None
        while chunk := os.read(stdout.fileno(), 65536):  # what is there, as it comes
            self._append(chunk)
        stdout.close()
        return process.wait()

    def output(self, offset: int) -> bytes:
        """What the command wrote from `offset` on."""
        with self._lock:
            return bytes(self._output[offset:])

    def stop(self) -> None:
        """End the command's whole process tree: SIGTERM, then SIGKILL after STOP_GRACE_S."""
        with self._lock:
            self._stopped = True
            process = self._process
        if process is None:
            return
        # The group even when its leader has ended: torchrun's workers may outlive it.
        self._signal(signal.SIGTERM)
        deadline = time.monotonic() + STOP_GRACE_S
        while process.poll() is None and time.monotonic() < deadline:
            time.sleep(0.1)
        self._signal(signal.SIGKILL)

    def _signal(self, number: int) -> None:
        process = self._process
        if process is not None:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(process.pid, number)  # its own session: the group id is its pid

    def _append(self, data: bytes) -> None:
        with self._lock:
            self._output += data
