"""The attempt API: how a trainer gets its tasks, has completions graded and reports progress.

Who uses it: the job session (`session.py`) serves it on a Unix socket (path in `NODUS_ATTEMPT_API`) for the
one job it runs, wherever that runs (the local supervisor today); trainers (the runtimes, the test runtime) are
its clients. HTTP/1.1, JSON bodies, POST only:

    POST /trainingjobs/{name}/tasks      -> {"files": {"train.jsonl": "...", "test.jsonl": "..."}}
                                            one {"taskId", "prompt", "metadata"} per line, never an answer
    POST /trainingjobs/{name}/gradings   {"items": [{"taskId", "completion"} | {"taskId", "turns"}, ...],
                                          "phase"?: "Baseline" | "Training" | "Evaluation"}  (Training if left out)
                                         an item may name its GRPO group, `"group": "..."` and `"episode": n`
                                         (a multi-turn trainer grades each turn alone; the summary needs them)
                                         -> {"verdicts": [{"taskId", "verdict", "reward", "evidence"}, ...]}
                                            (the evidence without the sandbox's argv, which names host folders)
    POST /trainingjobs/{name}/events     {"stage"?, "step"?, "totalSteps"?, "metrics"?, "summary"?, "message"?}
                                         -> {"accepted": true}

(`/jobs/{name}/...` is the same for a plain Job.) Errors are `{"error": "..."}` with 400 (bad body), 404
(unknown path or another job's name), 405, 409 (no environment), 411, 413, 500 or 503 (grading failed,
retry after `Retry-After`). The `phase` of a gradings request goes with each verdict to `on_verdicts`: the
session computes the run's summary (baseline and final pass rates) from those records, never from what the
trainer reports. `AttemptAPI.handle` is the whole behaviour without sockets; `AttemptServer`
puts it on the socket and tells an `AttemptTranscript` one line per request with its byte sizes and, when
asked, every body that crossed the socket (the local supervisor writes them to `logs/attempt.log` and
`logs/attempt-wire.jsonl`; `FileTranscript` is that pair of files).
"""

from __future__ import annotations

import contextlib
import functools
import json
import math
import os
import socketserver
import sys
import tempfile
import threading
import time
import traceback
from collections.abc import Callable, Mapping
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from http import HTTPStatus
from http.server import BaseHTTPRequestHandler
from pathlib import Path
from typing import Any, Final, Protocol

from nodus.errors import ConfigError, NodusError, TemporaryError

from ..grading import GradingService
from .environment import EnvironmentSpec
from .summary import DEFAULT_PHASE, PHASES

STAGES: Final = ("Baseline", "Training", "Evaluating", "Exporting")
TASK_FIELDS: Final = ("taskId", "prompt", "metadata")
RESOURCE_PATHS: Final = ("trainingjobs", "jobs")
ENDPOINTS: Final = ("tasks", "gradings", "events")
MAX_BODY_BYTES = 64 * 1024 * 1024
MAX_ITEMS = 100_000
IDLE_CONNECTION_S = 300.0
"""A keep-alive connection that sends nothing for this long is closed (its thread ends)."""


@dataclass(frozen=True)
class Reply:
    status: int
    body: dict[str, Any]
    headers: Mapping[str, str] = field(default_factory=dict)


class _RequestError(Exception):
    def __init__(self, status: int, message: str) -> None:
        super().__init__(message)
        self.status = status
        self.message = message


def _error(status: int, message: str, **headers: str) -> Reply:
    return Reply(status, {"error": message}, headers)


