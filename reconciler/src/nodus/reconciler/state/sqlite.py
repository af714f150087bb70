"""The default state store: one SQLite file in the project's state folder (`.nodus/state.db`).

Who uses it: `open_store()` when `--state` is absent, a file path or `sqlite:///PATH`. Two `nodus apply`
processes, and threads within one, may use the same file at once:
- WAL journal, so readers never wait for the writer and the writer never waits for readers;
- every write transaction starts with `BEGIN IMMEDIATE`: it takes the file's write lock up front, waiting up to
  `busy_timeout_s` for another writer, instead of failing at its first write when a reader would have to
  upgrade (SQLITE_BUSY without waiting);
- one connection per thread (`SqlStore`), so transactions of different threads never mix.
"""

from __future__ import annotations

import json
import os
import sqlite3
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from nodus.errors import ConfigError, NodusError, TemporaryError
from nodus.reconciler.state.migrations import SQLITE
from nodus.reconciler.state.records import JSONObject, canonical
from nodus.reconciler.state.sql import Cursor, SqlStore

BUSY_TIMEOUT_S = 30.0
"""How long a writer waits for another one (an apply's transactions are short: milliseconds)."""


class SqliteStore(SqlStore):
    """`StateStore` in one SQLite file; the folder is created when missing."""

    dialect = SQLITE

    def __init__(
        self, path: Path, *, busy_timeout_s: float = BUSY_TIMEOUT_S, clock: Callable[[], float] = time.time
    ) -> None:
        self.path = Path(path).expanduser().absolute()
        super().__init__(f"sqlite://{self.path}", clock=clock)
        self._busy_timeout_s = busy_timeout_s
        try:
            self.path.parent.mkdir(parents=True, exist_ok=True)
        except OSError as error:
            raise ConfigError(
                f"cannot create the folder of the state store {self.path}: {error.strerror}", hint="check --state"
            ) from error

    def _connect(self) -> sqlite3.Connection:
        # isolation_level=None: the driver starts no transactions of its own; `transaction()` says BEGIN.
        # check_same_thread=False only so close() may close every thread's connection; each thread uses its own.
        connection = sqlite3.connect(
            self.path, timeout=self._busy_timeout_s, isolation_level=None, check_same_thread=False
        )
        try:
            connection.execute(f"PRAGMA busy_timeout = {int(self._busy_timeout_s * 1000)}")
            self._enable_wal(connection)
        except BaseException:
            connection.close()
            raise
        return connection

    def _enable_wal(self, connection: sqlite3.Connection) -> None:
        """Switch the file to WAL (persistent, so a no-op after the first time).

        The first switch needs the file to itself; when two processes open a new store at once, one may be
        told the file is locked without the busy handler being asked, so that case is retried here."""
        deadline = time.monotonic() + self._busy_timeout_s
        while True:
            try:
                mode = connection.execute("PRAGMA journal_mode = WAL").fetchone()[0]
            except sqlite3.OperationalError as error:
                if "locked" not in str(error) or time.monotonic() > deadline:
                    raise
                time.sleep(0.01)
                continue
            if str(mode).lower() != "wal":
                raise ConfigError(
                    f"the state store {self.path} cannot use a write-ahead log (journal mode {mode})",
                    hint="put the state on a local file system, or use --state postgresql://...",
                )
            return

    def _execute(self, connection: Any, sql: str, params: Sequence[object]) -> Cursor:
        cursor: sqlite3.Cursor = connection.execute(sql, tuple(params))
        return cursor

    def _begin(self, connection: Any) -> None:
        connection.execute("BEGIN IMMEDIATE")

    def _lock_writes(self) -> None:
        """`BEGIN IMMEDIATE` already holds the file's write lock."""

    def _lock_migrations(self) -> None:
        """`BEGIN IMMEDIATE` already serialises migrating processes."""

    def _has_table(self, name: str) -> bool:
        return self._one("SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = ?", (name,)) is not None

    def _dump_json(self, document: JSONObject) -> object:
        return canonical(document)

    def _load_json(self, value: Any) -> JSONObject:
        document: JSONObject = json.loads(value)
        return document

    def _translate(self, error: Exception) -> NodusError | None:
        text = str(error)
        if isinstance(error, sqlite3.OperationalError) and ("locked" in text or "busy" in text):
            return TemporaryError(
                f"the state store {self.path} is busy: another nodus kept it locked for over {self._busy_timeout_s:g}s",
                delay=5.0,
            )
        if isinstance(error, sqlite3.OperationalError) and "unable to open" in text:
            return ConfigError(f"cannot open the state store {self.path}: {text}", hint="check --state")
        if isinstance(error, sqlite3.DatabaseError) and ("not a database" in text or "readonly" in text):
            return ConfigError(f"the state store {self.path} is unusable: {text}", hint="check --state")
        if isinstance(error, sqlite3.OperationalError) and "disk" in text:
            return TemporaryError(f"the state store {self.path} cannot be written: {text}", delay=30.0)
        return None


class EmptyStore(SqliteStore):
    """A store with nothing in it, in memory: what a read (`nodus get`, `describe`, `wait`, `plan`) sees in a
    folder that has no state yet, so that reading creates no `.nodus/` there. Its threads share one in-memory
    database (a shared-cache URI), which lives until `close()`."""

    _count = 0

    def __init__(self, *, clock: Callable[[], float] = time.time) -> None:
        EmptyStore._count += 1
        self._uri = f"file:nodus-empty-{os.getpid()}-{EmptyStore._count}?mode=memory&cache=shared"
        SqlStore.__init__(self, "sqlite://:memory:", clock=clock)
        self.path = Path(":memory:")
        self._busy_timeout_s = BUSY_TIMEOUT_S
        self._anchor = sqlite3.connect(self._uri, uri=True, check_same_thread=False)  # keeps the database alive

    def _connect(self) -> sqlite3.Connection:
        return sqlite3.connect(self._uri, uri=True, isolation_level=None, check_same_thread=False)

    def close(self) -> None:
        super().close()
        self._anchor.close()
