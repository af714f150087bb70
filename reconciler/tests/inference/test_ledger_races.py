"""Admissions racing on one store, from many threads and from several processes, on SQLite and PostgreSQL: not one
request more than `rpm`, `maxConcurrent` or the `maxCostUSD` cap allows is admitted, and the receipts add up to the
spend exactly.

Three endpoints, each with one limit: `rpm` 7, `maxConcurrent` 5, and a cap of $0.0013 that holds six requests
of $0.0002 and not seven. Nothing is settled while the race runs, so every admission stays counted.
"""

from __future__ import annotations

import json
import threading
from collections import Counter
from collections.abc import Callable
from pathlib import Path

import pytest

from nodus.reconciler.inference.endpoints import StoreDirectory
from nodus.reconciler.inference.ledger import Ledger, ReceiptState, Usage
from nodus.reconciler.state.sql import SqlStore

from .conftest import PutEndpoint
from .race_worker import attempt

EXPECTED = {"rpm": 7, "concurrent": 5, "cap": 6}


def _endpoints(put_endpoint: PutEndpoint) -> None:
    put_endpoint("rpm", rpm=7)
    put_endpoint("concurrent", maxConcurrent=5)
    put_endpoint("cap", maxCostUSD="0.0013")


def check_books(store: SqlStore) -> None:
    """Holds of Running requests are what the endpoints hold; settle them all and the spend is the receipts' sum."""
    ledger = Ledger(store)
    for (request_id,) in store.fetch_all("SELECT id FROM inference_requests"):
        ledger.settle(str(request_id), Usage(input_tokens=33, output_tokens=7))
    amounts = store.fetch_all("SELECT endpoint, SUM(amount_nanos) FROM inference_requests GROUP BY endpoint")
    for endpoint, total in amounts:
        assert ledger.spend("default", str(endpoint)) == (int(total), 0)
    states = {str(row[0]) for row in store.fetch_all("SELECT state FROM inference_requests")}
    assert states == {ReceiptState.SETTLED}


def test_threads_admit_no_more_than_the_limits(store: SqlStore, put_endpoint: PutEndpoint, secret: str) -> None:
    _endpoints(put_endpoint)
    ledger = Ledger(store)
    directory = StoreDirectory(store, ttl_s=0)
    start = threading.Barrier(8)
    admitted: Counter[str] = Counter()
    lock = threading.Lock()

    def worker() -> None:
        start.wait()
        for _ in range(4):
            for name in EXPECTED:
                if attempt(ledger, directory, secret, name):
                    with lock:
                        admitted[name] += 1

    threads = [threading.Thread(target=worker) for _ in range(8)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=120)
    assert dict(admitted) == EXPECTED
    check_books(store)


@pytest.mark.slow
def test_processes_admit_no_more_than_the_limits(
    store: SqlStore, put_endpoint: PutEndpoint, secret: str, run_processes: Callable[[str, int], list[str]]
) -> None:
    _endpoints(put_endpoint)
    body = f"""
import importlib.util
spec = importlib.util.spec_from_file_location("race_worker", {str(Path(__file__).parent / "race_worker.py")!r})
worker = importlib.util.module_from_spec(spec)
spec.loader.exec_module(worker)
from nodus.reconciler.inference.endpoints import StoreDirectory
from nodus.reconciler.inference.ledger import Ledger
attempt = worker.attempt
ledger = Ledger(store)
directory = StoreDirectory(store, ttl_s=0)
counts = {{}}
for _ in range(4):
    for name in {list(EXPECTED)!r}:
        counts[name] = counts.get(name, 0) + int(attempt(ledger, directory, {secret!r}, name))
print(json.dumps(counts))
"""
    outputs = run_processes(body, 4)
    admitted: Counter[str] = Counter()
    for output in outputs:
        admitted.update(json.loads(output.strip().splitlines()[-1]))
    assert dict(admitted) == EXPECTED
    check_books(store)