class AttemptAPI:
    """The attempt API of one job, without the transport: `handle(method, path, body) -> Reply`.

    `on_event` receives each checked progress report (the session merges it into the status);
    `on_verdicts` the verdicts of each grading with the host's whole evidence and the request's `phase` (the
    session numbers them, tallies them and hands them to its sink); `log` gets one line for anything worth
    noting that is not a request.
    """

    def __init__(
        self,
        *,
        name: str,
        environment: EnvironmentSpec | None,
        grading: GradingService,
        grading_job: str,
        on_event: Callable[[dict[str, Any]], None],
        on_verdicts: Callable[[list[dict[str, Any]]], None] = lambda verdicts: None,
        log: Callable[[str], None] = lambda line: None,
    ) -> None:
        self.name = name
        self.environment = environment
        self.grading = grading
        self.grading_job = grading_job
        self.on_event = on_event
        self.on_verdicts = on_verdicts
        self.log = log
        self._tasks: dict[str, str] | None = None
        self._tasks_lock = threading.Lock()

    def handle(self, method: str, path: str, body: bytes) -> Reply:
        try:
            endpoint = self._route(method, path)
            payload = _json_object(body, allow_empty=endpoint == "tasks")
            if endpoint == "tasks":
                return self._serve_tasks()
            if endpoint == "gradings":
                return self._grade(payload)
            return self._event(payload)
        except _RequestError as exc:
            return _error(exc.status, exc.message)
        except TemporaryError as exc:
            return _error(HTTPStatus.SERVICE_UNAVAILABLE, exc.message, **{"Retry-After": f"{math.ceil(exc.delay)}"})
        except ConfigError as exc:
            return _error(HTTPStatus.BAD_REQUEST, exc.message)
        except NodusError as exc:
            return _error(HTTPStatus.INTERNAL_SERVER_ERROR, exc.message)

    # --- routing -----------------------------------------------------------------------------------

    def _route(self, method: str, path: str) -> str:
        parts = path.split("?", 1)[0].strip("/").split("/")
        if len(parts) != 3 or parts[0] not in RESOURCE_PATHS or parts[2] not in ENDPOINTS:
            raise _RequestError(HTTPStatus.NOT_FOUND, f"no such endpoint {path!r}; try POST /trainingjobs/NAME/tasks")
        if parts[1] != self.name:
            raise _RequestError(
                HTTPStatus.NOT_FOUND, f"job {parts[1]!r} is not served here; this socket is {self.name!r}'s"
            )
        if method != "POST":
            raise _RequestError(HTTPStatus.METHOD_NOT_ALLOWED, f"{method} is not allowed; the attempt API takes POST")
        return parts[2]

    def _environment(self) -> EnvironmentSpec:
        if self.environment is None:
            raise _RequestError(HTTPStatus.CONFLICT, f"job {self.name!r} has no environment to take tasks from")
        return self.environment

    # --- endpoints ---------------------------------------------------------------------------------

    def _serve_tasks(self) -> Reply:
        environment = self._environment()
        # Fetched once per session: each fetch runs `nodus-env tasks` in a sandbox (the two splits at
        # once, as loading an environment can take seconds), and the lists are fixed by (environment, seed).
        with self._tasks_lock:
            if self._tasks is None:
                counts = {"train": environment.train_tasks, "test": environment.held_out_tasks}
                with ThreadPoolExecutor(max_workers=2, thread_name_prefix="tasks") as pool:
                    texts = {split: pool.submit(self._split, environment, split, n) for split, n in counts.items()}
                    self._tasks = {f"{split}.jsonl": text.result() for split, text in texts.items()}
            files = dict(self._tasks)
        return Reply(HTTPStatus.OK, {"files": files})

    def _split(self, environment: EnvironmentSpec, split: str, count: int) -> str:
        if count == 0:
            return ""
        if environment.manifests is None:
            tasks = self.grading.tasks(environment.ref(), split, environment.seed, limit=count)
        else:
            tasks = self._manifest(environment, split)[:count]
        return "".join(json.dumps(self._public(task), ensure_ascii=False) + "\n" for task in tasks)

    def _manifest(self, environment: EnvironmentSpec, split: str) -> list[dict[str, Any]]:
        """The whole task list of `split` at the job's seed: read from the manifest folder, or made now and
        written there, so the first run to use a (split, seed) fixes it for every later run."""
        assert environment.manifests is not None
        path = Path(environment.manifests) / f"{split}-{environment.seed}.jsonl"
        if not path.is_file():
            tasks = self.grading.tasks(environment.ref(), split, environment.seed, limit=None)
            text = "".join(json.dumps(self._public(task), ensure_ascii=False) + "\n" for task in tasks)
            write_text_atomic(path, text)
        return [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines() if line.strip()]

    def _public(self, task: Mapping[str, Any]) -> dict[str, Any]:
        # The grading service already refuses task lines that carry an answer; this keeps anything else
        # an environment adds (hints, references, solutions under another name) away from the trainer too.
        extra = sorted(set(task) - set(TASK_FIELDS))
        if extra:
            self.log(f"task {task.get('taskId')!r}: dropped fields {extra} the trainer must not see")
        return {key: task.get(key, {} if key == "metadata" else None) for key in TASK_FIELDS}

    def _grade(self, payload: dict[str, Any]) -> Reply:
        environment = self._environment()
        items = payload.get("items")
        unknown = sorted(set(payload) - {"items", "phase"})
        if unknown:
            raise _RequestError(HTTPStatus.BAD_REQUEST, f"unknown fields {unknown}; known: ['items', 'phase']")
        if not isinstance(items, list) or not items or not all(isinstance(item, dict) for item in items):
            raise _RequestError(HTTPStatus.BAD_REQUEST, "'items' must be a non-empty list of {taskId, completion}")
        if len(items) > MAX_ITEMS:
            raise _RequestError(HTTPStatus.REQUEST_ENTITY_TOO_LARGE, f"at most {MAX_ITEMS} items per request")
        # Checked before any grader runs: a request the summary could not place is refused, not graded.
        phase = payload.get("phase", DEFAULT_PHASE)
        if phase not in PHASES:
            raise _RequestError(HTTPStatus.BAD_REQUEST, f"phase must be one of {list(PHASES)}, got {phase!r}")
        tags = [_group_tags(item) for item in items]
        verdicts = [verdict.to_json() for verdict in self.grading.grade(self.grading_job, environment.ref(), items)]
        self.on_verdicts([{**verdict, "phase": phase, **tag} for verdict, tag in zip(verdicts, tags, strict=True)])
        return Reply(HTTPStatus.OK, {"verdicts": [for_trainer(verdict) for verdict in verdicts]})

    def _event(self, payload: dict[str, Any]) -> Reply:
        self.on_event(check_event(payload))
        return Reply(HTTPStatus.OK, {"accepted": True})


