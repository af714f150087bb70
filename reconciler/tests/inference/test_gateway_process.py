"""Real gateway processes (`python -m nodus.reconciler.inference.gateway`) in front of the fake model server: the
ready line, a client hanging up mid-stream, SIGTERM with streams in flight, a gateway killed mid-request, bad
command lines.

Marked slow: each test starts gateway processes (about a second each).
"""

from __future__ import annotations

import json
import shutil
import signal
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from nodus.reconciler.inference.gateway_address import project_id
from nodus.reconciler.inference.keys import create_key
from nodus.reconciler.inference.ledger import Ledger, Receipt, ReceiptState
from nodus.reconciler.state import open_store
from nodus.reconciler.state.sql import SqlStore

from .conftest import PutEndpoint
from .fakes import FakeUpstream, serve_in_thread
from .processes import data_lines, gateway_process, wait_for

pytestmark = pytest.mark.slow


@pytest.fixture
def store_url(tmp_path: Path) -> str:
    return f"sqlite://{tmp_path / 'state.db'}"


@pytest.fixture(scope="module")
def fake() -> Iterator[tuple[FakeUpstream, Path]]:
    upstream = FakeUpstream()
    with serve_in_thread(upstream.app()) as path:
        yield upstream, path


@pytest.fixture
def setup(store: SqlStore, put_endpoint: PutEndpoint, fake: tuple[FakeUpstream, Path]) -> tuple[str, FakeUpstream]:
    put_endpoint("ep", upstream=f"unix:{fake[1]}", maxCostUSD="1.00")
    return create_key(store, "app").secret, fake[0]


def settled(ledger: Ledger, request_id: str) -> Receipt:
    """The receipt once the request is no longer Running (a whole answer is settled just after it is sent)."""
    found: Receipt = wait_for(lambda: (r := ledger.receipt(request_id)) and r.state != ReceiptState.RUNNING and r)
    return found


def body(text: str, **extra: Any) -> dict[str, Any]:
    return {"model": "endpoint/ep", "messages": [{"role": "user", "content": text}], **extra}


def test_the_gateway_answers_once_ready_and_stops_cleanly(
    store_url: str, store: SqlStore, setup: tuple[str, FakeUpstream], tmp_path: Path
) -> None:
    secret, _ = setup
    with gateway_process(store_url, tmp_path) as gateway:
        assert gateway.ready["event"] == "ready" and gateway.ready["gateway"].startswith("gw_")
        assert gateway.ready["pid"] == gateway.process.pid and gateway.ready["url"] == f"unix:{gateway.socket}"
        health = gateway.client().request("GET", "/health")
        assert health.status == 200 and "nodus-request-id" in health.headers
        answer = gateway.client().request(
            "POST", "/v1/chat/completions", body("say 2"), {"Authorization": f"Bearer {secret}"}
        )
        assert answer.status == 200 and answer.body["choices"][0]["message"]["content"] == "w1 w2"
        code, err = gateway.stop()
        assert code == 0 and err.strip().endswith("stopped by SIGTERM"), err
        assert "Traceback" not in err
        assert gateway.socket is not None and not gateway.socket.exists()
    stopped = Ledger(store).gateways()
    assert [g.stopped_at is not None for g in stopped] == [True]


def test_a_gateway_on_a_loopback_port_names_it_when_ready(store_url: str, tmp_path: Path) -> None:
    with gateway_process(store_url, tmp_path, tcp=True) as gateway:
        url = str(gateway.ready["url"])
        assert url.startswith("http://127.0.0.1:") and not url.endswith(":0")


def test_a_client_hanging_up_mid_stream_pays_for_what_was_produced(
    store: SqlStore, store_url: str, setup: tuple[str, FakeUpstream], tmp_path: Path
) -> None:
    secret, fake = setup
    with gateway_process(store_url, tmp_path) as gateway:
        with gateway.client().open_stream(
            "/v1/chat/completions", body("slow 60", stream=True), {"Authorization": f"Bearer {secret}"}
        ) as response:
            request_id = response.headers["nodus-request-id"]
            assert len(data_lines(response, limit=3)) == 3
        ledger = Ledger(store)
        receipt = settled(ledger, request_id)
        assert receipt.state == ReceiptState.SETTLED and 2 <= receipt.usage.output_tokens < 60
        assert receipt.outcome.startswith("the client closed the stream after")
        assert receipt.amount_nanos == receipt.usage.input_tokens * 1000 + receipt.usage.output_tokens * 2000
        assert wait_for(lambda: request_id in fake.hung_up)  # the model server was told to stop


