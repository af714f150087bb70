"""The model server process: OpenAI's HTTP API over an `engine.Engine`, on Starlette and uvicorn.

Who uses it: `__main__` (`python -m nodus.runtimes.serving`), which the transformers backend's command line runs;
tests build the app with `create_app`. Routes: `GET /health`, `GET /v1/models`, `POST /v1/chat/completions`,
`POST /v1/completions`, `POST /v1/embeddings` (OpenAI's), and `GET /stats`, `GET /stats/requests/{id}` (nodus's:
the batching counters, and what the engine knows of one request, such as the tokens a cut stream produced).

A request's id is the gateway's `X-Request-Id` header where it sends one (else a fresh one); the answer echoes it,
its `id` is `chatcmpl-<id>` / `cmpl-<id>`, and /stats/requests/<id> finds it. A client that goes away stops its
generation at the next step, streamed or not. The process binds exactly where it is told (a loopback address or a
Unix socket), prints one JSON line on stdout once it answers (`{"event": "ready", "url": ..., ...}`), and on
SIGTERM or SIGINT cuts the streams in flight (no [DONE]), answers 503 to what is still waiting, removes its socket
and exits 0 without a traceback.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import os
import re
import signal
import socket
import stat
import sys
import time
import uuid
from collections.abc import Awaitable, Callable, Generator
from pathlib import Path
from types import FrameType
from typing import Any, Literal

import uvicorn
from starlette.applications import Starlette
from starlette.concurrency import run_in_threadpool
from starlette.exceptions import HTTPException
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route

from nodus.runtimes.serving import openai_api
from nodus.runtimes.serving.backend import Listen, ServingError
from nodus.runtimes.serving.engine import Engine, EngineError, Finished, GenerationRequest, Ticket
from nodus.runtimes.serving.openai_api import APIError, ChatRequest, CompletionRequest, EmbeddingRequest
from nodus.runtimes.serving.streaming import CancellingStreamingResponse, StreamSpec, sse

log = logging.getLogger("nodus.serving")
REQUEST_ID = re.compile(r"^[A-Za-z0-9._:-]{1,128}$")
ENGINE_ERRORS = {
    "invalid": (400, "Invalid"),
    "unsupported": (400, "Unsupported"),
    "not_found": (404, "NotFound"),
    "unavailable": (503, "Unavailable"),
}
Handler = Callable[[Request], Awaitable[Response]]


def api_error(error: EngineError) -> APIError:
    status, code = ENGINE_ERRORS[error.kind]
    return APIError(status, code, error.message)


class OpenAIServer:
    """The routes, bound to one engine."""

    def __init__(self, engine: Engine, api_key: str | None = None) -> None:
        self.engine = engine
        self.api_key = api_key
        self.names = {card.name for card in engine.models()}

    def app(self) -> Starlette:
        routes = [
            Route("/health", self.health, methods=["GET"]),
            Route("/v1/models", self.guarded(self.models), methods=["GET"]),
            Route("/v1/chat/completions", self.guarded(self.chat), methods=["POST"]),
            Route("/v1/completions", self.guarded(self.completions), methods=["POST"]),
            Route("/v1/embeddings", self.guarded(self.embeddings), methods=["POST"]),
            Route("/stats", self.stats, methods=["GET"]),
            Route("/stats/requests/{request_id}", self.request_stats, methods=["GET"]),
        ]
        return Starlette(
            routes=routes,
            exception_handlers={APIError: self.on_api_error, HTTPException: self.on_http_error},  # type: ignore[dict-item]
        )

    # --- plumbing ----------------------------------------------------------------------------------------------

    def guarded(self, handler: Handler) -> Handler:
        """The API key check of /v1 routes, where the server was given a key."""

        async def checked(request: Request) -> Response:
            if self.api_key is not None and request.headers.get("authorization") != f"Bearer {self.api_key}":
                raise APIError(401, "Unauthorized", "missing or wrong API key (Authorization: Bearer KEY)")
            return await handler(request)

        return checked

    async def on_api_error(self, request: Request, error: APIError) -> Response:
        headers = {"X-Request-Id": request.state.request_id} if hasattr(request.state, "request_id") else None
        return JSONResponse(error.payload(), status_code=error.status, headers=headers)

    async def on_http_error(self, request: Request, error: HTTPException) -> Response:
        code = {404: "NotFound", 405: "Invalid"}.get(error.status_code, "Invalid")
        message = f"{request.method} {request.url.path}: {error.detail}"
        return JSONResponse(APIError(error.status_code, code, message).payload(), status_code=error.status_code)

    async def body(self, request: Request) -> Any:
        request.state.request_id = request_id(request)
        raw = await request.body()
        try:
            return json.loads(raw)
        except (ValueError, UnicodeDecodeError):
            raise openai_api.invalid("the request body is not JSON") from None

    def check_model(self, name: str) -> None:
        if name not in self.names:
            served = ", ".join(sorted(self.names))
            raise APIError(404, "NotFound", f"model: {name!r} is not served here (served: {served})")

    # --- routes ------------------------------------------------------------------------------------------------

    async def health(self, request: Request) -> Response:
        return Response(status_code=200)

    async def models(self, request: Request) -> Response:
        created = int(time.time())
        data = [
            {
                "id": card.name,
                "object": "model",
                "created": created,
                "owned_by": "nodus",
                "root": card.root,
                "parent": card.parent,
                "max_model_len": card.max_model_len,
            }
            for card in self.engine.models()
        ]
        return JSONResponse({"object": "list", "data": data})

    async def stats(self, request: Request) -> Response:
        return JSONResponse(self.engine.stats())

    async def request_stats(self, request: Request) -> Response:
        record = self.engine.request_record(request.path_params["request_id"])
        if record is None:
            raise APIError(404, "NotFound", f"request {request.path_params['request_id']!r}: not known here")
        return JSONResponse(record)

    async def chat(self, request: Request) -> Response:
        body = openai_api.parse(ChatRequest, await self.body(request))
        self.check_model(body.model)
        body.refuse_unserved()
        messages = body.template_messages()
        try:
            prompt = await run_in_threadpool(
                self.engine.chat_prompt, messages, body.tools, dict(body.chat_template_kwargs or {})
            )
        except EngineError as error:
            raise api_error(error) from None
        return await self.generate(request, body, prompt, "chat")

    async def completions(self, request: Request) -> Response:
        body = openai_api.parse(CompletionRequest, await self.body(request))
        self.check_model(body.model)
        body.refuse_unserved()
        assert isinstance(body.prompt, str)  # refuse_unserved refused lists
        prompt = await run_in_threadpool(self.engine.text_prompt, body.prompt)
        return await self.generate(request, body, prompt, "text")

    async def generate(
        self, request: Request, body: ChatRequest | CompletionRequest, prompt: list[int], kind: Literal["chat", "text"]
    ) -> Response:
        rid = request.state.request_id
        sampling = body.sampling(len(prompt), self.engine.max_model_len, self.engine.default_sampling())
        try:
            ticket = self.engine.submit(
                GenerationRequest(rid, body.model, tuple(prompt), sampling), asyncio.get_running_loop()
            )
        except EngineError as error:
            raise api_error(error) from None
        response_id = f"{'chatcmpl' if kind == 'chat' else 'cmpl'}-{rid}"
        created = int(time.time())
        headers = {"X-Request-Id": rid}
        if body.stream:
            options = body.stream_options
            spec = StreamSpec(
                kind=kind,
                response_id=response_id,
                created=created,
                model=body.model,
                prompt_ids=tuple(prompt),
                include_usage=bool(options and options.include_usage),
                continuous_usage=bool(options and options.include_usage and options.continuous_usage_stats),
                return_token_ids=body.return_token_ids,
            )
            return CancellingStreamingResponse(sse(ticket, spec), on_close=ticket.cancel, headers=headers)
        finished = await until_finished_or_gone(request, ticket)
        if finished is None:  # the client went away: nobody reads this answer
            return Response(status_code=499, headers=headers)
        if finished.reason not in ("stop", "length"):
            raise APIError(503, "Unavailable", finished.error or f"the request ended: {finished.reason}")
        build = openai_api.chat_completion if kind == "chat" else openai_api.text_completion
        payload = build(
            response_id,
            created,
            body.model,
            finished.text,
            finished.reason,
            tuple(prompt),
            finished.token_ids,
            return_token_ids=body.return_token_ids,
        )
        return JSONResponse(payload, headers=headers)

    async def embeddings(self, request: Request) -> Response:
        body = openai_api.parse(EmbeddingRequest, await self.body(request))
        self.check_model(body.model)
        if not self.engine.embeddings:
            raise openai_api.unsupported("embeddings are not enabled on this server (start it with --embeddings)")
        texts = body.texts()
        try:
            vectors, tokens = await run_in_threadpool(self.engine.embed, body.model, texts)
        except EngineError as error:
            raise api_error(error) from None
        payload = openai_api.embedding_list(body.model, vectors, tokens, body.encoding_format)
        return JSONResponse(payload, headers={"X-Request-Id": request.state.request_id})


def request_id(request: Request) -> str:
    given = request.headers.get("x-request-id")
    if given is None:
        return uuid.uuid4().hex
    if not REQUEST_ID.match(given):
        raise openai_api.invalid("X-Request-Id: 1 to 128 letters, digits or . _ : -")
    return given


async def until_finished_or_gone(request: Request, ticket: Ticket) -> Finished | None:
    """The request's Finished, or None when its client disconnected first (then the request is cancelled)."""

    async def finished() -> Finished | None:
        async for item in ticket.events():
            if isinstance(item, Finished):
                return item
        return None

    async def disconnected() -> None:
        while (await request.receive())["type"] != "http.disconnect":
            pass

    result = asyncio.ensure_future(finished())
    gone = asyncio.ensure_future(disconnected())
    try:
        await asyncio.wait({result, gone}, return_when=asyncio.FIRST_COMPLETED)
    finally:
        gone.cancel()
        if not result.done():  # the client left first (or this handler was cancelled): stop the generation
            ticket.cancel()
            result.cancel()
    return result.result() if result.done() and not result.cancelled() else None