MAX_GROUP_CHARS = 200


def _group_tags(item: Mapping[str, Any]) -> dict[str, Any]:
    """The item's `group` and `episode`, checked (400 before any grader runs), for its verdict record."""
    tags: dict[str, Any] = {}
    group, episode = item.get("group"), item.get("episode")
    if group is not None:
        if not isinstance(group, str) or not group or len(group) > MAX_GROUP_CHARS:
            raise _RequestError(
                HTTPStatus.BAD_REQUEST, f"'group' must be a string of 1 to {MAX_GROUP_CHARS} characters"
            )
        tags["group"] = group
    if episode is not None:
        if group is None:
            raise _RequestError(HTTPStatus.BAD_REQUEST, "'episode' needs the 'group' it is an episode of")
        if isinstance(episode, bool) or not isinstance(episode, int) or episode < 0:
            raise _RequestError(HTTPStatus.BAD_REQUEST, "'episode' must be a whole number, 0 or more")
        tags["episode"] = episode
    return tags


def for_trainer(verdict: dict[str, Any]) -> dict[str, Any]:
    """A verdict as the trainer gets it: the host's evidence without the sandbox's argv.

    The argv names host folders, the environment's own files among them; a trainer running on this host
    needs its verdict and the evidence hashes, not directions to where the answers are kept.
    """
    evidence = verdict.get("evidence")
    process = evidence.get("process") if isinstance(evidence, dict) else None
    if not isinstance(evidence, dict) or not isinstance(process, dict) or "argv" not in process:
        return verdict
    process = {key: value for key, value in process.items() if key != "argv"}
    return {**verdict, "evidence": {**evidence, "process": process}}


