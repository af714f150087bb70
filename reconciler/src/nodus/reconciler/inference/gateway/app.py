"""The gateway's HTTP API: OpenAI's routes (and Anthropic's Messages) in front of the endpoints' model servers.

Who uses it: the gateway process (`server.py`, on uvicorn) and the tests (Starlette's test client). Every request
of a model route goes through one pipeline (`Gateway.handle`), authentication and the key's rights first, before
any other answer:
  API key (401: none, unknown, revoked, without the invoke scope) -> the endpoint of `/endpoints/PROJECT/NAME/v1/...`
  (401 another project's, 404) and whether it takes the key (401 `allowedKeys`) -> body (413 over 1 MiB) -> JSON
  (400: not JSON, nested deeper than 64, a repeated key) -> on the shared base URL, which endpoint
  (`model: "endpoint/NAME"`, or a model id an endpoint of the key's project serves, those that take the key first;
  404) and whether it takes the key (401 `allowedKeys`) -> is it Running (503) -> the operation's checks and bounds
  (400) -> the ledger admits it and holds its maximum cost, or refuses (401, 402, 409, 429), or returns the stored
  answer of an Idempotency-Key (`Idempotent-Replayed: true`) -> forward to the model server -> settle what it used,
  right after the answer is sent (or release it: an upstream failure is 502/503 `Unavailable`, not charged).
The body is read before the key is looked up (one trip to the store for both), but what is wrong with it is said
only after the key passed. A receipt is read only with the key that made its request; any other key gets the
404 a receipt nobody has gets (ids cannot be probed). `/v1/models` lists only what the key may call.
Routes, on the shared base URL and under `/endpoints/{project}/{endpoint}`: `POST /v1/chat/completions`,
`/v1/completions`, `/v1/responses`, `/v1/messages`, `/v1/embeddings`; `GET /v1/models`, `GET /v1/requests/{id}`
(the receipt). `GET /health` answers 200 without a key, naming the gateway's project (`identity`). Every response
carries `Nodus-Request-Id`; errors have OpenAI's shape with the seeds' code in `type` and `code`.
"""

from __future__ import annotations

import contextlib
import functools
import hashlib
import json
import logging
import time
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypeVar

import anyio
import anyio.to_thread
from starlette.applications import Starlette
from starlette.background import BackgroundTask
from starlette.exceptions import HTTPException
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from nodus.reconciler.inference.endpoints import Endpoint, EndpointDirectory, find_endpoint
from nodus.reconciler.inference.errors import ErrorCode, InferenceError, invalid, unavailable, unsupported
from nodus.reconciler.inference.gateway.body import MAX_BODY_BYTES, api_key, idempotency_key, parse_json, read_body
from nodus.reconciler.inference.gateway.group_commit import GroupCommit
from nodus.reconciler.inference.gateway.operations import OPERATIONS
from nodus.reconciler.inference.gateway.operations.base import Operation, Payload, Prepared, usage_of
from nodus.reconciler.inference.gateway.relay import StreamEnd, StreamRelay
from nodus.reconciler.inference.gateway.upstream import UpstreamAnswer, UpstreamError, Upstreams
from nodus.reconciler.inference.ids import new_request_id
from nodus.reconciler.inference.keys import ApiKey, find_key, secret_digest
from nodus.reconciler.inference.ledger import Admission, Ledger, Receipt, Replay, StoredAnswer, Usage, key_refusal
from nodus.reconciler.inference.money import rates_for
from nodus.reconciler.inference.upstream_keys import BEARER, upstream_key
from nodus.reconciler.pricing.prices import PriceTable
from nodus.reconciler.state.records import canonical

log = logging.getLogger("nodus.gateway")
REQUEST_ID_HEADER = "Nodus-Request-Id"
ENDPOINT_PREFIX = "/endpoints/{project}/{endpoint}"
KEY_TTL_S = 1.0
"""How long a key found live is taken as live before the store is read again (the ledger re-checks it anyway)."""
T = TypeVar("T")


