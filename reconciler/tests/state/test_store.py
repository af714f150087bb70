"""The state store's contract (records.py), checked on SQLite and PostgreSQL alike, plus `open_store`'s URLs.

Every test taking `store` (or `store_url`) runs once per backend; races use 8 threads or 2 real processes.
"""

from __future__ import annotations

import json
import os
import sqlite3
import threading
import time
import warnings
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any, Protocol

import pytest

from nodus.errors import ConfigError, PrerequisiteError, TemporaryError
from nodus.reconciler.state import migrations, open_store, sql
from nodus.reconciler.state.postgres import PostgresStore
from nodus.reconciler.state.records import (
    Conflict,
    Event,
    Launch,
    LeaseHeld,
    ResourceKey,
    StateStore,
    spec_hash,
)
from nodus.reconciler.state.sqlite import SqliteStore

TJ = ResourceKey("TrainingJob", "default", "tj1")
ENV = ResourceKey("Environment", "default", "arith")
OTHER = ResourceKey("TrainingJob", "team-b", "tj1")


class Clock(Protocol):
    """The `clock` fixture: the stores' time, moved by the test."""

    def __call__(self) -> float: ...

    def advance(self, seconds: float) -> None: ...


def doc(key: ResourceKey, **spec: object) -> dict[str, object]:
    return {
        "apiVersion": "nodus.dev/v1",
        "kind": key.kind,
        "metadata": {"name": key.name, "project": key.project},
        "spec": spec,
    }


# ---- resources


def test_create_get_and_list_sorted_by_key(store: StateStore) -> None:
    assert store.get(TJ) is None
    for key in (TJ, OTHER, ENV):
        store.put(key, doc(key, steps=1))

    record = store.get(TJ)
    assert record is not None
    assert record.spec == doc(TJ, steps=1)
    assert record.spec_hash == spec_hash(doc(TJ, steps=1))
    assert (record.generation, record.status, record.status_version, record.deleting) == (1, {}, 0, False)
    assert record.created_at == record.updated_at == 1_000_000.0
    assert [r.key for r in store.list()] == [ENV, TJ, OTHER]
    assert [r.key for r in store.list(kind="TrainingJob")] == [TJ, OTHER]
    assert [r.key for r in store.list(project="team-b")] == [OTHER]
    assert [r.key for r in store.list(kind="Environment", project="team-b")] == []


def test_documents_round_trip_in_canonical_key_order(store: StateStore) -> None:
    spec = {"zeta": {"b": [1, 2.5, None, True], "a": "ü"}, "alpha": {"long-key": 1, "k": 0}}
    put = store.put(TJ, spec)
    got = store.get(TJ)
    assert got is not None
    assert got.spec == put.spec == spec
    assert json.dumps(got.spec) == json.dumps(put.spec) == json.dumps(spec, sort_keys=True)


def test_put_bumps_generation_only_when_the_hash_changes(store: StateStore, clock: Clock) -> None:
    first = store.put(TJ, {"b": 1, "a": {"y": 2, "x": 1}})
    clock.advance(5)
    same = store.put(TJ, {"a": {"x": 1, "y": 2}, "b": 1})  # same document, other key order
    assert same == first
    changed = store.put(TJ, {"a": {"x": 1, "y": 3}, "b": 1})
    assert changed.generation == 2
    assert changed.spec_hash != first.spec_hash
    assert changed.updated_at == first.updated_at + 5 and changed.created_at == first.created_at
    assert store.get(TJ) == changed


def test_conditional_put_conflicts_when_the_generation_moved(store: StateStore) -> None:
    created = store.put(TJ, {"v": 1}, expected_generation=0)
    assert created.generation == 1
    with pytest.raises(Conflict, match=r"TrainingJob/tj1 .*generation 1, expected 0"):
        store.put(TJ, {"v": 9}, expected_generation=0)
    assert store.put(TJ, {"v": 2}, expected_generation=1).generation == 2
    with pytest.raises(Conflict):
        store.put(TJ, {"v": 3}, expected_generation=1)
    with pytest.raises(Conflict):
        store.put(ENV, {"v": 1}, expected_generation=1)  # does not exist: generation 0
    record = store.get(TJ)
    assert record is not None and record.spec == {"v": 2}
    assert store.get(ENV) is None