def check_event(payload: dict[str, Any]) -> dict[str, Any]:
    """A progress report as the trainer sent it, checked field by field (400 on the first problem)."""
    known = {"stage", "step", "totalSteps", "metrics", "summary", "message"}
    unknown = sorted(set(payload) - known)
    if unknown:
        raise _RequestError(HTTPStatus.BAD_REQUEST, f"unknown event fields {unknown}; known: {sorted(known)}")
    if not payload:
        raise _RequestError(HTTPStatus.BAD_REQUEST, f"an event needs at least one of {sorted(known)}")
    if "stage" in payload and payload["stage"] not in STAGES:
        raise _RequestError(HTTPStatus.BAD_REQUEST, f"stage must be one of {list(STAGES)}, got {payload['stage']!r}")
    for key in ("step", "totalSteps"):
        value = payload.get(key)
        if key in payload and (isinstance(value, bool) or not isinstance(value, int) or value < 0):
            raise _RequestError(HTTPStatus.BAD_REQUEST, f"{key} must be a whole number >= 0, got {value!r}")
    metrics = payload.get("metrics", {})
    if not isinstance(metrics, dict) or not all(_scalar(v) for v in metrics.values()):
        raise _RequestError(HTTPStatus.BAD_REQUEST, "metrics must map names to numbers, strings, booleans or null")
    if not isinstance(payload.get("summary", {}), dict):
        raise _RequestError(HTTPStatus.BAD_REQUEST, "summary must be an object")
    if not isinstance(payload.get("message", ""), str):
        raise _RequestError(HTTPStatus.BAD_REQUEST, "message must be a string")
    return dict(payload)


def _scalar(value: object) -> bool:
    if isinstance(value, float):
        return math.isfinite(value)
    return value is None or isinstance(value, str | int | bool)


def _json_object(body: bytes, *, allow_empty: bool) -> dict[str, Any]:
    if not body.strip():
        if allow_empty:
            return {}
        raise _RequestError(HTTPStatus.BAD_REQUEST, "the body must be a JSON object")
    try:
        payload = json.loads(body)
    except (ValueError, UnicodeDecodeError) as exc:
        raise _RequestError(HTTPStatus.BAD_REQUEST, f"the body is not JSON: {exc}") from None
    if not isinstance(payload, dict):
        raise _RequestError(HTTPStatus.BAD_REQUEST, f"the body must be a JSON object, not a {type(payload).__name__}")
    return payload


def write_text_atomic(path: Path, text: str) -> None:
    """Replace `path` whole with `text` (a task manifest): readers never see part of it."""
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, temporary = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as out:
            out.write(text)
        os.replace(temporary, path)
    except BaseException:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(temporary)
        raise


# --- transport: HTTP/1.1 on a Unix socket -----------------------------------------------------------------


class AttemptTranscript(Protocol):
    """Where the server tells what crossed its socket (calls come from the connections' threads, one at a time)."""

    def attempt_request(self, line: str) -> None:
        """One line per request: time, method, path, status, byte sizes, milliseconds (and the error)."""

    def attempt_wire(self, record: Mapping[str, Any]) -> None:
        """With `record_wire`: the request's and the response's bodies as they crossed the socket."""


class FileTranscript:
    """An `AttemptTranscript` in two files: the access log (one line per request) and a JSON-lines wire log."""

    def __init__(self, access_log: Path, wire_log: Path | None = None) -> None:
        self.access_log = access_log
        self.wire_log = wire_log
        access_log.parent.mkdir(parents=True, exist_ok=True)

    def attempt_request(self, line: str) -> None:
        with self.access_log.open("a", encoding="utf-8") as out:
            out.write(line + "\n")

    def attempt_wire(self, record: Mapping[str, Any]) -> None:
        if self.wire_log is None:
            return
        line = json.dumps(record, sort_keys=True, ensure_ascii=False, separators=(",", ":")) + "\n"
        with self.wire_log.open("a", encoding="utf-8") as out:
            out.write(line)


class _Server(socketserver.ThreadingMixIn, socketserver.UnixStreamServer):
    daemon_threads = True
    block_on_close = False  # grading in flight must not hold up a session that is stopping


