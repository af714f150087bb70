"""Gateway processes for the tests: started as the controller starts them, read like a client reads them.

Who uses it: test_gateway_process.py and test_end_to_end.py. `gateway_process` runs `python -m
nodus.reconciler.inference.gateway` on a Unix socket (or a loopback port), waits for its ready line, and stops it by
its pid (SIGTERM, then SIGKILL if it will not go). `UnixHTTP` is a plain HTTP client over a Unix socket that reads
answers byte for byte (status, headers, each SSE line) and can hang up mid-stream.
"""

from __future__ import annotations

import http.client
import json
import os
import selectors
import signal
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

PRICES = """version: test-2026-12
inference:
  tiny-qwen3: {input: "1.00", output: "2.00"}
"""


def prices_file(folder: Path) -> Path:
    path = folder / "prices.yaml"
    path.write_text(PRICES)
    return path


@dataclass
class RunningGateway:
    process: subprocess.Popen[str]
    socket: Path | None
    ready: dict[str, Any]

    @property
    def upstream(self) -> str:
        return f"unix:{self.socket}" if self.socket else str(self.ready["url"])

    def client(self) -> UnixHTTP:
        assert self.socket is not None
        return UnixHTTP(self.socket)

    def stop(self, sig: int = signal.SIGTERM, timeout: float = 30) -> tuple[int, str]:
        """Signal it by pid and wait: (exit code, stderr)."""
        if self.process.poll() is None:
            os.kill(self.process.pid, sig)
        try:
            _, err = self.process.communicate(timeout=timeout)
        except subprocess.TimeoutExpired:
            os.kill(self.process.pid, signal.SIGKILL)
            _, err = self.process.communicate(timeout=10)
        return self.process.returncode, err


def read_line(process: subprocess.Popen[str], timeout: float) -> str:
    assert process.stdout is not None
    selector = selectors.DefaultSelector()
    selector.register(process.stdout, selectors.EVENT_READ)
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if selector.select(timeout=0.1):
            return process.stdout.readline()
        if process.poll() is not None:
            break
    return ""


@contextmanager
def gateway_process(state: str, folder: Path, *extra: str, tcp: bool = False) -> Iterator[RunningGateway]:
    sockets = Path(tempfile.mkdtemp(prefix="nodus-gwp-"))  # short: a socket path has at most 108 bytes
    where = ["--port", "0"] if tcp else ["--uds", str(sockets / "gw.sock")]
    argv = [sys.executable, "-m", "nodus.reconciler.inference.gateway", "--state", state, *where]
    argv += ["--prices", str(prices_file(folder)), "--endpoints-ttl", "0", *extra]
    process = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    running: RunningGateway | None = None
    try:
        line = read_line(process, 60)
        if not line:
            process.kill()
            _, err = process.communicate(timeout=10)
            raise AssertionError(f"the gateway did not start: {err}")
        running = RunningGateway(process, None if tcp else sockets / "gw.sock", json.loads(line))
        yield running
    finally:
        if process.poll() is None:
            os.kill(process.pid, signal.SIGTERM)
            try:
                process.communicate(timeout=30)
            except subprocess.TimeoutExpired:
                os.kill(process.pid, signal.SIGKILL)
                process.communicate(timeout=10)
        for leftover in sockets.iterdir():
            leftover.unlink()
        sockets.rmdir()


class _UnixConnection(http.client.HTTPConnection):
    def __init__(self, path: Path, timeout: float) -> None:
        super().__init__("localhost", timeout=timeout)
        self.socket_path = path

    def connect(self) -> None:
        sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        sock.settimeout(self.timeout)
        sock.connect(str(self.socket_path))
        self.sock = sock


@dataclass
class Answer:
    status: int
    headers: dict[str, str]
    body: Any


class UnixHTTP:
    def __init__(self, path: Path, timeout: float = 60) -> None:
        self.path = path
        self.timeout = timeout

    def request(self, method: str, url: str, body: Any = None, headers: dict[str, str] | None = None) -> Answer:
        connection = _UnixConnection(self.path, self.timeout)
        try:
            data = json.dumps(body).encode() if body is not None else None
            connection.request(method, url, body=data, headers={"Content-Type": "application/json", **(headers or {})})
            response = connection.getresponse()
            raw = response.read()
            return Answer(
                response.status, {k.lower(): v for k, v in response.getheaders()}, json.loads(raw) if raw else None
            )
        finally:
            connection.close()

    @contextmanager
    def open_stream(self, url: str, body: Any, headers: dict[str, str]) -> Iterator[http.client.HTTPResponse]:
        """The response of a streamed request; leaving the block hangs up, read or not."""
        connection = _UnixConnection(self.path, self.timeout)
        try:
            connection.request(
                "POST", url, body=json.dumps(body).encode(), headers={"Content-Type": "application/json", **headers}
            )
            yield connection.getresponse()
        finally:
            if connection.sock is not None:
                connection.sock.shutdown(socket.SHUT_RDWR)
            connection.close()


def data_lines(response: http.client.HTTPResponse, limit: int | None = None) -> list[str]:
    """The `data:` payloads of an SSE answer, up to `limit` of them."""
    found: list[str] = []
    for raw in response:
        line = raw.decode().rstrip("\n")
        if line.startswith("data: "):
            found.append(line.removeprefix("data: "))
            if limit is not None and len(found) >= limit:
                break
    return found


def wait_for(check: Any, timeout: float = 20.0, interval: float = 0.05) -> Any:
    """Poll `check()` until it returns something truthy; that value, or AssertionError at the timeout."""
    deadline = time.monotonic() + timeout
    while True:
        value = check()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"not so after {timeout:g}s")
        time.sleep(interval)