def test_status_writes_are_optimistic(store: StateStore) -> None:
    store.put(TJ, {"v": 1})
    first = store.set_status(TJ, {"phase": "Pending"})
    assert first.status_version == 1
    second = store.set_status(TJ, {"phase": "Running", "step": 3}, expected_version=1)
    assert second.status_version == 2
    with pytest.raises(Conflict, match="version 2, expected 1"):
        store.set_status(TJ, {"phase": "Failed"}, expected_version=1)
    record = store.get(TJ)
    assert record is not None and record.status == {"phase": "Running", "step": 3} and record.status_version == 2
    assert record.generation == 1  # status is not spec
    with pytest.raises(Conflict, match="not in the state store"):
        store.set_status(ENV, {"phase": "Ready"})


def test_mark_deleting(store: StateStore) -> None:
    assert store.mark_deleting(TJ) is None
    store.put(TJ, {"v": 1})
    marked = store.mark_deleting(TJ)
    assert marked is not None and marked.deleting
    record = store.get(TJ)
    assert record is not None and record.deleting and record.spec == {"v": 1}


def test_delete_removes_events_and_launches_too(store: StateStore) -> None:
    store.put(TJ, {"v": 1})
    store.put(OTHER, {"v": 1})
    for key in (TJ, OTHER):
        store.add_event(Event(key, "Normal", "Launched", "job started"))
        store.record_launch(Launch(f"{key}/gen1/attempt1", key, "job-1"))

    assert store.delete(TJ) is True
    assert store.get(TJ) is None
    assert store.events(TJ) == [] and store.launches(TJ) == []
    assert len(store.events(OTHER)) == 1 and len(store.launches(OTHER)) == 1  # the other project's twin stays
    assert store.delete(TJ) is False
    # The key is free again: a re-created resource may launch anew.
    assert store.record_launch(Launch(f"{TJ}/gen1/attempt1", TJ, "job-2"))[1] is True


# ---- events


def test_events_count_repeats_of_the_latest_and_come_oldest_first(store: StateStore, clock: Clock) -> None:
    pulled = Event(TJ, "Warning", "BackOff", "image pull failed")
    store.add_event(pulled)
    clock.advance(1)
    store.add_event(pulled)
    store.add_event(Event(TJ, "Normal", "Started", "job started"))
    store.add_event(pulled)  # not the latest any more: a new row
    store.add_event(Event(OTHER, "Normal", "Started", "job started"))

    events = store.events(TJ)
    assert [(e.reason, e.count) for e in events] == [("BackOff", 2), ("Started", 1), ("BackOff", 1)]
    assert events[0].at == 1_000_001.0  # moved to the latest occurrence
    assert all(e.key == TJ for e in events)
    assert [e.reason for e in store.events(TJ, limit=2)] == ["Started", "BackOff"]
    explicit = Event(ENV, "Normal", "Built", "digest sha256:1", at=42.0)
    store.add_event(explicit)
    assert store.events(ENV) == [explicit]


