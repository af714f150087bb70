"""Two gateway processes on one state store share their endpoints' limits, on SQLite and on PostgreSQL: `rpm` counts
the requests of both, and 200 concurrent requests against a `maxCostUSD` that covers about 50 holds never spend past
it; every request refused is a 402, and the receipts add up to the spend exactly.

Marked slow: gateway processes and 200 requests (loopback Unix sockets only).
"""

from __future__ import annotations

import threading
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from nodus.reconciler.inference.gateway.bounds import chat_input_bound
from nodus.reconciler.inference.keys import create_key
from nodus.reconciler.inference.ledger import Ledger, ReceiptState
from nodus.reconciler.inference.money import usd_text
from nodus.reconciler.state.sql import SqlStore

from .conftest import PutEndpoint
from .fakes import FakeUpstream, serve_in_thread
from .processes import gateway_process

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def fake() -> Iterator[tuple[FakeUpstream, Path]]:
    upstream = FakeUpstream()
    with serve_in_thread(upstream.app()) as path:
        yield upstream, path


def body(text: str, max_tokens: int = 50) -> dict[str, Any]:
    return {"model": "endpoint/ep", "messages": [{"role": "user", "content": text}], "max_tokens": max_tokens}


def test_two_gateways_share_one_rpm(
    store_url: str, store: SqlStore, put_endpoint: PutEndpoint, fake: tuple[FakeUpstream, Path], tmp_path: Path
) -> None:
    put_endpoint("ep", upstream=f"unix:{fake[1]}", rpm=5)
    auth = {"Authorization": f"Bearer {create_key(store, 'app').secret}"}
    with gateway_process(store_url, tmp_path) as first, gateway_process(store_url, tmp_path) as second:
        statuses = [
            gateway.client().request("POST", "/v1/chat/completions", body("say 1"), auth)
            for _ in range(4)
            for gateway in (first, second)
        ]
    counted = Counter(answer.status for answer in statuses)
    assert counted == {200: 5, 429: 3}
    assert all(answer.body["error"]["code"] == "TooManyRequests" for answer in statuses if answer.status == 429)
    assert all(1 <= int(answer.headers["retry-after"]) <= 60 for answer in statuses if answer.status == 429)


def test_200_concurrent_requests_never_spend_past_the_cap(
    store_url: str, store: SqlStore, put_endpoint: PutEndpoint, fake: tuple[FakeUpstream, Path], tmp_path: Path
) -> None:
    request = body("slow 3")
    hold = chat_input_bound(request["messages"]) * 1000 + 50 * 2000  # nano-dollars at $1 and $2 per million
    cap = 50 * hold
    put_endpoint("ep", upstream=f"unix:{fake[1]}", maxCostUSD=usd_text(cap))
    auth = {"Authorization": f"Bearer {create_key(store, 'app').secret}"}
    results: list[tuple[int, str]] = []
    lock = threading.Lock()
    with gateway_process(store_url, tmp_path) as first, gateway_process(store_url, tmp_path) as second:
        start = threading.Barrier(200)

        def call(index: int) -> None:
            gateway = (first, second)[index % 2]
            start.wait()
            answer = gateway.client().request("POST", "/v1/chat/completions", request, auth)
            code = answer.body["error"]["code"] if answer.status != 200 else ""
            with lock:
                results.append((answer.status, code))

        threads = [threading.Thread(target=call, args=(index,)) for index in range(200)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join(timeout=300)
    statuses = Counter(status for status, _ in results)
    assert sum(statuses.values()) == 200 and set(statuses) <= {200, 402}, statuses
    assert statuses[200] >= 50 and statuses[402] > 0, statuses
    assert all(code == "BudgetExceeded" for status, code in results if status == 402)
    settled, held = Ledger(store).spend("default", "ep")
    assert held == 0 and settled <= cap
    rows = store.fetch_all("SELECT state, amount_nanos FROM inference_requests WHERE endpoint = 'ep'")
    assert {row[0] for row in rows} == {ReceiptState.SETTLED} and len(rows) == statuses[200]
    assert sum(int(row[1]) for row in rows) == settled