class RequestIds:
    """ASGI middleware outside everything else: each request gets its id first, and every response (errors and
    crashes included) carries it in `Nodus-Request-Id`, unless the route set one (a replay names the original)."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        request_id = new_request_id()
        scope.setdefault("state", {})["request_id"] = request_id
        header = (REQUEST_ID_HEADER.lower().encode(), request_id.encode())

        async def with_id(message: Message) -> None:
            if message["type"] == "http.response.start":
                headers = list(message.get("headers", []))
                if not any(name.lower() == header[0] for name, _ in headers):
                    headers.append(header)
                message = {**message, "headers": headers}
            await send(message)

        await self.app(scope, receive, with_id)


def error_response(error: InferenceError) -> JSONResponse:
    return JSONResponse(error.payload(), status_code=error.status, headers=error.headers())


def same_model(requested: str, served: str) -> bool:
    """The model id itself, or its `nodus/` alias (`nodus/gpt-oss-20b` and `openai/gpt-oss-20b`)."""
    if requested == served:
        return True
    family = requested.rpartition("/")[2]
    return family == served.rpartition("/")[2] and "nodus/" in (requested[:6], served[:6])


def upstream_failure(endpoint: Endpoint, answer: UpstreamAnswer) -> InferenceError:
    """What a client gets for a model server's non-200 answer."""
    detail = answer.payload.get("error") if isinstance(answer.payload, dict) else None
    message = str(detail.get("message")) if isinstance(detail, dict) else answer.text[:300].strip()
    code = detail.get("code") if isinstance(detail, dict) else None
    if answer.status in (400, 413, 422):
        chosen = ErrorCode.UNSUPPORTED if code == ErrorCode.UNSUPPORTED else ErrorCode.INVALID
        return InferenceError(chosen, message or f"the model refused the request ({answer.status})", status=400)
    if answer.status == 404:
        return unavailable(
            f"endpoint {endpoint.name}: its model server does not serve {endpoint.served_model!r} (status.servedModel)",
            status=502,
        )
    if answer.status == 429:
        return unavailable(f"endpoint {endpoint.name}: the model is at capacity: {message}", retry_after=1)
    return unavailable(f"endpoint {endpoint.name}: the model failed ({answer.status}): {message}", status=502)


