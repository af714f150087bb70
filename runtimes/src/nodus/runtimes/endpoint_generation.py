"""Replies from an InferenceEndpoint: the generation backend of `nodus/evaluate` when a job evaluates through one.

Who uses it: `evaluate.main`, when NODUS_ENDPOINT_URL is set (the TrainingJob's `spec.evaluation.endpoint`; the
controller sets it with NODUS_ENDPOINT_MODEL and, by reference to its Secret, NODUS_API_KEY). Each conversation is
one `POST {NODUS_ENDPOINT_URL}/chat/completions` to the project's gateway, a few at a time, as any OpenAI client
would call it: the gateway checks the key, the endpoint's limits and holds, and keeps a receipt of each. A request
the gateway refuses (a cap reached: 402, a limit: 429 after its Retry-After, the endpoint stopped: 503) ends the run
with that answer's one line, never an empty reply graded as wrong.
"""

from __future__ import annotations

import json
import os
import time
import urllib.error
import urllib.request
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import Any, Final

from nodus.runtimes.generation import Messages, Sampling, Tools

CONCURRENCY: Final = 4
RETRIES: Final = 5
"""How often a 429 (a limit of the endpoint) is waited out before the run fails."""


class EndpointError(SystemExit):
    """The endpoint refused or failed: the run cannot answer its tasks (exit status 2, one line)."""

    def __init__(self, message: str) -> None:
        print(f"evaluate: {message}", flush=True)
        super().__init__(2)


class EndpointGenerator:
    """`Generator` over an endpoint's chat completions."""

    name = "endpoint"

    def __init__(self, url: str, model: str, key: str) -> None:
        self.url = url.rstrip("/") + "/chat/completions"
        self.model = model
        self.key = key
        self._opener = urllib.request.build_opener(urllib.request.ProxyHandler({}))  # the gateway is on loopback

    @classmethod
    def from_environment(cls) -> EndpointGenerator | None:
        url = os.environ.get("NODUS_ENDPOINT_URL")
        if not url:
            return None
        key = os.environ.get("NODUS_API_KEY")
        if not key:
            raise EndpointError(
                "NODUS_API_KEY is not set: the endpoint's key comes from spec.evaluation.endpoint.keySecret"
            )
        return cls(url, os.environ.get("NODUS_ENDPOINT_MODEL") or "", key)

    def generate(
        self, conversations: Sequence[Messages], sampling: Sampling, tools: Sequence[Tools] | None = None
    ) -> list[str]:
        offered = list(tools) if tools is not None else [None] * len(conversations)
        with ThreadPoolExecutor(max_workers=CONCURRENCY) as pool:
            pairs = zip(conversations, offered, strict=True)
            return list(pool.map(lambda pair: self._one(pair[0], sampling, pair[1]), pairs))

    def _one(self, conversation: Messages, sampling: Sampling, tools: Tools) -> str:
        body: dict[str, Any] = {
            "model": self.model,
            "messages": list(conversation),
            "max_tokens": sampling.max_tokens,
            "temperature": 0.0 if sampling.greedy else sampling.temperature,
            "top_p": sampling.top_p,
        }
        if tools:
            body["tools"] = tools
        for attempt in range(RETRIES + 1):
            request = urllib.request.Request(
                self.url,
                data=json.dumps(body).encode(),
                headers={"Content-Type": "application/json", "Authorization": f"Bearer {self.key}"},
                method="POST",
            )
            try:
                with self._opener.open(request, timeout=600) as answer:
                    reply = json.loads(answer.read())
                return str(((reply.get("choices") or [{}])[0].get("message") or {}).get("content") or "")
            except urllib.error.HTTPError as exc:
                detail = _error_of(exc.read())
                if exc.code == 429 and attempt < RETRIES:
                    time.sleep(float(exc.headers.get("Retry-After") or 1))
                    continue
                raise EndpointError(f"{self.url}: {exc.code} {detail}") from None
            except OSError as exc:
                raise EndpointError(
                    f"{self.url}: the gateway does not answer ({getattr(exc, 'reason', exc)})"
                ) from None
        raise EndpointError(f"{self.url}: still 429 after {RETRIES} waits")


def _error_of(raw: bytes) -> str:
    try:
        error = json.loads(raw).get("error") or {}
        return f"{error.get('code')}: {error.get('message')}"
    except (ValueError, AttributeError):
        return raw.decode(errors="replace")[:200]