def create_app(engine: Engine, api_key: str | None = None) -> Starlette:
    return OpenAIServer(engine, api_key).app()


# --- the process ----------------------------------------------------------------------------------------------


def bind(listen: Listen) -> socket.socket:
    """The server's socket, bound here so that a taken address fails before the model loads, the ready line can
    name the real port (--port 0 takes a free one) and a Unix socket gets mode 0600. It is not listening yet: until
    the server answers, a client's connection is refused (as `vllm serve` refuses it while its engine loads), never
    left waiting. An existing path is replaced only when it is a stale socket (nothing answers on it)."""
    if listen.uds is not None:
        path = listen.uds
        if path.exists() or path.is_symlink():
            if not stat.S_ISSOCK(path.lstat().st_mode):
                raise ServingError(f"--uds {path}: exists and is not a socket; not replaced")
            if socket_answers(path):
                raise ServingError(f"--uds {path}: another server is listening there")
            path.unlink()
        sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        try:
            sock.bind(str(path))
        except OSError as error:
            sock.close()
            raise ServingError(f"--uds {path}: cannot bind: {error.strerror}") from None
        os.chmod(path, 0o600)
    else:
        family = socket.AF_INET6 if ":" in listen.host else socket.AF_INET
        sock = socket.socket(family, socket.SOCK_STREAM)
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            sock.bind((listen.host, listen.port or 0))
        except OSError as error:
            sock.close()
            raise ServingError(
                f"--port {listen.port}: cannot bind {listen.host}:{listen.port}: {error.strerror}"
            ) from None
    sock.setblocking(False)
    return sock  # asyncio's server calls listen() when it starts serving