class AttemptServer:
    """`api` served on `socket_path` (mode 0600: only this user's processes connect), one thread per connection;
    each request told to `transcript`, with both bodies when `record_wire`."""

    def __init__(
        self, socket_path: Path, api: AttemptAPI, *, transcript: AttemptTranscript, record_wire: bool = False
    ) -> None:
        self.socket_path = socket_path
        self.api = api
        self.transcript = transcript
        self.record_wire = record_wire
        self._log_lock = threading.Lock()
        # A socket file left by a dead session (a killed supervisor) would make bind fail.
        if socket_path.is_socket():
            socket_path.unlink()
        # Bound and listening from here on: a trainer started now can connect before `start` (the backlog holds it).
        old_umask = os.umask(0o177)
        try:
            self._server = _Server(str(socket_path), _handler_class(self))
        finally:
            os.umask(old_umask)
        self._thread: threading.Thread | None = None

    def start(self) -> None:
        # A short poll interval: `close` waits for the loop to notice, and a stopping job should not wait long.
        serve = functools.partial(self._server.serve_forever, poll_interval=0.05)
        self._thread = threading.Thread(target=serve, name="attempt-api", daemon=True)
        self._thread.start()

    def close(self) -> None:
        if self._thread is not None:
            self._server.shutdown()
            self._thread.join(timeout=5)
        self._server.server_close()
        if self.socket_path.is_socket():
            self.socket_path.unlink()

    def record(self, method: str, path: str, body: bytes, reply: Reply, out_bytes: int, seconds: float) -> None:
        """One line per request in the transcript; with `record_wire`, both bodies as they crossed the socket."""
        stamp = time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime())
        line = f"{stamp} {method} {path} {reply.status} in={len(body)}B out={out_bytes}B {seconds * 1000:.1f}ms"
        if reply.status >= 400:
            line += f" error={reply.body.get('error', '')!r:.200}"
        with self._log_lock:
            self.transcript.attempt_request(line)
            if self.record_wire:
                request: Any
                try:
                    request = json.loads(body) if body.strip() else None
                except (ValueError, UnicodeDecodeError):
                    request = body.decode("utf-8", errors="replace")
                wire = {"method": method, "path": path, "status": reply.status, "request": request}
                self.transcript.attempt_wire({**wire, "response": reply.body})


def _handler_class(server: AttemptServer) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"
        server_version = "nodus-attempt-api"
        sys_version = ""
        timeout = IDLE_CONNECTION_S

        def do_POST(self) -> None:
            self._serve()

        def do_GET(self) -> None:
            self._serve()

        def do_PUT(self) -> None:
            self._serve()

        def do_DELETE(self) -> None:
            self._serve()

        def _serve(self) -> None:
            started = time.monotonic()
            body = b""
            try:
                body = self._body()
                reply = server.api.handle(self.command, self.path, body)
            except _RequestError as exc:
                reply = _error(exc.status, exc.message)
                self.close_connection = True  # the body was not read: the stream is out of step
            except Exception as exc:  # a bug: answer, keep serving, and leave the traceback on stderr
                traceback.print_exc(file=sys.stderr)
                reply = _error(HTTPStatus.INTERNAL_SERVER_ERROR, f"internal error: {type(exc).__name__}: {exc}")
            data = json.dumps(reply.body, ensure_ascii=False).encode()
            # Logged before the reply leaves: whoever got a reply finds its request in the logs.
            server.record(self.command, self.path, body, reply, len(data), time.monotonic() - started)
            self.send_response(reply.status)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(data)))
            for key, value in reply.headers.items():
                self.send_header(key, value)
            if self.close_connection:
                self.send_header("Connection", "close")
            self.end_headers()
            self.wfile.write(data)

        def _body(self) -> bytes:
            if self.headers.get("Transfer-Encoding"):
                raise _RequestError(HTTPStatus.LENGTH_REQUIRED, "send a Content-Length; chunked bodies are not taken")
            length = self.headers.get("Content-Length")
            if length is None:
                return b""
            try:
                size = int(length)
            except ValueError:
                raise _RequestError(HTTPStatus.BAD_REQUEST, f"bad Content-Length {length!r}") from None
            if size < 0:
                raise _RequestError(HTTPStatus.BAD_REQUEST, f"bad Content-Length {length!r}")
            if size > MAX_BODY_BYTES:
                raise _RequestError(HTTPStatus.REQUEST_ENTITY_TOO_LARGE, f"bodies are at most {MAX_BODY_BYTES} bytes")
            return self.rfile.read(size)

        def address_string(self) -> str:
            return "unix"  # a Unix socket peer has no address; the default reads client_address[0]

        def log_message(self, format: str, *args: Any) -> None:
            pass  # `AttemptServer.record` writes the access log

    return Handler
