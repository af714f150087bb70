"""The one implementation of `StateStore` in SQL; SQLite and PostgreSQL plug in connections and a dialect.

Who uses it: `SqliteStore` (`sqlite.py`) and `PostgresStore` (`postgres.py`) subclass `SqlStore`; nothing else
does. Everything callers see is in `records.py`.

Concurrency, the same on both backends:
- one connection per thread (and per process: a forked child opens its own), so `transaction()` is per thread;
- every write runs in a transaction that first takes the store's single writer lock (`BEGIN IMMEDIATE` on
  SQLite, a row lock on the `serial` counter on PostgreSQL), so writers queue instead of failing late and no
  two writers can deadlock; one queued longer than the busy timeout (30 s) gets a TemporaryError; reads take
  no lock. So keep `transaction()` blocks short: while one is open, every other writer waits;
- the serial is bumped inside the same transaction as the write it counts.
SQL here uses `?` placeholders; the PostgreSQL store turns them into `%s`.
"""

from __future__ import annotations

import builtins
import contextlib
import json
import os
import secrets
import threading
import weakref
from abc import ABC, abstractmethod
from collections.abc import Callable, Iterator, Sequence
from contextlib import AbstractContextManager, contextmanager
from dataclasses import dataclass, replace
from typing import Any, Protocol
from urllib.parse import urlsplit, urlunsplit

from nodus.errors import ConfigError, NodusError, PrerequisiteError
from nodus.reconciler.state import migrations
from nodus.reconciler.state.migrations import Dialect
from nodus.reconciler.state.records import (
    Conflict,
    Event,
    JSONObject,
    Launch,
    Lease,
    LeaseHeld,
    ResourceKey,
    ResourceRecord,
    SyncRecord,
    canonical,
    spec_hash,
)

EVENTS_KEPT = 1000
"""Events kept per resource; older ones are dropped when a new one is added (a retry loop must not grow it)."""

_RESOURCE_COLUMNS = (
    "kind, project, name, spec, spec_hash, generation, status, status_version, created_at, updated_at, deleting"
)
_EVENT_COLUMNS = "kind, project, name, type, reason, message, happened_at, count"
_LAUNCH_COLUMNS = "launch_key, kind, project, name, job, data, launched_at"
_LEASE_COLUMNS = "id, name, holder, operation, acquired_at, expires_at"
_KEY = "kind = ? AND project = ? AND name = ?"
_SYNC_COLUMNS = "kind, project, name, revision, desired_hash, outcome, message, synced_at"
# Records as get and list return them: with the controller's sync record of the same key, when there is one.
_JOINED = (
    "SELECT "
    + ", ".join(f"r.{column.strip()}" for column in _RESOURCE_COLUMNS.split(","))
    + ", s.revision, s.desired_hash, s.outcome, s.message, s.synced_at FROM resources r LEFT JOIN sync_records s"
    " ON s.kind = r.kind AND s.project = r.project AND s.name = r.name"
)

Row = Sequence[Any]


class Cursor(Protocol):
    """What both drivers' cursors offer and the store uses."""

    @property
    def rowcount(self) -> int: ...

    def fetchone(self) -> Any: ...

    def fetchall(self) -> Any: ...


def redact_url(url: str) -> str:
    """The URL without its password, for messages and `store.url`."""
    try:
        parts = urlsplit(url)
    except ValueError:
        return "<unparsable URL>"
    if parts.password is None:
        return url
    netloc = parts.netloc.rpartition("@")
    user = netloc[0].partition(":")[0]
    return urlunsplit(parts._replace(netloc=f"{user}:***@{netloc[2]}"))


class DamagedStoreError(ConfigError):
    """A store that cannot be trusted (`store` names its file or URL, `what` says what is wrong), in one line:
    nothing is read from it as if it were empty, and nothing is planned or applied on it."""

    def __init__(self, store: str, what: str) -> None:
        super().__init__(
            f"the state store {store} is damaged: {what}; "
            "restore it from a backup, then verify it with nodus state check"
        )
        self.store = store
        self.what = what


def _key_params(key: ResourceKey) -> tuple[str, str, str]:
    return (key.kind, key.project, key.name)


def _json_copy(document: JSONObject) -> JSONObject:
    """The document as the store will give it back (canonical key order); fails before writing if not JSON."""
    copied: JSONObject = json.loads(canonical(document))
    return copied


def _alive(thread: weakref.ref[threading.Thread]) -> bool:
    alive = thread()
    return alive is not None and alive.is_alive()