def socket_answers(path: Path) -> bool:
    probe = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        probe.connect(str(path))
        return True
    except OSError:
        return False
    finally:
        probe.close()


def bound_listen(listen: Listen, sock: socket.socket) -> Listen:
    if listen.uds is not None:
        return listen
    return Listen(host=listen.host, port=int(sock.getsockname()[1]))


class Server(uvicorn.Server):
    """uvicorn's server, stopping the engine first on SIGTERM/SIGINT so streams in flight are cut at once (uvicorn
    alone would wait for them to end), and exiting 0 afterwards (uvicorn re-raises the signal once it has shut
    down, which would end the process before the socket is removed)."""

    def __init__(self, config: uvicorn.Config, engine: Engine) -> None:
        super().__init__(config)
        self.engine = engine
        self.loop: asyncio.AbstractEventLoop | None = None
        self.signal_name: str | None = None

    @contextlib.contextmanager
    def capture_signals(self) -> Generator[None, None, None]:
        originals = {sig: signal.signal(sig, self.handle_exit) for sig in (signal.SIGINT, signal.SIGTERM)}
        try:
            yield
        finally:
            for sig, handler in originals.items():
                signal.signal(sig, handler)

    def handle_exit(self, sig: int, frame: FrameType | None) -> None:
        self.signal_name = signal.Signals(sig).name
        if self.loop is not None:  # the engine's lock may be held by this very thread: act from the loop instead
            self.loop.call_soon_threadsafe(self.engine.shutdown)
        else:
            self.engine.shutdown()
        super().handle_exit(sig, frame)


async def run(engine: Engine, listen: Listen, sock: socket.socket, api_key: str | None) -> str | None:
    """Serve until a signal; prints the ready line once the server answers. The signal's name, if one ended it."""
    config = uvicorn.Config(
        create_app(engine, api_key),
        log_level="warning",
        access_log=False,
        lifespan="off",
        timeout_graceful_shutdown=5,
    )
    server = Server(config, engine)
    server.loop = asyncio.get_running_loop()
    serving = asyncio.ensure_future(server.serve(sockets=[sock]))
    while not server.started and not serving.done():
        await asyncio.sleep(0.01)
    if server.started:
        ready = {
            "event": "ready",
            "url": listen.url,
            "uds": str(listen.uds) if listen.uds is not None else None,
            "models": [card.name for card in engine.models()],
            "backend": engine.backend,
            "pid": os.getpid(),
        }
        print(json.dumps(ready), flush=True)
    try:
        await serving
    except OSError as error:  # listen() failed: another server took the port between our bind and now
        raise ServingError(f"{listen.describe()}: cannot listen: {error.strerror or error}") from None
    return server.signal_name


def release(listen: Listen, sock: socket.socket) -> None:
    """Close the listening socket and remove a Unix socket's path."""
    sock.close()
    if listen.uds is not None:
        with contextlib.suppress(FileNotFoundError):
            listen.uds.unlink()


def serve(engine: Engine, listen: Listen, sock: socket.socket, api_key: str | None = None) -> int:
    """Serve on `sock` (from `bind(listen)`) until a signal, then stop the engine and release the socket: the exit
    code of the process."""
    listen = bound_listen(listen, sock)
    try:
        stopped_by = asyncio.run(run(engine, listen, sock, api_key))
    finally:
        engine.shutdown()
        engine.close()
        release(listen, sock)
    print(f"nodus serving: stopped{f' by {stopped_by}' if stopped_by else ''}", file=sys.stderr, flush=True)
    return 0
