"""End to end: a real gateway process in front of a real model server (`python -m nodus.runtimes.serving`, the
transformers backend on CPU) serving the tiny model, called with the OpenAI Python client given only a base URL
and a key, streamed and not; two gateway processes sharing one rpm limit.

Marked slow: the model server loads torch and the model (seconds), the gateways start as processes.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

from nodus.reconciler.inference.keys import create_key
from nodus.reconciler.inference.ledger import Ledger, Receipt, ReceiptState
from nodus.reconciler.state.sql import SqlStore

from .conftest import PutEndpoint
from .processes import gateway_process, read_line, wait_for

openai = pytest.importorskip("openai")
pytestmark = pytest.mark.slow


@pytest.fixture
def store_url(tmp_path: Path) -> str:
    return f"sqlite://{tmp_path / 'state.db'}"


@pytest.fixture(scope="module")
def model_server(tiny_model: tuple[str, str]) -> Iterator[Path]:
    """The tiny model served as `tiny` on a Unix socket; yields the socket. Stopped by its pid."""
    cache, revision = tiny_model
    folder = Path(cache) / "models--nodus--tiny-qwen3" / "snapshots" / revision
    sockets = Path(tempfile.mkdtemp(prefix="nodus-ms-"))
    path = sockets / "model.sock"
    argv = [
        sys.executable,
        "-m",
        "nodus.runtimes.serving",
        "--model",
        str(folder),
        "--name",
        "tiny",
        "--uds",
        str(path),
    ]
    process = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        line = read_line(process, 180)
        if not line:
            process.kill()
            _, err = process.communicate(timeout=10)
            raise AssertionError(f"the model server did not start: {err}")
        yield path
    finally:
        if process.poll() is None:
            os.kill(process.pid, signal.SIGTERM)
            try:
                process.communicate(timeout=30)
            except subprocess.TimeoutExpired:
                os.kill(process.pid, signal.SIGKILL)
                process.communicate(timeout=10)
        path.unlink(missing_ok=True)
        sockets.rmdir()


def test_the_openai_client_gets_completions_through_the_gateway_streamed_and_not(
    store_url: str, store: SqlStore, put_endpoint: PutEndpoint, model_server: Path, tmp_path: Path
) -> None:
    put_endpoint("support", upstream=f"unix:{model_server}", maxCostUSD="5.00")
    secret = create_key(store, "app").secret
    ledger = Ledger(store)
    with gateway_process(store_url, tmp_path, tcp=True) as gateway:
        client = openai.OpenAI(base_url=f"{gateway.ready['url']}/v1", api_key=secret, max_retries=0)
        messages = [{"role": "user", "content": "reverse: alpha beta"}]
        raw = client.chat.completions.with_raw_response.create(
            model="endpoint/support", messages=messages, max_tokens=8
        )
        reply = raw.parse()
        assert isinstance(reply.choices[0].message.content, str) and reply.model == "endpoint/support"
        assert reply.usage is not None and 1 <= reply.usage.completion_tokens <= 8
        receipt = settled(ledger, raw.headers["nodus-request-id"])
        assert receipt.state == ReceiptState.SETTLED
        assert receipt.usage.input_tokens == reply.usage.prompt_tokens
        assert receipt.usage.output_tokens == reply.usage.completion_tokens
        held = store.fetch_one(
            "SELECT held_input_tokens FROM inference_requests WHERE id = ?", (raw.headers["nodus-request-id"],)
        )
        assert held is not None and reply.usage.prompt_tokens <= int(held[0])  # the input bound held

        stream = client.chat.completions.create(
            model="nodus/tiny-qwen3",
            messages=messages,
            max_tokens=8,
            stream=True,
            stream_options={"include_usage": True},
        )
        chunks = list(stream)
        text = "".join(chunk.choices[0].delta.content or "" for chunk in chunks if chunk.choices)
        assert isinstance(text, str) and chunks[-1].usage is not None
        produced = chunks[-1].usage.completion_tokens
        streamed = [r for r in ledger_receipts(store) if r != receipt.id]
        last = settled(ledger, streamed[-1])
        assert last.state == ReceiptState.SETTLED and last.usage.output_tokens == produced

        response = client.responses.create(
            model="endpoint/support", input="alpha beta", max_output_tokens=8, store=False
        )
        assert isinstance(response.output_text, str) and response.usage is not None
        completion = client.completions.create(model="endpoint/support", prompt="alpha", max_tokens=4)
        assert len(completion.choices) == 1
        with pytest.raises(openai.BadRequestError) as refused:
            client.completions.create(model="endpoint/support", prompt="alpha", max_tokens=4, echo=True)
        assert refused.value.code == "Unsupported"
        models = [model.id for model in client.models.list()]
        assert models == ["endpoint/support", "nodus/tiny-qwen3"]


def settled(ledger: Ledger, request_id: str) -> Receipt:
    """The receipt once the request is no longer Running (a whole answer is settled just after it is sent)."""
    found: Receipt = wait_for(lambda: (r := ledger.receipt(request_id)) and r.state != ReceiptState.RUNNING and r)
    return found


def ledger_receipts(store: SqlStore) -> list[str]:
    return [str(row[0]) for row in store.fetch_all("SELECT id FROM inference_requests ORDER BY admitted_at")]


def test_two_gateway_processes_share_one_rpm_before_a_real_model(
    store_url: str, store: SqlStore, put_endpoint: PutEndpoint, model_server: Path, tmp_path: Path
) -> None:
    put_endpoint("support", upstream=f"unix:{model_server}", rpm=3)
    secret = create_key(store, "app").secret
    with (
        gateway_process(store_url, tmp_path, tcp=True) as first,
        gateway_process(store_url, tmp_path, tcp=True) as second,
    ):
        clients = [
            openai.OpenAI(base_url=f"{gateway.ready['url']}/v1", api_key=secret, max_retries=0)
            for gateway in (first, second)
        ]
        outcomes = []
        for index in range(6):
            try:
                clients[index % 2].chat.completions.create(
                    model="endpoint/support", messages=[{"role": "user", "content": "hi"}], max_tokens=2
                )
                outcomes.append("answered")
            except openai.RateLimitError as error:
                outcomes.append(str(error.code))
    assert sorted(outcomes) == ["TooManyRequests"] * 3 + ["answered"] * 3