def test_old_events_are_pruned(store: StateStore, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(sql, "EVENTS_KEPT", 3)
    for index in range(6):
        store.add_event(Event(TJ, "Normal", "Step", f"step {index}"))
    store.add_event(Event(OTHER, "Normal", "Step", "step 0"))
    assert [e.message for e in store.events(TJ)] == ["step 3", "step 4", "step 5"]
    assert len(store.events(OTHER)) == 1


# ---- launches


def test_record_launch_returns_the_first_record_the_second_time(store: StateStore) -> None:
    first = Launch("TrainingJob/default/tj1/gen1/attempt1", TJ, "tj1-g1-a1", {"host": "local", "pid": 42})
    stored, created = store.record_launch(first)
    assert created is True
    assert stored.at == 1_000_000.0 and stored.data == first.data
    again, created = store.record_launch(Launch(first.launch_key, TJ, "another-job", {"host": "ray"}))
    assert created is False
    assert again == stored
    store.record_launch(Launch("TrainingJob/default/tj1/gen1/attempt2", TJ, "tj1-g1-a2"))
    assert [launch.job for launch in store.launches(TJ)] == ["tj1-g1-a1", "tj1-g1-a2"]
    assert store.launches(OTHER) == []


def test_record_launch_from_8_threads_at_once_has_one_winner(store: StateStore) -> None:
    barrier = threading.Barrier(8)

    def launch(index: int) -> tuple[str, bool]:
        barrier.wait()
        results = [store.record_launch(Launch(f"key-{n}", TJ, f"job-{index}")) for n in range(10)]
        return ",".join(r.job for r, _ in results), sum(created for _, created in results)

    with ThreadPoolExecutor(8) as pool:
        outcomes = list(pool.map(launch, range(8)))
    assert sum(wins for _, wins in outcomes) == 10  # each key won exactly once
    assert len({jobs for jobs, _ in outcomes}) == 1  # and every thread was told the same winners
    assert len(store.launches(TJ)) == 10


def test_record_launch_from_2_processes_at_once_has_one_winner(
    store: StateStore, run_processes: Callable[[str, int], list[str]]
) -> None:
    outputs = run_processes(
        """
        key = ResourceKey("TrainingJob", "default", "tj1")
        won = [n for n in range(40) if store.record_launch(Launch(f"key-{n}", key, f"job-{me}"))[1]]
        print(json.dumps(won))
        """,
        2,
    )
    first, second = (set(json.loads(out)) for out in outputs)
    assert first | second == set(range(40))
    assert not first & second
    assert {launch.job for launch in store.launches(TJ) if int(launch.launch_key[4:]) in first} <= {"job-0", "job-1"}


# ---- the lease


def test_lease_held_names_holder_operation_and_lease_id(store: StateStore, clock: Clock) -> None:
    lease = store.acquire_lease("apply", "ada@host1 pid 7", "apply examples/quickstart", ttl_s=60)
    assert store.current_lease("apply") == lease
    clock.advance(12)
    with pytest.raises(LeaseHeld) as held:
        store.acquire_lease("apply", "bob@host2 pid 9", "apply .", ttl_s=60)
    message = held.value.message
    assert "ada@host1 pid 7" in message and "apply examples/quickstart" in message and lease.id in message
    assert "12s ago" in message
    assert held.value.lease == lease and held.value.delay == pytest.approx(48)
    assert f"nodus unlock {lease.id}" in (held.value.hint or "")
    assert store.current_lease("other") is None
    assert store.acquire_lease("other", "bob", "x", ttl_s=60).name == "other"  # leases are per name


def test_expired_lease_is_taken_over_and_the_old_holder_cannot_renew(store: StateStore, clock: Clock) -> None:
    old = store.acquire_lease("apply", "ada", "apply a", ttl_s=10)
    clock.advance(11)
    assert store.current_lease("apply") is None  # expired: nobody's
    new = store.acquire_lease("apply", "bob", "apply b", ttl_s=10)
    assert new.id != old.id and new.holder == "bob"
    with pytest.raises(Conflict, match=old.id):
        store.renew_lease(old, ttl_s=10)
    store.release_lease(old)  # releasing a lost lease leaves the new holder's alone
    assert store.current_lease("apply") == new


def test_renew_and_release(store: StateStore, clock: Clock) -> None:
    lease = store.acquire_lease("apply", "ada", "apply a", ttl_s=10)
    clock.advance(8)
    renewed = store.renew_lease(lease, ttl_s=10)
    assert renewed.id == lease.id and renewed.expires_at == 1_000_018.0
    clock.advance(5)  # past the first expiry, within the renewed one
    with pytest.raises(LeaseHeld):
        store.acquire_lease("apply", "bob", "apply b", ttl_s=10)
    store.release_lease(renewed)
    assert store.current_lease("apply") is None
    assert store.acquire_lease("apply", "bob", "apply b", ttl_s=10).holder == "bob"


def test_break_lease(store: StateStore) -> None:
    lease = store.acquire_lease("apply", "ada", "apply a", ttl_s=600)
    assert store.break_lease("no-such-id") is None
    assert store.break_lease(lease.id) == lease
    assert store.current_lease("apply") is None
    with pytest.raises(Conflict, match="broken or taken over"):
        store.renew_lease(lease, ttl_s=600)
    assert store.acquire_lease("apply", "bob", "apply b", ttl_s=600).holder == "bob"


def test_lease_from_2_processes_at_once_has_one_holder(
    store: StateStore, run_processes: Callable[[str, int], list[str]]
) -> None:
    outputs = run_processes(
        """
        try:
            lease = store.acquire_lease("apply", f"proc {me}", "apply race", ttl_s=600)
            print("held", lease.id)
        except LeaseHeld as error:
            print("refused", error.lease.id)
        """,
        2,
    )
    words = sorted(out.split() for out in outputs)
    assert [w[0] for w in words] == ["held", "refused"]
    assert words[0][1] == words[1][1]  # the loser was told the winner's lease


# ---- values, the serial and transactions


def test_values(store: StateStore) -> None:
    assert store.get_value("prices") is None
    store.set_value("prices", "v1")
    store.set_value("prices", "v2")
    assert store.get_value("prices") == "v2"


def test_serial_moves_on_every_write_and_not_on_reads(store: StateStore) -> None:
    serials = [store.serial()]

    def moved() -> bool:
        serials.append(store.serial())
        return serials[-1] != serials[-2]

    store.put(TJ, {"v": 1})
    assert moved()
    store.put(TJ, {"v": 1})
    assert moved()  # every put, even an unchanged one: a saved plan must not outlive it
    store.set_status(TJ, {"phase": "Running"})
    assert moved()
    store.mark_deleting(TJ)
    assert moved()
    store.delete(TJ)
    assert moved()
    store.get(TJ), store.list(), store.events(TJ), store.launches(TJ), store.current_lease("apply")
    store.get_value("x"), store.schema_version()
    assert not moved()
    store.delete(TJ)  # nothing there
    store.mark_deleting(TJ)
    assert not moved()
    assert serials == sorted(serials)


def test_a_failed_transaction_leaves_nothing(store: StateStore) -> None:
    store.put(ENV, {"v": 1})
    before = store.serial()

    def write_everything_then_fail() -> None:
        with store.transaction():
            store.put(TJ, {"v": 1})
            store.set_status(ENV, {"phase": "Ready"})
            store.add_event(Event(TJ, "Normal", "Created", "created"))
            store.record_launch(Launch("k", TJ, "job"))
            store.set_value("name", "value")
            with store.transaction():  # nested: joins the outer one
                store.put(OTHER, {"v": 1})
            raise RuntimeError("boom")

    with pytest.raises(RuntimeError, match="boom"):
        write_everything_then_fail()
    assert store.get(TJ) is None and store.get(OTHER) is None
    record = store.get(ENV)
    assert record is not None and record.status == {} and record.status_version == 0
    assert store.events(TJ) == [] and store.launches(TJ) == [] and store.get_value("name") is None
    assert store.serial() == before
    with store.transaction():
        store.put(TJ, {"v": 1})
        with store.transaction():
            store.put(OTHER, {"v": 1})
    assert store.get(TJ) is not None and store.get(OTHER) is not None


def test_uncommitted_writes_are_invisible_and_a_second_writer_waits(store: StateStore) -> None:
    inside = threading.Event()
    release = threading.Event()
    order: list[str] = []

    def hold() -> None:
        with store.transaction():
            store.put(TJ, {"v": 1})
            inside.set()
            release.wait(10)
            order.append("first committed")

    def second_writer() -> None:
        store.put(ENV, {"v": 1})
        order.append("second wrote")

    holder = threading.Thread(target=hold)
    holder.start()
    assert inside.wait(10)
    assert store.get(TJ) is None  # another thread: the transaction is its own
    writer = threading.Thread(target=second_writer)
    writer.start()
    time.sleep(0.2)
    assert order == []  # queued behind the first writer, not failed
    release.set()
    holder.join(10)
    writer.join(10)
    assert order == ["first committed", "second wrote"]
    assert store.get(TJ) is not None and store.get(ENV) is not None


def test_data_survives_reopening(store: StateStore, open_at: Callable[..., StateStore]) -> None:
    store.put(TJ, {"v": 1})
    store.set_value("k", "v")
    store.close()
    again = open_at()
    record = again.get(TJ)
    assert record is not None and record.spec == {"v": 1} and again.get_value("k") == "v"


# ---- schema migrations


def test_migrate_twice_is_a_no_op(open_at: Callable[..., StateStore]) -> None:
    store = open_at(migrate=False)
    assert store.schema_version() == 0
    assert store.migrate() == migrations.LATEST_VERSION
    store.put(TJ, {"v": 1})
    serial = store.serial()
    assert store.migrate() == migrations.LATEST_VERSION
    assert store.schema_version() == migrations.LATEST_VERSION
    assert store.get(TJ) is not None and store.serial() == serial


def test_two_processes_migrating_a_new_store_both_succeed(
    store_url: str, run_processes: Callable[[str, int], list[str]], open_at: Callable[..., StateStore]
) -> None:
    outputs = run_processes("print(store.migrate())", 2)
    assert [int(out) for out in outputs] == [migrations.LATEST_VERSION] * 2
    store = open_at(migrate=False)
    assert store.schema_version() == migrations.LATEST_VERSION
    store.put(TJ, {"v": 1})  # the tables are there once, usable
    assert store.serial() == 1


def test_a_newer_schema_is_refused(store: StateStore, raw_sql: Callable[[str], None]) -> None:
    raw_sql("INSERT INTO schema_migrations (version, description, applied_at) VALUES (99, 'from the future', 0)")
    with pytest.raises(PrerequisiteError, match="schema version 99") as refused:
        store.migrate()
    assert refused.value.message.endswith("upgrade nodus to the version that wrote it")  # one line says it all
    assert "\n" not in refused.value.message and refused.value.hint is None


# ---- open_store: --state values


def test_default_store_is_sqlite_in_the_project_state_folder(tmp_path: Path) -> None:
    store = open_store(None, project_state_dir=tmp_path / ".nodus")
    try:
        assert store.url == f"sqlite://{tmp_path}/.nodus/state.db"
        assert (tmp_path / ".nodus" / "state.db").is_file()
        assert store.schema_version() == migrations.LATEST_VERSION
        connection = sqlite3.connect(tmp_path / ".nodus" / "state.db")
        assert connection.execute("PRAGMA journal_mode").fetchone() == ("wal",)
        connection.close()
    finally:
        store.close()


@pytest.mark.parametrize("form", ["path", "str", "url"])
def test_sqlite_paths_and_urls(tmp_path: Path, form: str) -> None:
    target = tmp_path / "elsewhere" / "s.db"
    value: str | Path = {"path": target, "str": str(target), "url": f"sqlite://{target}"}[form]
    store = open_store(value, project_state_dir=tmp_path / ".nodus")
    store.close()
    assert target.is_file() and not (tmp_path / ".nodus").exists()


@pytest.mark.parametrize(
    ("value", "says"),
    [
        ("mysql://root:hunter2@db/nodus", "unknown kind of state store 'mysql'"),
        ("sqlite://relative/state.db", "absolute file"),
        ("sqlite:///:memory:", "in-memory"),
        ("  ", "--state is empty"),
    ],
)
def test_bad_state_values_are_one_line_config_errors(tmp_path: Path, value: str, says: str) -> None:
    with pytest.raises(ConfigError) as error:
        open_store(value, project_state_dir=tmp_path)
    assert says in error.value.message and "--state" in error.value.message
    assert "\n" not in error.value.message and "hunter2" not in error.value.message


def test_unreachable_postgres_is_a_temporary_error_without_the_password(tmp_path: Path) -> None:
    url = f"postgresql://nodus:s3cret@/state?host={tmp_path / 'no-server'}&connect_timeout=2"
    with pytest.raises(TemporaryError) as error:
        open_store(url, project_state_dir=tmp_path)
    assert "cannot reach the state store postgresql://nodus:***@/state" in error.value.message
    assert "s3cret" not in str(error.value) and "\n" not in error.value.message


def test_a_file_that_is_not_a_database_is_a_config_error(tmp_path: Path) -> None:
    path = tmp_path / "state.db"
    path.write_text("not sqlite at all, but long enough to have a header of some sort\n" * 20)
    with pytest.raises(ConfigError, match="is damaged: it is not a SQLite database"):
        open_store(path, project_state_dir=tmp_path)


def test_a_writer_gives_up_after_the_busy_timeout(store: StateStore, store_url: str, backend: str) -> None:
    waiter: StateStore = (
        SqliteStore(Path(store_url[len("sqlite://") :]), busy_timeout_s=0.2)
        if backend == "sqlite"
        else PostgresStore(store_url, busy_timeout_s=0.2)
    )
    try:
        with store.transaction():
            store.put(TJ, {"v": 1})
            started = time.monotonic()
            with pytest.raises(TemporaryError, match=r"is busy: another nodus kept it locked for over 0.2s"):
                waiter.put(ENV, {"v": 1})
            assert time.monotonic() - started >= 0.15  # it waited before giving up
        assert waiter.put(ENV, {"v": 1}).generation == 1
    finally:
        waiter.close()


# ---- connections: threads and forks


@pytest.fixture
def count_connections(store_url: str, backend: str) -> Callable[[], int]:
    """How many connections nodus holds to the store now: server sessions, or open handles of the file."""
    if backend == "sqlite":
        path = os.path.realpath(store_url[len("sqlite://") :])

        def files() -> int:
            fds = Path("/proc/self/fd")
            return sum(1 for fd in fds.iterdir() if os.path.realpath(fd) == path)

        return files
    import psycopg

    def sessions() -> int:
        with psycopg.connect(store_url, autocommit=True) as connection:
            row = connection.execute(
                "SELECT count(*) FROM pg_stat_activity WHERE datname = current_database() AND application_name = 'nodus'"
            ).fetchone()
        return int(row[0]) if row else 0

    return sessions


def test_connections_of_finished_threads_are_closed(store: StateStore, count_connections: Callable[[], int]) -> None:
    store.put(TJ, {"v": 1})
    before = count_connections()

    def short_lived_threads(count: int) -> int:
        for _ in range(count):  # one after another, as a thread pool per apply wave makes them
            thread = threading.Thread(target=store.get, args=(TJ,))
            thread.start()
            thread.join()
        return count_connections()

    after_4 = short_lived_threads(4)
    assert short_lived_threads(12) == after_4  # no growth: a finished thread's connection is closed
    # The last thread's connection stays until the next opens (SQLite may also keep a closed one's file open
    # while another holds locks on it: it must not drop the process's POSIX locks).
    assert after_4 <= before + 2
    store.close()
    # A server session ends a moment after its client hangs up (pg_stat_activity lists it until its backend has
    # exited): wait for that, a few seconds at most, rather than count in the gap (CI once saw 2 there).
    deadline = time.monotonic() + 5
    while count_connections() and time.monotonic() < deadline:
        time.sleep(0.05)
    assert count_connections() == 0


def test_a_forked_child_opens_its_own_connection(store: StateStore) -> None:
    store.put(TJ, {"v": 1})  # the parent's connection exists before the fork
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)  # fork with threads around: the child runs no threads
        pid = os.fork()
    if pid == 0:
        code = 1
        try:
            store.put(ENV, {"v": 1})
            code = 0
        finally:
            os._exit(code)
    _, status = os.waitpid(pid, 0)
    assert os.waitstatus_to_exitcode(status) == 0
    # The parent's own connection still works and sees the child's write.
    assert store.get(ENV) is not None
    assert store.put(OTHER, {"v": 1}).generation == 1


