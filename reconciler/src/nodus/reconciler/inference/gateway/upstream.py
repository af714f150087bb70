"""The gateway's client of model servers: OpenAI-compatible HTTP on a Unix socket or a loopback TCP port.

Who uses it: the gateway's routes, to forward a request to the endpoint's model server (`status.upstream`:
`unix:/path/to.sock` or `http://127.0.0.1:PORT`) and relay its answer or stream, and to read the context window
from `/v1/models`. One pooled aiohttp session per model server, made on first use inside the gateway's event loop
and closed with it. Nothing here raises for an HTTP status: the caller decides what a 4xx or 5xx means; a server
that cannot be reached, or that breaks a connection, is `UpstreamError`.
"""

from __future__ import annotations

import json
import time
from collections.abc import AsyncIterator
from dataclasses import dataclass
from typing import Any

import aiohttp

CONNECT_TIMEOUT_S = 10.0
READ_TIMEOUT_S = 600.0
"""The longest a model server may be silent mid-answer (a long prompt's prefill, a slow first token)."""
MODELS_TTL_S = 60.0
_READ_BUFFER = 1 << 20
"""Bytes one SSE line may have (a chunk with token ids, a long tool call's arguments)."""


class UpstreamError(Exception):
    """The model server could not be reached, or broke the connection; the message is one line."""


@dataclass(frozen=True)
class UpstreamAnswer:
    status: int
    payload: Any
    """The JSON body, or None when it was not JSON."""
    text: str


class UpstreamStream:
    """An SSE answer being read: `events()` yields each event's data (`[DONE]` as that string)."""

    def __init__(self, response: aiohttp.ClientResponse) -> None:
        self.response = response
        self.status = response.status

    async def events(self) -> AsyncIterator[str]:
        data: list[str] = []
        try:
            async for raw in self.response.content:
                line = raw.decode("utf-8").rstrip("\r\n")
                if not line:
                    if data:
                        yield "\n".join(data)
                        data = []
                    continue
                if line.startswith("data:"):
                    data.append(line[5:].removeprefix(" "))
        except (aiohttp.ClientError, ValueError) as error:
            raise UpstreamError(f"the model server broke the stream ({error.__class__.__name__}: {error})") from None
        if data:
            yield "\n".join(data)

    async def read(self) -> UpstreamAnswer:
        return await _answer(self.response)

    def close(self) -> None:
        """Drop the connection: the model server sees the client gone and stops generating."""
        self.response.close()


async def _answer(response: aiohttp.ClientResponse) -> UpstreamAnswer:
    try:
        text = await response.text()
    except (aiohttp.ClientError, ValueError) as error:
        raise UpstreamError(f"the model server broke the answer ({error.__class__.__name__}: {error})") from None
    try:
        payload = json.loads(text) if text else None
    except (ValueError, RecursionError):  # a model server's answer nested past json's recursion too
        payload = None
    return UpstreamAnswer(response.status, payload, text)


def _base(address: str) -> tuple[str, str | None]:
    """(base URL, Unix socket path or None) of an upstream address."""
    if address.startswith("unix:"):
        return "http://localhost", address.removeprefix("unix:")
    if address.startswith("http://"):
        return address.rstrip("/"), None
    raise UpstreamError(f"status.upstream {address!r}: not unix:/PATH or http://HOST:PORT")


class Upstreams:
    """Sessions to model servers, one per address."""

    def __init__(self, *, connect_timeout_s: float = CONNECT_TIMEOUT_S, read_timeout_s: float = READ_TIMEOUT_S):
        self._timeout = aiohttp.ClientTimeout(total=None, connect=connect_timeout_s, sock_read=read_timeout_s)
        self._sessions: dict[str, tuple[aiohttp.ClientSession, str]] = {}
        self._models: dict[str, tuple[float, list[dict[str, Any]]]] = {}

    def _session(self, address: str) -> tuple[aiohttp.ClientSession, str]:
        found = self._sessions.get(address)
        if found is not None and not found[0].closed:
            return found
        base, socket_path = _base(address)
        connector: aiohttp.BaseConnector
        if socket_path is not None:
            connector = aiohttp.UnixConnector(path=socket_path, limit=1000)
        else:
            connector = aiohttp.TCPConnector(limit=1000)
        session = aiohttp.ClientSession(
            connector=connector, timeout=self._timeout, read_bufsize=_READ_BUFFER, auto_decompress=True
        )
        self._sessions[address] = (session, base)
        return session, base

    async def _send(
        self, address: str, method: str, path: str, body: Any, headers: dict[str, str]
    ) -> aiohttp.ClientResponse:
        session, base = self._session(address)
        data = json.dumps(body).encode() if body is not None else None
        sent = {"Content-Type": "application/json", **headers} if data is not None else headers
        try:
            return await session.request(method, base + path, data=data, headers=sent)
        except (aiohttp.ClientError, OSError, TimeoutError) as error:
            raise UpstreamError(
                f"the model server at {address} does not answer ({error.__class__.__name__}: {error})"
            ) from None

    async def post(self, address: str, path: str, body: Any, headers: dict[str, str]) -> UpstreamAnswer:
        response = await self._send(address, "POST", path, body, headers)
        try:
            return await _answer(response)
        finally:
            response.release()

    async def open_stream(self, address: str, path: str, body: Any, headers: dict[str, str]) -> UpstreamStream:
        """The answer of a `stream: true` request, its body not yet read; the caller closes it."""
        return UpstreamStream(await self._send(address, "POST", path, body, headers))

    async def models(self, address: str, headers: dict[str, str] | None = None) -> list[dict[str, Any]]:
        """`/v1/models` of a model server (`data`), kept for a minute."""
        cached = self._models.get(address)
        now = time.monotonic()
        if cached is not None and now - cached[0] < MODELS_TTL_S:
            return cached[1]
        response = await self._send(address, "GET", "/v1/models", None, headers or {})
        try:
            answer = await _answer(response)
        finally:
            response.release()
        data = answer.payload.get("data") if isinstance(answer.payload, dict) else None
        if answer.status != 200 or not isinstance(data, list):
            raise UpstreamError(f"the model server at {address} answers /v1/models with {answer.status}")
        models = [entry for entry in data if isinstance(entry, dict)]
        self._models[address] = (now, models)
        return models

    async def close(self) -> None:
        sessions = list(self._sessions.values())
        self._sessions.clear()
        for session, _ in sessions:
            await session.close()
