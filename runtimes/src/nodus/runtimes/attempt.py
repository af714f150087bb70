"""The attempt API as the trainers see it: fetch tasks, have completions graded, report progress.

Who uses it: every nodus runtime (`grpo_lora`, `evaluate`) through `RunContext.api`. The supervisor serves
the API on the Unix socket named by `NODUS_ATTEMPT_API` (see the reconciler's `session/attempt_api.py` for
the server side). Stdlib only: HTTP/1.1 with JSON bodies, one keep-alive connection per thread (TRL's async
reward functions call from an event-loop thread while the main thread reports events).

A grading that answers 503 (the graders are busy or restarting) is retried after its `Retry-After`, up to
`retry_for_s`; any other error status stops the trainer with the server's message, since a trainer that
cannot grade must not go on and learn from nothing.
"""

from __future__ import annotations

import http.client
import json
import socket
import threading
import time
from collections.abc import Iterable, Mapping
from typing import Any

PHASES = ("Baseline", "Training", "Evaluation")


class AttemptError(RuntimeError):
    """The attempt API refused a request (a bug in the trainer, or a job that is being stopped)."""


class _UnixConnection(http.client.HTTPConnection):
    def __init__(self, path: str, timeout: float) -> None:
        super().__init__("localhost", timeout=timeout)
        self.socket_path = path

    def connect(self) -> None:
        sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        sock.settimeout(self.timeout)
        sock.connect(self.socket_path)
        self.sock = sock


class AttemptClient:
    """POSTs to `/{resource}/{name}/{endpoint}` on the job's socket."""

    def __init__(
        self,
        socket_path: str,
        name: str,
        *,
        resource: str = "trainingjobs",
        timeout_s: float = 600.0,
        retry_for_s: float = 600.0,
    ) -> None:
        self.socket_path = socket_path
        self.base = f"/{resource}/{name}"
        self.timeout_s = timeout_s
        self.retry_for_s = retry_for_s
        self._local = threading.local()

    def _connection(self) -> _UnixConnection:
        connection = getattr(self._local, "connection", None)
        if connection is None:
            connection = _UnixConnection(self.socket_path, self.timeout_s)
            self._local.connection = connection
        return connection

    def post(self, endpoint: str, body: Mapping[str, Any]) -> dict[str, Any]:
        data = json.dumps(body, ensure_ascii=False).encode()
        deadline = time.monotonic() + self.retry_for_s
        while True:
            status, headers, payload = self._send(endpoint, data)
            if status == 200:
                return payload
            if status == 503 and time.monotonic() < deadline:
                time.sleep(min(30.0, float(headers.get("Retry-After") or 1)))
                continue
            raise AttemptError(f"POST {endpoint}: {status}: {payload.get('error', payload)}")

    def _send(self, endpoint: str, data: bytes) -> tuple[int, Mapping[str, str], dict[str, Any]]:
        for attempt in (1, 2):
            connection = self._connection()
            try:
                connection.request("POST", f"{self.base}/{endpoint}", data, {"Content-Type": "application/json"})
                response = connection.getresponse()
                raw = response.read()
                return response.status, dict(response.getheaders()), json.loads(raw or b"{}")
            except (ConnectionError, http.client.HTTPException, OSError):
                # A keep-alive connection the server closed while idle: reconnect once.
                connection.close()
                self._local.connection = None
                if attempt == 2:
                    raise
        raise AssertionError("unreachable")

    # --- the three endpoints -------------------------------------------------------------------------

    def tasks(self) -> dict[str, list[dict[str, Any]]]:
        """{"train": [...], "test": [...]}: each task `{taskId, prompt, metadata}`, never an answer."""
        files = self.post("tasks", {})["files"]
        return {
            name.removesuffix(".jsonl"): [json.loads(line) for line in text.splitlines() if line.strip()]
            for name, text in files.items()
        }

    def grade(self, items: Iterable[Mapping[str, Any]], phase: str) -> list[dict[str, Any]]:
        """Verdicts for `{taskId, completion}` (or `{taskId, turns}`) items, in order."""
        if phase not in PHASES:
            raise ValueError(f"phase must be one of {PHASES}")
        items = list(items)
        if not items:
            return []
        return list(self.post("gradings", {"items": items, "phase": phase})["verdicts"])

    def event(self, **report: Any) -> None:
        """A progress report: stage, step, totalSteps, metrics, summary, message."""
        self.post("events", {key: value for key, value in report.items() if value is not None})


def reward_of(verdict: Mapping[str, Any]) -> float | None:
    """What GRPO learns from a verdict: InvalidOutput scores 0; an InfrastructureFailure is no score at all
    (None: TRL leaves it out of its group's baseline and gives it no advantage), never a 0."""
    name = verdict.get("verdict")
    if name == "InfrastructureFailure":
        return None
    if name == "InvalidOutput":
        return 0.0
    reward = verdict.get("reward")
    if reward is None:
        return 1.0 if name == "Correct" else 0.0
    return float(reward)
