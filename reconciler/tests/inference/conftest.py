"""Fixtures of the inference tests: a migrated store on SQLite and on PostgreSQL, endpoints, keys and prices.

The PostgreSQL side reuses the state store tests' private server (`postgres_cluster` and `run_processes` of
reconciler/tests/state/conftest.py, loaded from that file: pytest's conftests are not importable by name under
--import-mode=importlib), marked `postgres`. `put_endpoint` writes an InferenceEndpoint record with the status
fields the InferenceEndpoint controller writes (phase, upstream, servedModel), so the gateway and the ledger see
it as the controller would leave it.
"""

from __future__ import annotations

import importlib.util
import sys
import time
from collections.abc import Callable, Iterator
from decimal import Decimal
from pathlib import Path
from typing import Any

import pytest

from nodus.reconciler.inference.keys import create_key
from nodus.reconciler.inference.ledger import Ledger
from nodus.reconciler.pricing.prices import PriceTable, TokenPrice
from nodus.reconciler.state import open_store
from nodus.reconciler.state.records import ResourceKey
from nodus.reconciler.state.sql import SqlStore
from nodus.specs.status_names import Phase

_spec = importlib.util.spec_from_file_location(
    "nodus_state_tests_conftest", Path(__file__).parents[1] / "state" / "conftest.py"
)
assert _spec is not None and _spec.loader is not None
_state = importlib.util.module_from_spec(_spec)
sys.modules[_spec.name] = _state  # dataclasses look their module up there
_spec.loader.exec_module(_state)

postgres_cluster = _state.postgres_cluster
run_processes = _state.run_processes
FakeClock = _state.FakeClock

MODEL = "nodus/tiny-qwen3"
RATES = TokenPrice(Decimal("1.00"), Decimal("2.00"))
"""$1 per million input tokens, $2 per million output tokens: 1000 and 2000 nano-dollars per token."""


def price_table(version: str = "test-2026-12") -> PriceTable:
    return PriceTable(version=version, file="test", inference={"tiny-qwen3": RATES})


@pytest.fixture(params=["sqlite", pytest.param("postgres", marks=pytest.mark.postgres)])
def store_url(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    if request.param == "sqlite":
        return f"sqlite://{tmp_path / 'state.db'}"
    cluster = request.getfixturevalue("postgres_cluster")
    url: str = cluster.create_database()
    return url


@pytest.fixture
def clock() -> Any:
    return FakeClock(time.time())


@pytest.fixture
def store(store_url: str, tmp_path: Path) -> Iterator[SqlStore]:
    opened = open_store(store_url, project_state_dir=tmp_path / "unused")
    assert isinstance(opened, SqlStore)
    yield opened
    opened.close()


@pytest.fixture
def ledger(store: SqlStore, clock: Any) -> Ledger:
    return Ledger(store, clock=clock)


def endpoint_document(name: str, project: str = "default", labels: dict[str, str] | None = None, **spec: Any) -> Any:
    metadata: dict[str, Any] = {"name": name, "project": project}
    if labels:
        metadata["labels"] = labels
    return {
        "apiVersion": "nodus.dev/v1",
        "kind": "InferenceEndpoint",
        "metadata": metadata,
        "spec": {"model": MODEL, "state": "Running", **spec},
    }


PutEndpoint = Callable[..., ResourceKey]


@pytest.fixture
def put_endpoint(store: SqlStore) -> PutEndpoint:
    """`put_endpoint(name, upstream=..., phase=..., labels=..., **spec)`: the record and its controller status."""

    def put(
        name: str,
        *,
        project: str = "default",
        upstream: str | None = "http://127.0.0.1:9",
        phase: str = Phase.RUNNING,
        labels: dict[str, str] | None = None,
        status: dict[str, Any] | None = None,
        **spec: Any,
    ) -> ResourceKey:
        key = ResourceKey("InferenceEndpoint", project, name)
        store.put(key, endpoint_document(name, project, labels, **spec))
        written: dict[str, Any] = {"phase": phase, "servedModel": "tiny", **(status or {})}
        if upstream is not None:
            written["upstream"] = upstream
        store.set_status(key, written)
        return key

    return put


def put_budget(store: SqlStore, name: str, limit: str, *, project: str = "default", **spec: Any) -> None:
    store.put(
        ResourceKey("Budget", project, name),
        {
            "apiVersion": "nodus.dev/v1",
            "kind": "Budget",
            "metadata": {"name": name, "project": project},
            "spec": {"limitUSD": limit, **spec},
        },
    )


@pytest.fixture
def secret(store: SqlStore) -> str:
    """The secret of key `app` of project default (scope inference:invoke)."""
    return create_key(store, "app").secret
