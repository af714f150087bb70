"""Is a model server ready? `/health` answers 200 and `/v1/models` lists every name it was started to serve.

Who uses it: both backends' `wait_ready` (the InferenceEndpoint controller waits on it before the endpoint's Ready
condition turns True), the tests and the benchmark. Plain `http.client` over TCP or a Unix socket: the same check
works against `vllm serve` (whose HTTP server only listens once its engine is up) and against this package's
server (which also prints a ready line, but a controller on another host cannot read that).
"""

from __future__ import annotations

import http.client
import json
import subprocess
import time
from typing import Any

from nodus.runtimes.serving.backend import Listen, ServingError
from nodus.runtimes.serving.client import connection


def get(listen: Listen, path: str, *, timeout: float = 5.0, api_key: str | None = None) -> tuple[int, bytes]:
    """(status, raw body) of GET `path`; OSError when nothing answers."""
    conn = connection(listen, timeout)
    try:
        conn.request("GET", path, headers={"Authorization": f"Bearer {api_key}"} if api_key else {})
        response = conn.getresponse()
        return response.status, response.read()
    finally:
        conn.close()


def served_models(body: bytes) -> list[str]:
    """The ids of an OpenAI `/v1/models` answer."""
    try:
        data: Any = json.loads(body)
        return [str(entry["id"]) for entry in data["data"]]
    except (ValueError, KeyError, TypeError):
        return []


def check_once(listen: Listen, names: list[str], *, api_key: str | None = None) -> str | None:
    """None when ready, else why not (one line)."""
    try:
        status, _ = get(listen, "/health", timeout=5.0)
        if status != 200:
            return f"/health answers {status}"
        status, body = get(listen, "/v1/models", timeout=5.0, api_key=api_key)
    except (OSError, http.client.HTTPException) as error:
        return f"{listen.describe()} does not answer yet ({error.__class__.__name__}: {error})"
    if status != 200:
        return f"/v1/models answers {status}"
    missing = [name for name in names if name not in served_models(body)]
    return f"/v1/models does not list {', '.join(missing)}" if missing else None


def wait_ready(
    listen: Listen,
    names: list[str],
    *,
    timeout: float,
    process: subprocess.Popen[bytes] | None = None,
    api_key: str | None = None,
    interval: float = 0.25,
) -> None:
    """Poll until ready. Stops early when `process` (the server, where the caller started it) has ended."""
    deadline = time.monotonic() + timeout
    reason = "not checked"
    while True:
        if process is not None and process.poll() is not None:
            code = process.returncode
            raise ServingError(
                f"model server at {listen.describe()} exited with code {code} before it was ready ({reason})"
            )
        reason = check_once(listen, names, api_key=api_key) or ""
        if not reason:
            return
        if time.monotonic() >= deadline:
            raise ServingError(f"model server at {listen.describe()} not ready after {timeout:g} s: {reason}")
        time.sleep(interval)
