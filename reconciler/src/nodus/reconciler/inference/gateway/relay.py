"""A streamed answer relayed from the model server to the client, and how it ended: what the ledger settles.

Who uses it: the gateway's app (`app.py`) answers a `stream: true` request with a `StreamRelay`, an ASGI response
that reads the model server's Server-Sent Events, sends the client what the operation's translator makes of them,
and, however the stream ends, calls back with a `StreamEnd`:
- whole: the model server sent `[DONE]`, and the client got its completion marker;
- cut by the client (it closed the connection): the model server's request is dropped at once, so it stops;
- cut by the model server (an error event, a broken connection, an end without `[DONE]`) or by the gateway
  stopping (`cut()`): the client gets an error event and no completion marker.
The tokens produced so far are known at every point: the model server reports usage in every chunk
(`continuous_usage_stats`). The callback runs shielded from cancellation, so a stream cut by a server shutdown
is still settled.
"""

from __future__ import annotations

import json
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field

import anyio
from anyio import CancelScope
from starlette.types import Receive, Scope, Send

from nodus.reconciler.inference.gateway.operations.base import Payload, Translator, usage_of
from nodus.reconciler.inference.gateway.upstream import UpstreamError, UpstreamStream
from nodus.reconciler.inference.ledger import Usage

CLOSING_GRACE_S = 2.0
"""How long a stream the gateway cuts may take to send the client its error event."""


@dataclass
class StreamEnd:
    complete: bool = False
    """The model server finished it ([DONE]) and the client got the completion marker."""
    client_gone: bool = False
    cut_by: str = ""
    """Why it was cut, when it was (the model server's error, the gateway stopping)."""
    usage: Usage | None = None
    """The latest usage the model server reported; None when it reported none."""
    chunks: int = 0
    """Chunks relayed (the output estimate when the model server reports no usage)."""
    transcript: list[bytes] | None = None
    """Every byte sent, when the answer is kept for an Idempotency-Key."""

    def note(self, piece: bytes) -> None:
        if self.transcript is not None:
            self.transcript.append(piece)


def _error_payload(message: str) -> Payload:
    return {"error": {"message": message, "type": "Unavailable", "code": "Unavailable", "param": None}}


@dataclass(eq=False)
class StreamRelay:
    upstream: UpstreamStream
    translator: Translator
    headers: dict[str, str]
    on_end: Callable[[StreamEnd], Awaitable[None]]
    keep_transcript: bool = False
    media_type: str = "text/event-stream"
    end: StreamEnd = field(default_factory=StreamEnd)
    _scope: CancelScope | None = None
    _sent_all: bool = False

    def cut(self, reason: str) -> None:
        """Stop relaying now (the gateway is stopping): the client gets an error event, no completion marker."""
        if not self.end.complete and not self.end.cut_by:
            self.end.cut_by = reason
        if self._scope is not None:
            self._scope.cancel()

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        end = self.end
        if self.keep_transcript:
            end.transcript = []
        headers = [(name.lower().encode(), value.encode()) for name, value in self.headers.items()]
        headers.append((b"content-type", f"{self.media_type}; charset=utf-8".encode()))
        headers.append((b"cache-control", b"no-cache"))
        try:
            async with anyio.create_task_group() as group:
                self._scope = group.cancel_scope
                group.start_soon(self._watch_client, receive, group.cancel_scope)
                await send({"type": "http.response.start", "status": 200, "headers": headers})
                await self._relay(send)
                group.cancel_scope.cancel()
            if end.cut_by and not end.client_gone and not self._sent_all:
                # Cut by the gateway: tell the client, briefly, in a scope no cancellation reaches.
                with anyio.CancelScope(shield=True), anyio.move_on_after(CLOSING_GRACE_S):
                    await self._send_failure(send, end.cut_by)
                    await send({"type": "http.response.body", "body": b"", "more_body": False})
        finally:
            with anyio.CancelScope(shield=True):
                self.upstream.close()
                await self.on_end(end)

    async def _watch_client(self, receive: Receive, scope: CancelScope) -> None:
        while True:
            message = await receive()
            if message["type"] == "http.disconnect":
                # After the last byte went out, a disconnect is just the end of the exchange.
                if not self._sent_all:
                    self.end.client_gone = True
                scope.cancel()
                return

    async def _send(self, send: Send, pieces: list[bytes]) -> None:
        for piece in pieces:
            self.end.note(piece)
            await send({"type": "http.response.body", "body": piece, "more_body": True})

    async def _send_failure(self, send: Send, message: str) -> None:
        await self._send(send, self.translator.failed(_error_payload(message)))

    async def _relay(self, send: Send) -> None:
        end = self.end
        try:
            async for data in self.upstream.events():
                if data == "[DONE]":
                    end.complete = True
                    await self._send(send, self.translator.finished(end.usage or Usage()))
                    break
                try:
                    chunk = json.loads(data)
                except (ValueError, RecursionError):
                    continue  # not JSON: nothing a client of this route could read
                if not isinstance(chunk, dict):
                    continue
                if isinstance(chunk.get("error"), dict) and "choices" not in chunk:
                    end.cut_by = f"the model server cut the stream: {chunk['error'].get('message', '')}"
                    await self._send(send, self.translator.failed(chunk))
                    break
                usage = usage_of(chunk)
                if usage is not None:
                    end.usage = usage
                end.chunks += 1
                await self._send(send, self.translator.chunk(chunk))
        except UpstreamError as error:
            end.cut_by = str(error)
            await self._send_failure(send, str(error))
        if not end.complete and not end.cut_by:
            end.cut_by = "the model server ended the stream without [DONE]"
            await self._send_failure(send, end.cut_by)
        self._sent_all = True
        await send({"type": "http.response.body", "body": b"", "more_body": False})