@pytest.mark.postgres
def test_postgres_store_outlives_a_lost_session(postgres_cluster: Any, tmp_path: Path) -> None:
    """A server restart or an idle timeout ends sessions: reads and new transactions reconnect; a transaction
    that was cut is a TemporaryError to its caller and leaves nothing."""
    url = postgres_cluster.create_database()
    store = open_store(url, project_state_dir=tmp_path)
    admin = postgres_cluster.admin

    def cut_sessions() -> None:
        admin.execute(
            "SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE datname = %s AND application_name = 'nodus'",
            (url.split("/")[3].split("?")[0],),
        )
        time.sleep(0.05)  # the server ends them asynchronously

    try:
        store.put(TJ, {"v": 1})
        cut_sessions()
        assert store.get(TJ) is not None  # an idle read: reconnected
        cut_sessions()
        assert store.put(ENV, {"v": 1}).generation == 1  # a new transaction: reconnected

        def cut_midway() -> None:
            with store.transaction():
                store.put(OTHER, {"v": 1})
                cut_sessions()
                store.put(OTHER, {"v": 2})

        with pytest.raises(TemporaryError, match="the state store postgresql://postgres@/test_"):
            cut_midway()
        assert store.get(OTHER) is None
    finally:
        store.close()


def test_an_apply_longer_than_the_ttl_keeps_its_lease(
    store: StateStore, clock: Clock, monkeypatch: pytest.MonkeyPatch, capfd: pytest.CaptureFixture[str]
) -> None:
    from nodus.reconciler import apply

    monkeypatch.setattr(apply, "LEASE_TTL_S", 0.3)  # renewed every 0.1 s of real time
    with apply.holding_lease(store, "apply a long build") as lease:
        clock.advance(0.25)
        deadline = time.monotonic() + 10
        while (current := store.current_lease("apply")) is not None and current.expires_at <= lease.expires_at:
            assert time.monotonic() < deadline, "the lease was never renewed"
            time.sleep(0.02)
        clock.advance(0.2)  # past the first expiry
        held = store.current_lease("apply")
        assert held is not None and held.id == lease.id
        with pytest.raises(LeaseHeld):
            store.acquire_lease("apply", "bob", "apply b", ttl_s=10)
        store.break_lease(lease.id)  # `nodus unlock`: the renewer says so once and stops
        deadline = time.monotonic() + 10
        while "broken or taken over" not in (said := capfd.readouterr().err):
            assert time.monotonic() < deadline, said
            time.sleep(0.02)
        other = store.acquire_lease("apply", "bob", "apply b", ttl_s=10)
    assert store.current_lease("apply") == other  # releasing the lost lease left bob's alone