@dataclass
class _ThreadState:
    connection: Any
    pid: int
    depth: int = 0


class SqlStore(ABC):
    """`StateStore` over a DB-API connection per thread; subclasses fill the `_`-prefixed abstract seams."""

    dialect: Dialect
    for_update: str = ""
    """What a read that a write will follow appends to lock the row (SQLite's writer lock covers the file)."""

    def __init__(self, url: str, *, clock: Callable[[], float]) -> None:
        self.url = url
        self._clock = clock
        self._local = threading.local()
        self._opened: list[tuple[weakref.ref[threading.Thread], Any]] = []  # (thread, its connection)
        self._inherited: list[Any] = []  # a parent's connections after fork: kept alive, never used or closed
        self._lock = threading.Lock()

    # ---- the seams a backend fills

    @abstractmethod
    def _connect(self) -> Any: ...

    @abstractmethod
    def _execute(self, connection: Any, sql: str, params: Sequence[object]) -> Cursor: ...

    @abstractmethod
    def _begin(self, connection: Any) -> None:
        """Start a write transaction holding the writer lock (or waiting for it)."""

    @abstractmethod
    def _lock_writes(self) -> None:
        """Inside a transaction: take the writer lock unless `_begin` already holds it."""

    @abstractmethod
    def _lock_migrations(self) -> None:
        """Inside a transaction, before any table exists: serialise migrating processes."""

    @abstractmethod
    def _has_table(self, name: str) -> bool: ...

    @abstractmethod
    def _table_names(self) -> set[str]:
        """The tables of the store (in its schema, on PostgreSQL)."""

    @abstractmethod
    def _dump_json(self, document: JSONObject) -> object: ...

    @abstractmethod
    def _load_json(self, value: Any) -> JSONObject: ...

    @abstractmethod
    def _translate(self, error: Exception) -> NodusError | None:
        """The user-facing error for a driver error, or None when it is a bug."""

    def _usable(self, connection: Any) -> bool:
        return True

    # ---- connections and transactions

    def _state(self) -> _ThreadState:
        state: _ThreadState | None = getattr(self._local, "state", None)
        pid = os.getpid()
        if state is not None and state.pid != pid:
            # A forked child shares the parent's sockets and files: closing (or garbage-collecting) its copies
            # would end the parent's sessions, so they are kept alive, unused, and the child opens its own.
            with self._lock:
                self._inherited.extend(connection for _, connection in self._opened)
                self._opened = []
            state = None
        if state is not None and state.depth == 0 and not self._usable(state.connection):
            self._close_quietly(state.connection)
            state = None
        if state is None:
            state = _ThreadState(self._open_connection(), pid)
            self._local.state = state
        return state

    def _open_connection(self) -> Any:
        connection = self._guarded(self._connect)
        with self._lock:
            # Threads come and go (a pool per apply wave); their connections go with them, not at close().
            dead = [(thread, old) for thread, old in self._opened if not _alive(thread)]
            self._opened = [entry for entry in self._opened if entry not in dead]
            self._opened.append((weakref.ref(threading.current_thread()), connection))
        for _, old in dead:
            with contextlib.suppress(Exception):
                old.close()
        return connection

    def _guarded(self, action: Callable[[], Any]) -> Any:
        try:
            return action()
        except NodusError:
            raise
        except Exception as error:
            translated = self._translate(error)
            if translated is None:
                raise
            raise translated from error

    def _run(self, sql: str, params: Sequence[object] = ()) -> Cursor:
        cursor: Cursor = self._outside_or_again(lambda connection: self._execute(connection, sql, params))
        return cursor

    def _outside_or_again(self, action: Callable[[Any], Any]) -> Any:
        """Run `action(connection)`; when it finds an idle connection lost (a server restart, an idle timeout)
        outside a transaction, run it once more on a new one. Safe because outside a transaction the store only
        reads or says BEGIN: every write is inside one, and a lost transaction is an error to its caller."""
        state = self._state()
        try:
            return self._guarded(lambda: action(state.connection))
        except NodusError:
            if state.depth or self._usable(state.connection):
                raise
        return self._guarded(lambda: action(self._state().connection))

    def _one(self, sql: str, params: Sequence[object] = ()) -> Row | None:
        # Fetched inside the guard: SQLite reads pages as rows are fetched, so a damaged page fails here.
        row: Row | None = self._outside_or_again(lambda connection: self._execute(connection, sql, params).fetchone())
        return row

    def _all(self, sql: str, params: Sequence[object] = ()) -> list[Row]:
        rows = self._outside_or_again(lambda connection: self._execute(connection, sql, params).fetchall())
        return list(rows)

    @contextmanager
    def transaction(self) -> Iterator[None]:
        state = self._state()
        if state.depth:
            state.depth += 1
            try:
                yield
            finally:
                state.depth -= 1
            return
        self._outside_or_again(self._begin)
        state = self._state()  # a new one when BEGIN found the old connection lost
        connection = state.connection
        state.depth = 1
        try:
            yield
            self._guarded(lambda: self._execute(connection, "COMMIT", ()))
        except BaseException:
            self._rollback_quietly(connection)
            raise
        finally:
            state.depth = 0

    @contextmanager
    def _writing(self) -> Iterator[None]:
        with self.transaction():
            self._lock_writes()
            yield

    def _rollback_quietly(self, connection: Any) -> None:
        # The transaction is gone either way (connection lost, already aborted).
        with contextlib.suppress(Exception):
            self._execute(connection, "ROLLBACK", ())

    def _close_quietly(self, connection: Any) -> None:
        with self._lock:
            self._opened = [entry for entry in self._opened if entry[1] is not connection]
        # Closing a broken connection may fail; it is dropped either way.
        with contextlib.suppress(Exception):
            connection.close()

    def close(self) -> None:
        with self._lock:
            opened, self._opened = self._opened, []
        for _, connection in opened:
            with contextlib.suppress(Exception):  # best effort at shutdown
                connection.close()
        self._local = threading.local()

    # ---- schema

    def verify(self) -> None:
        """Raise when the store is damaged, before anything reads or migrates it (SQLite: `quick_check`, well
        under a second for a large store). `open_store` calls it once per open."""
        problems = self.integrity_problems()
        if problems:
            more = f" (and {len(problems) - 1} more problems)" if len(problems) > 1 else ""
            raise DamagedStoreError(self._name(), f"SQLite's quick_check: {problems[0]}{more}")

    def integrity_problems(self, *, thorough: bool = False) -> builtins.list[str]:
        """What a check of the store's own pages finds; nothing where the server keeps them (PostgreSQL)."""
        return []

    def _name(self) -> str:
        """How messages name the store: its file, or its URL without the password."""
        return self.url

    def migrate(self) -> int:
        with self.transaction():
            self._lock_migrations()
            self._run(migrations.SCHEMA_MIGRATIONS_DDL)
            current = self._recorded_version()
            if current > migrations.LATEST_VERSION:
                raise PrerequisiteError(  # one line: what is wrong and what to do
                    f"the state store {self._name()} is at schema version {current}, from a newer nodus (this one "
                    f"knows versions up to {migrations.LATEST_VERSION}): upgrade nodus to the version that wrote it"
                )
            for migration in migrations.pending(current):
                for statement in migration.sql(self.dialect):
                    self._run(statement)
                self._run(
                    "INSERT INTO schema_migrations (version, description, applied_at) VALUES (?, ?, ?)",
                    (migration.version, migration.description, self._clock()),
                )
        version = self.schema_version()
        missing = self.missing_tables(version)
        if missing:
            raise DamagedStoreError(
                self._name(), f"schema version {version} has tables it lacks ({', '.join(missing)})"
            )
        return version

    def unreadable_documents(self) -> builtins.list[str]:
        """The JSON documents (resources' spec and status, launches' data) that do not parse, each named: SQLite
        checks its pages, not the text in them, so a flipped bit inside a document is found only here."""
        documents: builtins.list[tuple[str, Any]] = []
        for kind, project, name, spec, status in self._all("SELECT kind, project, name, spec, status FROM resources"):
            documents += [(f"{kind}/{project}/{name} spec", spec), (f"{kind}/{project}/{name} status", status)]
        for launch_key, data in self._all("SELECT launch_key, data FROM launches"):
            documents.append((f"launch {launch_key}", data))
        found: builtins.list[str] = []
        for where, value in documents:
            try:
                self._load_json(value)
            except DamagedStoreError as error:
                found.append(f"{where}: {error.what}")
        return found

    def missing_tables(self, version: int) -> builtins.list[str]:
        """The tables a store at schema `version` has, and which this one lacks."""
        present = self._table_names()
        return [name for name in migrations.tables(version) if name not in present]

    def schema_version(self) -> int:
        if not self._has_table("schema_migrations"):
            return 0
        return self._recorded_version()

    def _recorded_version(self) -> int:
        row = self._one("SELECT MAX(version) FROM schema_migrations")
        return int(row[0]) if row and row[0] is not None else 0

    # ---- resources

    def _record(self, row: Row) -> ResourceRecord:
        key = ResourceKey(row[0], row[1], row[2])
        sync = None
        if len(row) > 11 and row[11] is not None:  # a joined row (get, list) with a sync record
            sync = SyncRecord(key, row[11], row[12], row[13], row[14], float(row[15]))
        return ResourceRecord(
            key=ResourceKey(row[0], row[1], row[2]),
            spec=self._load_json(row[3]),
            spec_hash=row[4],
            generation=int(row[5]),
            status=self._load_json(row[6]),
            status_version=int(row[7]),
            created_at=float(row[8]),
            updated_at=float(row[9]),
            deleting=bool(row[10]),
            sync=sync,
        )

    def _get(self, key: ResourceKey, *, for_update: bool = False) -> ResourceRecord | None:
        lock = self.for_update if for_update else ""
        row = self._one(f"SELECT {_RESOURCE_COLUMNS} FROM resources WHERE {_KEY}{lock}", _key_params(key))
        return self._record(row) if row else None

    def get(self, key: ResourceKey) -> ResourceRecord | None:
        row = self._one(f"{_JOINED} WHERE r.kind = ? AND r.project = ? AND r.name = ?", _key_params(key))
        return self._record(row) if row else None

    def list(self, kind: str | None = None, project: str | None = None) -> list[ResourceRecord]:
        where: list[str] = []
        params: list[object] = []
        for column, value in (("kind", kind), ("project", project)):
            if value is not None:
                where.append(f"r.{column} = ?")
                params.append(value)
        clause = f" WHERE {' AND '.join(where)}" if where else ""
        rows = self._all(f"{_JOINED}{clause}", params)
        # Sorted here, not by ORDER BY: a PostgreSQL database's collation may order text unlike Python.
        return sorted((self._record(row) for row in rows), key=lambda record: record.key)

    def put(self, key: ResourceKey, spec: JSONObject, *, expected_generation: int | None = None) -> ResourceRecord:
        document = _json_copy(spec)
        digest = spec_hash(document)
        with self._writing():
            current = self._get(key, for_update=True)
            actual = current.generation if current else 0
            if expected_generation is not None and actual != expected_generation:
                raise Conflict(
                    f"{key} changed meanwhile: it is at generation {actual}, expected {expected_generation}",
                    hint="plan again",
                )
            now = self._clock()
            if current is None:
                record = ResourceRecord(key, document, digest, created_at=now, updated_at=now)
                self._run(
                    f"INSERT INTO resources ({_RESOURCE_COLUMNS}) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
                    (
                        *_key_params(key),
                        self._dump_json(document),
                        digest,
                        record.generation,
                        self._dump_json(record.status),
                        record.status_version,
                        now,
                        now,
                        False,
                    ),
                )
            elif current.spec_hash == digest:
                record = current
            else:
                record = replace(current, spec=document, spec_hash=digest, generation=actual + 1, updated_at=now)
                self._run(
                    f"UPDATE resources SET spec = ?, spec_hash = ?, generation = ?, updated_at = ? WHERE {_KEY}",
                    (self._dump_json(document), digest, record.generation, now, *_key_params(key)),
                )
            self._bump_serial()
        return record

    def set_status(
        self, key: ResourceKey, status: JSONObject, *, expected_version: int | None = None
    ) -> ResourceRecord:
        document = _json_copy(status)
        with self._writing():
            current = self._get(key, for_update=True)
            if current is None:
                raise Conflict(f"{key} is not in the state store (deleted meanwhile?)", hint="plan again")
            if expected_version is not None and current.status_version != expected_version:
                raise Conflict(
                    f"the status of {key} changed meanwhile: "
                    f"it is at version {current.status_version}, expected {expected_version}"
                )
            record = replace(
                current, status=document, status_version=current.status_version + 1, updated_at=self._clock()
            )
            self._run(
                f"UPDATE resources SET status = ?, status_version = ?, updated_at = ? WHERE {_KEY}",
                (self._dump_json(document), record.status_version, record.updated_at, *_key_params(key)),
            )
            self._bump_serial()
        return record

    def mark_deleting(self, key: ResourceKey) -> ResourceRecord | None:
        with self._writing():
            current = self._get(key, for_update=True)
            if current is None:
                return None
            record = replace(current, deleting=True, updated_at=self._clock())
            self._run(
                f"UPDATE resources SET deleting = ?, updated_at = ? WHERE {_KEY}",
                (True, record.updated_at, *_key_params(key)),
            )
            self._bump_serial()
        return record

    def delete(self, key: ResourceKey) -> bool:
        with self._writing():
            # Events and launches go even without a record: nothing may outlive the resource they name.
            self._run(f"DELETE FROM events WHERE {_KEY}", _key_params(key))
            self._run(f"DELETE FROM launches WHERE {_KEY}", _key_params(key))
            deleted = self._run(f"DELETE FROM resources WHERE {_KEY}", _key_params(key)).rowcount > 0
            if deleted:
                self._bump_serial()
        return deleted

    # ---- events

    def add_event(self, event: Event) -> None:
        at = event.at or self._clock()
        params = _key_params(event.key)
        with self._writing():
            latest = self._one(
                f"SELECT id, type, reason, message FROM events WHERE {_KEY} ORDER BY id DESC LIMIT 1", params
            )
            if latest is not None and tuple(latest[1:]) == (event.type, event.reason, event.message):
                # A repeat of the latest event: count it and move its time to the latest occurrence.
                self._run(
                    "UPDATE events SET count = count + ?, happened_at = ? WHERE id = ?", (event.count, at, latest[0])
                )
                return
            self._run(
                f"INSERT INTO events ({_EVENT_COLUMNS}) VALUES (?, ?, ?, ?, ?, ?, ?, ?)",
                (*params, event.type, event.reason, event.message, at, event.count),
            )
            self._run(
                f"DELETE FROM events WHERE {_KEY} AND id <= "
                f"(SELECT id FROM events WHERE {_KEY} ORDER BY id DESC LIMIT 1 OFFSET ?)",
                (*params, *params, EVENTS_KEPT),
            )

    def events(self, key: ResourceKey, limit: int = 50) -> builtins.list[Event]:
        rows = self._all(
            f"SELECT {_EVENT_COLUMNS} FROM events WHERE {_KEY} ORDER BY id DESC LIMIT ?", (*_key_params(key), limit)
        )
        return [
            Event(ResourceKey(row[0], row[1], row[2]), row[3], row[4], row[5], float(row[6]), int(row[7]))
            for row in reversed(rows)
        ]

    # ---- launches

    def _launch(self, row: Row) -> Launch:
        return Launch(row[0], ResourceKey(row[1], row[2], row[3]), row[4], self._load_json(row[5]), float(row[6]))

    def record_launch(self, launch: Launch) -> tuple[Launch, bool]:
        stored = replace(launch, data=_json_copy(launch.data), at=launch.at or self._clock())
        with self._writing():
            inserted = self._run(
                f"INSERT INTO launches ({_LAUNCH_COLUMNS}) VALUES (?, ?, ?, ?, ?, ?, ?) "
                "ON CONFLICT (launch_key) DO NOTHING",
                (stored.launch_key, *_key_params(stored.key), stored.job, self._dump_json(stored.data), stored.at),
            ).rowcount
            if inserted:
                return stored, True
            row = self._one(f"SELECT {_LAUNCH_COLUMNS} FROM launches WHERE launch_key = ?", (launch.launch_key,))
        if row is None:  # the writer lock makes this impossible; fail loudly rather than launch twice
            raise RuntimeError(f"launch {launch.launch_key} neither inserted nor found")
        return self._launch(row), False

    def launches(self, key: ResourceKey) -> builtins.list[Launch]:
        rows = self._all(
            f"SELECT {_LAUNCH_COLUMNS} FROM launches WHERE {_KEY} ORDER BY launched_at, launch_key", _key_params(key)
        )
        return [self._launch(row) for row in rows]

    # ---- the lease

    def _lease(self, row: Row) -> Lease:
        return Lease(row[0], row[1], row[2], row[3], float(row[4]), float(row[5]))

    def acquire_lease(self, name: str, holder: str, operation: str, ttl_s: float) -> Lease:
        with self._writing():
            now = self._clock()
            lease = Lease(secrets.token_hex(6), name, holder, operation, now, now + ttl_s)
            # One statement: insert, or take over a lease that has expired; a live one is left alone.
            taken = self._run(
                f"INSERT INTO leases ({_LEASE_COLUMNS}) VALUES (?, ?, ?, ?, ?, ?) ON CONFLICT (name) DO UPDATE SET "
                "id = excluded.id, holder = excluded.holder, operation = excluded.operation, "
                "acquired_at = excluded.acquired_at, expires_at = excluded.expires_at "
                "WHERE leases.expires_at <= ?",
                (lease.id, name, holder, operation, lease.acquired_at, lease.expires_at, now),
            ).rowcount
            if taken:
                return lease
            row = self._one(f"SELECT {_LEASE_COLUMNS} FROM leases WHERE name = ?", (name,))
        if row is None:  # the writer lock makes this impossible
            raise RuntimeError(f"lease {name} neither taken nor found")
        raise LeaseHeld(self._lease(row), now)

    def renew_lease(self, lease: Lease, ttl_s: float) -> Lease:
        with self._writing():
            renewed = replace(lease, expires_at=self._clock() + ttl_s)
            updated = self._run(
                "UPDATE leases SET expires_at = ? WHERE name = ? AND id = ?", (renewed.expires_at, lease.name, lease.id)
            ).rowcount
        if not updated:
            raise Conflict(
                f"the {lease.name} lease {lease.id} was broken or taken over meanwhile",
                hint="another nodus may be applying now; plan again when it is done",
            )
        return renewed

    def release_lease(self, lease: Lease) -> None:
        with self._writing():
            self._run("DELETE FROM leases WHERE name = ? AND id = ?", (lease.name, lease.id))

    def current_lease(self, name: str) -> Lease | None:
        """The lease in force (an expired one is nobody's and returns None)."""
        row = self._one(f"SELECT {_LEASE_COLUMNS} FROM leases WHERE name = ? AND expires_at > ?", (name, self._clock()))
        return self._lease(row) if row else None

    def break_lease(self, lease_id: str) -> Lease | None:
        with self._writing():
            row = self._one(f"SELECT {_LEASE_COLUMNS} FROM leases WHERE id = ?", (lease_id,))
            if row is None:
                return None
            self._run("DELETE FROM leases WHERE id = ?", (lease_id,))
        return self._lease(row)

    # ---- what nodus controller synced

    def record_sync(self, records: Sequence[SyncRecord]) -> None:
        # Not counted by the serial: a sync record says what git holds, which no saved plan relies on.
        at = self._clock()
        with self._writing():
            self._run("DELETE FROM sync_records")
            for record in records:
                self._run(
                    f"INSERT INTO sync_records ({_SYNC_COLUMNS}) VALUES (?, ?, ?, ?, ?, ?, ?, ?)",
                    (
                        *_key_params(record.key),
                        record.revision,
                        record.desired_hash,
                        record.outcome,
                        record.message,
                        record.at or at,
                    ),
                )

    def sync_records(self) -> builtins.list[SyncRecord]:
        rows = self._all(f"SELECT {_SYNC_COLUMNS} FROM sync_records")
        found = (
            SyncRecord(ResourceKey(row[0], row[1], row[2]), row[3], row[4], row[5], row[6], float(row[7]))
            for row in rows
        )
        return sorted(found, key=lambda record: record.key)

    # ---- other modules' tables (the inference ledger): their SQL, this store's connections and locks

    def write_transaction(self) -> AbstractContextManager[None]:
        """A transaction that holds the writer lock from its first statement to its commit: what it reads cannot
        change under it, so a check and the write it allows are one atomic step (admitting a request under a
        limit). Nested calls join the outer transaction. Not counted by the serial: no saved plan reads these."""
        return self._writing()

    def execute(self, sql: str, params: Sequence[object] = ()) -> Cursor:
        """One statement (`?` placeholders on both backends); a write belongs inside `write_transaction()`."""
        return self._run(sql, params)

    def fetch_one(self, sql: str, params: Sequence[object] = ()) -> Row | None:
        return self._one(sql, params)

    def fetch_all(self, sql: str, params: Sequence[object] = ()) -> builtins.list[Row]:
        return self._all(sql, params)

    # ---- values and the serial

    def get_value(self, name: str) -> str | None:
        row = self._one("SELECT value FROM kv WHERE name = ?", (name,))
        return str(row[0]) if row else None

    def set_value(self, name: str, value: str) -> None:
        with self._writing():
            self._run(
                "INSERT INTO kv (name, value) VALUES (?, ?) ON CONFLICT (name) DO UPDATE SET value = excluded.value",
                (name, value),
            )

    def serial(self) -> int:
        row = self._one("SELECT value FROM counters WHERE name = 'serial'")
        return int(row[0]) if row else 0

    def _bump_serial(self) -> None:
        self._run("UPDATE counters SET value = value + 1 WHERE name = 'serial'")