@dataclass
class Gateway:
    """The routes, bound to a ledger, the endpoints, the price table and the model servers' clients."""

    ledger: Ledger
    directory: EndpointDirectory
    prices: PriceTable
    upstreams: Upstreams
    gateway_id: str
    max_body_bytes: int = MAX_BODY_BYTES
    keys_folder: Path | None = None
    """The project's state folder, whose key file gives the keys of model servers on other machines."""
    identity: dict[str, Any] = field(default_factory=dict)
    """What `/health` says of whose gateway this is: the project's id, its folder and this process's pid, so a
    client asks before it sends a key (`inference.gateway_address.check_gateway`)."""

    def __post_init__(self) -> None:
        self.streams: set[StreamRelay] = set()
        self.stopping = False
        self.writes = GroupCommit(self.ledger.store)
        self.keys: dict[str, tuple[float, ApiKey]] = {}
        """Keys recently seen, by the sha256 of their secret."""
        self.upstream_keys: dict[tuple[str, str], str] = {}
        """Model servers' keys, by endpoint (`upstream_headers`)."""

    # ---- the app

    def app(self) -> ASGIApp:
        routes = [Route("/health", self.health, methods=["GET"])]
        for prefix in ("", ENDPOINT_PREFIX):
            for operation in OPERATIONS:
                routes.append(Route(prefix + operation.route, self.route_for(operation), methods=["POST"]))
            routes += [
                Route(prefix + "/v1/messages/count_tokens", self.count_tokens, methods=["POST"]),
                Route(prefix + "/v1/models", self.models, methods=["GET"]),
                Route(prefix + "/v1/requests/{request_id}", self.receipt, methods=["GET"]),
            ]
        app = Starlette(
            routes=routes,
            lifespan=self.lifespan,
            exception_handlers={
                InferenceError: self.on_inference_error,  # type: ignore[dict-item]
                HTTPException: self.on_http_error,  # type: ignore[dict-item]
                Exception: self.on_crash,
            },
        )
        return RequestIds(app)

    @contextlib.asynccontextmanager
    async def lifespan(self, app: Starlette) -> AsyncIterator[None]:
        try:
            yield
        finally:
            await self.upstreams.close()
            await anyio.to_thread.run_sync(self.writes.close)

    def cut_streams(self, reason: str) -> None:
        """Cut every stream in flight (the gateway is stopping): each is settled for what it produced."""
        self.stopping = True
        for relay in list(self.streams):
            relay.cut(reason)

    async def on_inference_error(self, request: Request, error: InferenceError) -> Response:
        return error_response(error)

    async def on_http_error(self, request: Request, error: HTTPException) -> Response:
        code = ErrorCode.NOT_FOUND if error.status_code == 404 else ErrorCode.INVALID
        message = f"{request.method} {request.url.path}: {error.detail}"
        return error_response(InferenceError(code, message, status=error.status_code))

    async def on_crash(self, request: Request, error: Exception) -> Response:
        log.exception("the gateway failed on %s %s", request.method, request.url.path)
        return error_response(unavailable(f"the gateway failed: {error.__class__.__name__}: {error}", status=502))

    # ---- plain routes

    async def health(self, request: Request) -> Response:
        return JSONResponse({"status": "ok", "gateway": self.gateway_id, **self.identity})

    async def count_tokens(self, request: Request) -> Response:
        await self.key_of(request)  # 401 before anything else
        raise unsupported("Messages token counting is not available")

    async def key_of(self, request: Request) -> ApiKey:
        return await self.thread(self.check_key, api_key(request))

    def check_key(self, secret: str) -> ApiKey:
        """The key of a secret (a read of the store: called off the event loop); 401 for none or a revoked one.
        A live key is remembered for `KEY_TTL_S`: the ledger checks it again, revocation included, inside the
        transaction that admits each request."""
        key = find_key(self.ledger.store, secret)
        if key is None:
            raise InferenceError(ErrorCode.UNAUTHORIZED, "invalid API key")
        if key.revoked:
            raise InferenceError(ErrorCode.UNAUTHORIZED, f"the API key {key.name} is revoked")
        refusal = key_refusal(key.project, key.name, key.scopes, None)
        if refusal is not None:
            raise refusal
        self.keys[secret_digest(secret)] = (time.monotonic(), key)
        return key

    @staticmethod
    def authorize(key: ApiKey, endpoint: Endpoint) -> None:
        """401 unless the key may call the endpoint (its project's, `allowedKeys`): asked before anything else
        about the endpoint is said (the ledger asks again when it admits)."""
        refusal = key_refusal(key.project, key.name, key.scopes, endpoint)
        if refusal is not None:
            raise refusal

    def known_key(self, secret: str) -> ApiKey | None:
        found = self.keys.get(secret_digest(secret))
        if found is None or time.monotonic() - found[0] >= KEY_TTL_S:
            return None
        return found[1]

    def identify(
        self,
        secret: str,
        body: Payload,
        malformed: InferenceError | None,
        params: dict[str, Any],
        key: ApiKey | None = None,
    ) -> tuple[ApiKey, Endpoint]:
        """The key, then the endpoint a request names and whether it takes the key. What is wrong with the body
        (413, 400) is said after the key is checked, and after the endpoint of an `/endpoints/...` path is: 401
        before anything else."""
        key = key or self.check_key(secret)
        pinned = self.pinned(params, key)
        if pinned is not None:
            self.authorize(key, pinned)
        if malformed is not None:
            raise malformed
        endpoint = self.resolve(key, body, pinned)
        self.authorize(key, endpoint)
        return key, endpoint

    async def models(self, request: Request) -> Response:
        key = await self.key_of(request)
        pinned = await self.thread(self.pinned, dict(request.path_params), key)
        if pinned is not None:
            self.authorize(key, pinned)
        endpoints = [pinned] if pinned else await self.thread(self.directory.endpoints, key.project)
        data: dict[str, Payload] = {}
        for endpoint in endpoints:
            if not endpoint.serving or not self.may_call(key, endpoint):
                continue
            operations = list(endpoint.operations or [operation.name for operation in OPERATIONS])
            entry = {"object": "model", "created": 0, "owned_by": endpoint.project, "operations": operations}
            family = endpoint.model.rpartition("/")[2]
            alias = f"nodus/{family}"
            data[f"endpoint/{endpoint.name}"] = {**entry, "id": f"endpoint/{endpoint.name}", "root": endpoint.model}
            aliases = [alias] if alias != endpoint.model else []
            data.setdefault(endpoint.model, {**entry, "id": endpoint.model, "root": endpoint.model, "aliases": aliases})
        return JSONResponse({"object": "list", "data": [data[name] for name in sorted(data)]})

    async def receipt(self, request: Request) -> Response:
        """A request's receipt, for the key that made the request only: any other key (of another project, or of
        this one, or one given the name of the revoked key that made it) gets the very answer of a receipt that
        does not exist, so request ids cannot be probed."""
        key = await self.key_of(request)
        params = dict(request.path_params)
        request_id = params.pop("request_id")
        pinned = await self.thread(self.pinned, params, key)
        found = await self.thread(self.ledger.receipt, request_id)
        if found is None or not self.made_by(found, key) or (pinned is not None and found.endpoint != pinned.name):
            raise InferenceError(ErrorCode.NOT_FOUND, f"request {request_id}: no receipt (receipts are kept 30 days)")
        return JSONResponse(found.to_json())

    @staticmethod
    def made_by(receipt: Receipt, key: ApiKey) -> bool:
        """Whether `key` made the request: its project and name, and it existed when the request was admitted (a
        key's name is free again once it is revoked, and a new key of that name did not make the old requests)."""
        return receipt.project == key.project and receipt.key_name == key.name and receipt.admitted_at >= key.created_at

    @staticmethod
    def may_call(key: ApiKey, endpoint: Endpoint) -> bool:
        return key_refusal(key.project, key.name, key.scopes, endpoint) is None

    # ---- the pipeline

    @staticmethod
    async def thread(function: Callable[..., T], *args: Any) -> T:
        """Run a state store call off the event loop (the store's drivers block)."""
        return await anyio.to_thread.run_sync(function, *args)

    def route_for(self, operation: Operation) -> Callable[[Request], Any]:
        async def route(request: Request) -> Response | StreamRelay:
            return await self.handle(request, operation)

        return route

    def pinned(self, params: dict[str, Any], key: ApiKey) -> Endpoint | None:
        """The endpoint of a `/endpoints/PROJECT/NAME/v1/...` path (None on the shared base URL)."""
        project = params.get("project")
        if project is None:
            return None
        name = params["endpoint"]
        if project != key.project:
            raise InferenceError(
                ErrorCode.UNAUTHORIZED, f"the API key {key.name} belongs to project {key.project}, not {project}"
            )
        found = find_endpoint(self.directory, project, name)
        if found is None:
            raise InferenceError(ErrorCode.NOT_FOUND, f"endpoint {project}/{name}: no such InferenceEndpoint")
        return found

    def resolve(self, key: ApiKey, body: Payload, pinned: Endpoint | None) -> Endpoint:
        if pinned is not None:
            return pinned
        model = body.get("model")
        if not isinstance(model, str) or not model:
            raise invalid("model: required (endpoint/NAME, or a model id an endpoint of your project serves)")
        if model.startswith("endpoint/"):
            name = model.removeprefix("endpoint/")
            found = find_endpoint(self.directory, key.project, name)
            if found is None:
                raise InferenceError(ErrorCode.NOT_FOUND, f"model: endpoint {name} is not in project {key.project}")
            return found
        candidates = [
            endpoint for endpoint in self.directory.endpoints(key.project) if same_model(model, endpoint.model)
        ]
        allowed = [endpoint for endpoint in candidates if self.may_call(key, endpoint)]
        for chosen in (allowed, candidates):  # one that takes the key first, else 401 (`authorize`)
            serving = [endpoint for endpoint in chosen if endpoint.serving]
            if serving or chosen:
                return (serving or chosen)[0]
        raise InferenceError(
            ErrorCode.NOT_FOUND,
            f"model: no endpoint of project {key.project} serves {model!r} (GET /v1/models lists what you can call)",
        )

    def upstream_headers(self, endpoint: Endpoint) -> dict[str, str]:
        """The endpoint's key for a model server that takes one (`upstreamAuth: Bearer`, on another machine)."""
        if endpoint.upstream_auth != BEARER:
            return {}
        if self.keys_folder is None:
            raise unavailable(f"endpoint {endpoint.name}: its model server takes a key and this gateway has no project")
        where = (endpoint.project, endpoint.name)
        key = self.upstream_keys.get(where)
        if key is None:  # read once: the key file is made once and never changes
            key = self.upstream_keys[where] = upstream_key(self.keys_folder, *where)
        return {"Authorization": f"Bearer {key}"}

    async def context_window(self, endpoint: Endpoint) -> int | None:
        if endpoint.max_model_len is not None:
            return endpoint.max_model_len
        assert endpoint.upstream is not None  # a serving endpoint names one
        try:
            models = await self.upstreams.models(endpoint.upstream, self.upstream_headers(endpoint))
        except UpstreamError as error:
            raise unavailable(f"endpoint {endpoint.name}: {error}") from None
        for entry in models:
            length = entry.get("max_model_len")
            if entry.get("id") == endpoint.served_model and isinstance(length, int) and length > 0:
                return length
        return None

    @staticmethod
    def holds(prepared: Prepared, context: int | None) -> tuple[int, int]:
        """(input, output) tokens the hold covers: the bounds, capped by the context window where it is known."""
        input_tokens = prepared.input_bound
        if context is not None:
            input_tokens = min(input_tokens, context * prepared.prompts)
        if prepared.max_output is not None:
            return input_tokens, prepared.max_output if context is None else min(prepared.max_output, context)
        if context is None:
            raise invalid(
                "max_tokens: required here (max_output_tokens for Responses): the endpoint's context window is "
                "unknown, so the most this request could cost cannot be held"
            )
        return input_tokens, context

    async def handle(self, request: Request, operation: Operation) -> Response | StreamRelay:
        request_id: str = request.state.request_id
        secret = api_key(request)  # 401 without one, before the body is read
        body: Payload = {}
        malformed: InferenceError | None = None  # 413 or 400: said once the key passed (`identify`)
        try:
            body = parse_json(await read_body(request, self.max_body_bytes))
        except InferenceError as error:
            malformed = error
        params = dict(request.path_params)
        known = self.known_key(secret)
        if known is not None and self.directory.is_fresh(known.project):
            # Everything at hand: no read of the store, so no trip to a worker thread.
            _, endpoint = self.identify(secret, body, malformed, params, known)
        else:
            _, endpoint = await self.thread(self.identify, secret, body, malformed, params)
        not_serving = endpoint.why_not_serving()
        if not_serving is not None:
            raise unavailable(not_serving, retry_after=5)
        if endpoint.operations is not None and operation.name not in endpoint.operations:
            raise unsupported(f"endpoint {endpoint.name}: its model does not serve {operation.name}")
        prepared = operation.prepare(body)
        prepared.client_model = prepared.client_model or endpoint.model
        input_tokens, output_tokens = self.holds(prepared, await self.context_window(endpoint))
        idempotency = idempotency_key(request)
        digest = hashlib.sha256(
            f"{operation.name}\n{endpoint.project}/{endpoint.name}\n{canonical(body)}".encode()
        ).hexdigest()
        admission = Admission(
            request_id=request_id,
            gateway=self.gateway_id,
            key_digest=secret_digest(secret),
            endpoint=endpoint,
            operation=operation.name,
            model=prepared.client_model,
            input_tokens=input_tokens,
            output_tokens=output_tokens,
            rates=rates_for(self.prices, endpoint.price_model),
            pricebook_version=self.prices.version,
            idempotency_key=idempotency,
            body_sha256=digest,
        )
        if self.stopping:
            raise unavailable("the gateway is stopping; retry shortly")
        result = await self.writes.call(functools.partial(self.ledger.admit, admission))
        if isinstance(result, Replay):
            headers = {"Idempotent-Replayed": "true", REQUEST_ID_HEADER: result.request_id}
            stored = result.answer
            return Response(stored.body, status_code=stored.status, media_type=stored.media_type, headers=headers)
        assert endpoint.upstream is not None, "a serving endpoint names its model server"
        assert endpoint.served_model is not None, "a serving endpoint names its served model"
        prepared.upstream_body["model"] = endpoint.served_model
        if prepared.stream:
            return await self.stream(endpoint, operation, prepared, admission)
        return await self.forward(endpoint, operation, prepared, admission)

    async def forward(
        self, endpoint: Endpoint, operation: Operation, prepared: Prepared, admission: Admission
    ) -> Response:
        request_id = admission.request_id
        assert endpoint.upstream is not None
        try:
            answer = await self.upstreams.post(
                endpoint.upstream,
                prepared.upstream_path,
                prepared.upstream_body,
                {"X-Request-Id": request_id, **self.upstream_headers(endpoint)},
            )
        except UpstreamError as error:
            await self.finish(request_id, self.ledger.release, str(error))
            raise unavailable(f"endpoint {endpoint.name}: {error}") from None
        except BaseException:
            # Cancelled (the gateway stopping) before the answer came: its outcome is never learned.
            await self.finish(request_id, self.ledger.abandon, "the gateway stopped before the model answered")
            raise
        if answer.status != 200 or not isinstance(answer.payload, dict):
            refusal = upstream_failure(endpoint, answer)
            await self.finish(request_id, self.ledger.release, f"the model server answered {answer.status}")
            raise refusal
        usage = usage_of(answer.payload)
        outcome = ""
        if usage is None:
            usage = Usage(admission.input_tokens, 0, admission.output_tokens)
            outcome = "the model server reported no usage: charged the hold"
        text = json.dumps(operation.answer(answer.payload, prepared, request_id), ensure_ascii=False)
        kept = StoredAnswer(200, "application/json", text) if admission.idempotency_key else None
        # Settled once the answer is sent: the client does not wait for the ledger's commit.
        settle = BackgroundTask(self.finish, request_id, self.ledger.settle, usage, answer=kept, outcome=outcome)
        return Response(text, media_type="application/json", background=settle)

    async def stream(
        self, endpoint: Endpoint, operation: Operation, prepared: Prepared, admission: Admission
    ) -> Response | StreamRelay:
        request_id = admission.request_id
        assert endpoint.upstream is not None
        try:
            upstream = await self.upstreams.open_stream(
                endpoint.upstream,
                prepared.upstream_path,
                prepared.upstream_body,
                {"X-Request-Id": request_id, **self.upstream_headers(endpoint)},
            )
        except UpstreamError as error:
            await self.finish(request_id, self.ledger.release, str(error))
            raise unavailable(f"endpoint {endpoint.name}: {error}") from None
        except BaseException:
            await self.finish(request_id, self.ledger.abandon, "the gateway stopped before the model answered")
            raise
        if upstream.status != 200:
            try:
                answer = await upstream.read()
            finally:
                upstream.close()
            await self.finish(request_id, self.ledger.release, f"the model server answered {upstream.status}")
            raise upstream_failure(endpoint, answer)

        async def ended(end: StreamEnd) -> None:
            self.streams.discard(relay)
            await self.stream_ended(admission, end)

        relay = StreamRelay(
            upstream=upstream,
            translator=operation.translator(prepared, request_id),
            headers={},
            on_end=ended,
            keep_transcript=admission.idempotency_key is not None,
        )
        self.streams.add(relay)
        return relay

    async def stream_ended(self, admission: Admission, end: StreamEnd) -> None:
        """Settle a stream for the tokens it produced; one that produced none is released."""
        usage = end.usage
        notes = []
        if usage is None:
            usage = Usage(admission.input_tokens if end.chunks else 0, 0, end.chunks)
            notes.append("the model server reported no usage: input charged at its bound, one token per chunk")
        if end.complete:
            outcome = "completed"
        elif end.cut_by:
            outcome = f"cut after {usage.output_tokens} output tokens: {end.cut_by}"
        else:
            outcome = f"the client closed the stream after {usage.output_tokens} output tokens"
        outcome = "; ".join([outcome, *notes])
        if not end.complete and usage.output_tokens == 0:
            await self.finish(admission.request_id, self.ledger.release, outcome)
            return
        kept = None
        if end.transcript is not None:
            kept = StoredAnswer(200, "text/event-stream", b"".join(end.transcript).decode("utf-8", "replace"))
        await self.finish(admission.request_id, self.ledger.settle, usage, answer=kept, outcome=outcome)

    async def finish(self, request_id: str, action: Callable[..., Any], *args: Any, **options: Any) -> None:
        """`action(request_id, *args, **options)`: settle, release or abandon a request, shielded from
        cancellation. A store failure here is logged, not raised: the answer is the client's either way, and a
        request left Running ends Unknown (never charged)."""
        with anyio.CancelScope(shield=True):
            try:
                await self.writes.call(functools.partial(action, request_id, *args, **options))
            except Exception:
                log.exception("the ledger could not record how request %s ended", request_id)