def test_sigterm_cuts_streams_settles_them_and_exits_cleanly(
    store: SqlStore, store_url: str, setup: tuple[str, FakeUpstream], tmp_path: Path
) -> None:
    secret, _ = setup
    with gateway_process(store_url, tmp_path) as gateway:
        with gateway.client().open_stream(
            "/v1/chat/completions", body("slow 200", stream=True), {"Authorization": f"Bearer {secret}"}
        ) as response:
            request_id = response.headers["nodus-request-id"]
            first = data_lines(response, limit=2)
            gateway.process.send_signal(signal.SIGTERM)
            rest = data_lines(response)
        code, err = gateway.stop()
    assert code == 0 and "Traceback" not in err and "stopped by SIGTERM" in err, err
    events = first + rest
    assert "[DONE]" not in events and json.loads(events[-1])["error"]["code"] == "Unavailable"
    receipt = Ledger(store).receipt(request_id)
    assert receipt is not None and receipt.state == ReceiptState.SETTLED and "gateway is stopping" in receipt.outcome
    assert 0 < receipt.usage.output_tokens < 200


def test_a_killed_gateway_leaves_its_request_unknown_uncharged_and_nothing_else_changed(
    store: SqlStore, store_url: str, setup: tuple[str, FakeUpstream], tmp_path: Path
) -> None:
    secret, _ = setup
    auth = {"Authorization": f"Bearer {secret}"}
    ledger = Ledger(store)
    with gateway_process(store_url, tmp_path) as gateway:
        done = gateway.client().request("POST", "/v1/chat/completions", body("say 3"), auth)
        before = settled(ledger, done.headers["nodus-request-id"])
        spent_before = ledger.spend("default", "ep")[0]
        with gateway.client().open_stream("/v1/chat/completions", body("slow 400", stream=True), auth) as response:
            request_id = response.headers["nodus-request-id"]
            data_lines(response, limit=2)
            running = ledger.receipt(request_id)
            assert running is not None and running.state == ReceiptState.RUNNING
            assert ledger.spend("default", "ep") == (spent_before, running.hold_nanos)
            gateway.process.kill()
            gateway.process.wait()
    # The next gateway to start (or any gateway's housekeeping) finds the dead one's request.
    with gateway_process(store_url, tmp_path):
        receipt = ledger.receipt(request_id)
    assert receipt is not None and receipt.state == ReceiptState.UNKNOWN and receipt.amount_nanos == 0
    assert "ended before the request did" in receipt.outcome
    assert ledger.spend("default", "ep") == (spent_before, 0)
    assert ledger.receipt(done.headers["nodus-request-id"]) == before


@pytest.mark.parametrize(
    ("arguments", "words"),
    [
        (["--uds", "/tmp/x.sock", "--port", "1"], "not allowed with"),
        (["--port", "8123", "--host", "0.0.0.0"], "--host 0.0.0.0: the gateway binds a loopback address"),
        (["--port", "70000"], "--port 70000: not a TCP port"),
    ],
)
def test_bad_command_lines_exit_2_with_one_line(store_url: str, arguments: list[str], words: str) -> None:
    result = subprocess.run(
        [sys.executable, "-m", "nodus.reconciler.inference.gateway", "--state", store_url, *arguments],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert result.returncode == 2 and words in result.stderr and "Traceback" not in result.stderr, result.stderr


def test_a_taken_socket_is_refused_in_one_line(store_url: str, tmp_path: Path) -> None:
    with gateway_process(store_url, tmp_path) as gateway:
        result = subprocess.run(
            [
                sys.executable,
                "-m",
                "nodus.reconciler.inference.gateway",
                "--state",
                store_url,
                "--uds",
                str(gateway.socket),
            ],
            capture_output=True,
            text=True,
            timeout=60,
            check=False,
        )
    assert result.returncode == 2 and "another process is listening there" in result.stderr
    assert len(result.stderr.strip().splitlines()) == 1


def test_the_gateway_names_its_project_and_stops_once_the_project_folder_is_gone(tmp_path: Path) -> None:
    root = tmp_path / "project"
    root.mkdir()
    (root / "nodus.lock").write_text("lockfileVersion: 1\nenvironments: {}\n")
    state = root / ".nodus" / "state.db"
    store = open_store(f"sqlite://{state}", project_state_dir=root / ".nodus")
    try:
        own = project_id(store, create=True)
    finally:
        store.close()
    with gateway_process(f"sqlite://{state}", tmp_path, "--project-root", str(root)) as gateway:
        health = gateway.client().request("GET", "/health")
        assert health.body["project"] == own and health.body["root"] == str(root.resolve())
        assert health.body["pid"] == gateway.process.pid
        shutil.rmtree(root)
        _, err = gateway.process.communicate(timeout=60)  # it ends by itself
        assert gateway.process.returncode == 0, err
        assert err.strip().endswith(f"nodus gateway: stopped: its project folder {root.resolve()} is gone"), err
        assert "Traceback" not in err
