"""A real OCI registry for tests: Debian's docker-registry (distribution 2.8.2) on 127.0.0.1 and a free port.

Who uses it: the `local_registry` fixtures (builder/tests/conftest.py, tests/test_workflows.py) and the Ray channel's
tests, which start it inside the test cluster's network namespace (`netns=`) so that the cluster's nodes reach it on
their own loopback. Storage lives under the folder given; the process is stopped by its own pid.

    with registry_server(tmp_path / "registry") as address:      # "127.0.0.1:PORT"
        push(layout, tag, RegistryRef.parse(f"{address}/nodus/envs"))
"""

from __future__ import annotations

import contextlib
import json
import socket
import subprocess
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Final

from nodus.builder import host_programs
from nodus.reconciler.executors.ray import netns as namespaces

DOCKER_REGISTRY: Final = Path("/usr/bin/docker-registry")
START_S: Final = 15.0


class RegistryUnavailableError(RuntimeError):
    """docker-registry is not installed here (the tests skip) or did not start (they fail with its log)."""


def installed() -> Path | None:
    found = host_programs.which("docker-registry")
    if found:
        return Path(found)
    return DOCKER_REGISTRY if DOCKER_REGISTRY.exists() else None


def free_port() -> int:
    """A port nothing listens on right now (in the calling thread's network namespace)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as probe:
        probe.bind(("127.0.0.1", 0))
        port: int = probe.getsockname()[1]
        return port


def answers(url: str) -> bool:
    direct = urllib.request.build_opener(urllib.request.ProxyHandler({}))  # loopback never goes through a proxy
    try:
        with direct.open(url, timeout=1) as response:
            return bool(response.status == 200)
    except OSError:  # refused while it starts; URLError and HTTPError are OSErrors too
        return False


@contextlib.contextmanager
def registry_server(root: Path, *, netns: str | None = None, deletes: bool = True) -> Iterator[str]:
    """A registry storing under `root` for the `with` block: `127.0.0.1:PORT`, in namespace `netns` when given
    (reach it from a thread inside: `netns.entered`). RegistryUnavailableError when it is not installed or did not
    start."""
    binary = installed()
    if binary is None:
        raise RegistryUnavailableError("docker-registry is not installed (apt-get install docker-registry)")
    root.mkdir(parents=True, exist_ok=True)
    with namespaces.entered(netns):
        port = free_port()
    storage: dict[str, object] = {"filesystem": {"rootdirectory": str(root / "storage")}}
    if deletes:
        storage["delete"] = {"enabled": True}
    config = {
        "version": 0.1,
        "log": {"level": "warn", "accesslog": {"disabled": True}},
        "storage": storage,
        "http": {"addr": f"127.0.0.1:{port}"},
    }
    (root / "config.yml").write_text(json.dumps(config), encoding="utf-8")  # JSON is YAML
    argv = [*namespaces.exec_prefix(netns), str(binary), "serve", str(root / "config.yml")]
    with (root / "registry.log").open("wb") as log:
        process = subprocess.Popen(argv, stdout=log, stderr=subprocess.STDOUT)
        try:
            deadline = time.monotonic() + START_S
            while True:
                with namespaces.entered(netns):
                    if answers(f"http://127.0.0.1:{port}/v2/"):
                        break
                if process.poll() is not None or time.monotonic() > deadline:
                    output = (root / "registry.log").read_text(errors="replace")[-2000:]
                    raise RegistryUnavailableError(f"docker-registry did not start on 127.0.0.1:{port}: {output}")
                time.sleep(0.05)
            yield f"127.0.0.1:{port}"
        finally:
            process.terminate()
            try:
                process.wait(timeout=10)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait()
