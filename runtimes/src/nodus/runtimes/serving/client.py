"""A plain HTTP client of a model server (standard library only): JSON requests and Server-Sent Event streams, over
TCP on loopback or a Unix socket.

Who uses it: `readiness` (the /health and /v1/models checks of both backends), `bench/serving.py`, and the tests,
which read answers byte for byte as a gateway does (status codes, headers, every `data:` line of a stream) rather
than what an SDK makes of them.
"""

from __future__ import annotations

import http.client
import json
import socket
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

from nodus.runtimes.serving.backend import Listen


class UnixHTTPConnection(http.client.HTTPConnection):
    """HTTP over a Unix socket (the Host header stays `localhost`)."""

    def __init__(self, path: str, timeout: float) -> None:
        super().__init__("localhost", timeout=timeout)
        self.socket_path = path

    def connect(self) -> None:
        sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        sock.settimeout(self.timeout)
        sock.connect(self.socket_path)
        self.sock = sock


def connection(listen: Listen, timeout: float) -> http.client.HTTPConnection:
    if listen.uds is not None:
        return UnixHTTPConnection(str(listen.uds), timeout)
    assert listen.port is not None  # Listen holds one of uds or port
    return http.client.HTTPConnection(listen.host, listen.port, timeout=timeout)


@dataclass(frozen=True)
class Answer:
    status: int
    headers: dict[str, str]
    """Lower-case names."""
    body: Any
    """The JSON body, or None when empty."""


class ServingClient:
    def __init__(self, listen: Listen, *, api_key: str | None = None, timeout: float = 60.0) -> None:
        self.listen = listen
        self.api_key = api_key
        self.timeout = timeout

    @property
    def url(self) -> str:
        return self.listen.url

    def connection(self) -> http.client.HTTPConnection:
        return connection(self.listen, self.timeout)

    def headers(self, extra: dict[str, str] | None = None) -> dict[str, str]:
        auth = {"Authorization": f"Bearer {self.api_key}"} if self.api_key else {}
        return {"Content-Type": "application/json", **auth, **(extra or {})}

    def request(self, method: str, path: str, body: Any = None, headers: dict[str, str] | None = None) -> Answer:
        """One request; OSError when nothing answers. `body` is sent as JSON unless it is bytes already."""
        conn = self.connection()
        try:
            raw = body if isinstance(body, bytes) else (json.dumps(body).encode() if body is not None else None)
            conn.request(method, path, body=raw, headers=self.headers(headers))
            response = conn.getresponse()
            data = response.read()
            try:
                parsed = json.loads(data) if data else None
            except ValueError:
                parsed = data.decode(errors="replace")
            return Answer(response.status, {k.lower(): v for k, v in response.getheaders()}, parsed)
        finally:
            conn.close()

    def post(self, path: str, body: Any, headers: dict[str, str] | None = None) -> tuple[int, Any]:
        answer = self.request("POST", path, body, headers)
        return answer.status, answer.body

    def get(self, path: str) -> tuple[int, Any]:
        answer = self.request("GET", path)
        return answer.status, answer.body

    def stream(self, path: str, body: Any, headers: dict[str, str] | None = None) -> Iterator[str]:
        """The `data:` payloads of an SSE answer as they come (`[DONE]` as that string). A non-200 answer raises
        RuntimeError with its body."""
        conn = self.connection()
        try:
            conn.request("POST", path, body=json.dumps(body).encode(), headers=self.headers(headers))
            response = conn.getresponse()
            if response.status != 200:
                raise RuntimeError(f"{path}: {response.status} {response.read().decode(errors='replace')}")
            for line in response:
                if line.startswith(b"data: "):
                    yield line[len(b"data: ") :].decode().rstrip("\n")
        finally:
            conn.close()
