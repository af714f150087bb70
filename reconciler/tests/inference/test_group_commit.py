"""The gateway's group commit: ledger writes queued together share one transaction; a refusal is only its own
request's answer, and a failing write is retried alone so its neighbours still commit."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import pytest

from nodus.reconciler.inference.errors import ErrorCode, InferenceError
from nodus.reconciler.inference.gateway.group_commit import GroupCommit, _Write
from nodus.reconciler.state.sql import SqlStore


@pytest.fixture
def store_url(tmp_path: Path) -> str:
    return f"sqlite://{tmp_path / 'state.db'}"


def refuse() -> None:
    raise InferenceError(ErrorCode.TOO_MANY_REQUESTS, "no")


def setting(store: SqlStore, name: str, value: str) -> Any:
    """A write that returns something: what `set_value` wrote."""

    def write() -> str:
        store.set_value(name, value)
        return value

    return write


def test_writes_queued_together_commit_together_and_a_refusal_stays_its_own(store: SqlStore) -> None:
    async def run() -> list[Any]:
        loop = asyncio.get_running_loop()
        writes = [
            _Write(lambda: store.set_value("a", "1"), loop, loop.create_future()),
            _Write(refuse, loop, loop.create_future()),
            _Write(setting(store, "b", "2"), loop, loop.create_future()),
        ]
        GroupCommit(store)._commit(writes)
        return await asyncio.gather(*(write.future for write in writes), return_exceptions=True)

    first, refused, last = asyncio.run(run())
    assert first is None and last == "2"
    assert isinstance(refused, InferenceError) and refused.code == ErrorCode.TOO_MANY_REQUESTS
    assert (store.get_value("a"), store.get_value("b")) == ("1", "2")


def test_a_failing_write_is_retried_alone_and_the_others_commit(store: SqlStore) -> None:
    def broken() -> None:
        store.execute("INSERT INTO no_such_table VALUES (1)")

    async def run() -> list[Any]:
        loop = asyncio.get_running_loop()
        writes = [
            _Write(lambda: store.set_value("a", "1"), loop, loop.create_future()),
            _Write(broken, loop, loop.create_future()),
            _Write(lambda: store.set_value("b", "2"), loop, loop.create_future()),
        ]
        GroupCommit(store)._commit(writes)
        return await asyncio.gather(*(write.future for write in writes), return_exceptions=True)

    first, failed, last = asyncio.run(run())
    assert first is None and last is None and isinstance(failed, Exception) and "no_such_table" in str(failed)
    assert (store.get_value("a"), store.get_value("b")) == ("1", "2")


def test_concurrent_calls_are_batched_and_all_answered(store: SqlStore) -> None:
    commits = GroupCommit(store)

    async def run() -> list[Any]:
        return await asyncio.gather(*(commits.call(setting(store, f"k{i}", str(i))) for i in range(50)))

    assert asyncio.run(run()) == [str(i) for i in range(50)]
    commits.close()
    assert commits.writes == 50 and commits.batches <= 50
    assert [store.get_value(f"k{i}") for i in range(50)] == [str(i) for i in range(50)]
