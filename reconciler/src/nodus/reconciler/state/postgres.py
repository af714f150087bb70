"""The team state store: a PostgreSQL database named by `--state postgresql://USER@HOST/DB`.

Who uses it: `open_store()` for `postgresql://` and `postgres://` URLs (libpq's forms, so `?host=/socket/dir`,
`sslmode=...` and the PG* environment variables work as in psql). Same behaviour as the SQLite store:
- one connection per thread, in autocommit between transactions, `READ COMMITTED` inside them;
- every write transaction first locks the `serial` counter row (`SELECT ... FOR UPDATE`), the analogue of
  SQLite's `BEGIN IMMEDIATE`: writers from any number of hosts queue on it and can never deadlock;
  launches and leases are single `INSERT ... ON CONFLICT` statements besides, so each is race-free alone;
- migrations run under a transaction-scoped advisory lock, so two processes migrating a new database at once
  both succeed (the second finds the work done);
- JSON documents are JSONB (a team can query them); they come back with keys in canonical order, the same
  dicts the SQLite store returns.
psycopg is imported when a store is opened, so SQLite users never load it.
"""

from __future__ import annotations

import hashlib
import json
import time
from collections.abc import Callable, Sequence
from functools import lru_cache
from typing import TYPE_CHECKING, Any

from nodus.errors import ConfigError, NodusError, PrerequisiteError, TemporaryError
from nodus.reconciler.state.migrations import POSTGRES
from nodus.reconciler.state.records import JSONObject, canonical
from nodus.reconciler.state.sql import Cursor, SqlStore, redact_url

if TYPE_CHECKING:
    import psycopg

CONNECT_TIMEOUT_S = 10
BUSY_TIMEOUT_S = 30.0
"""How long a writer waits for another one (`lock_timeout`); as long as SQLite's busy timeout."""
# A fixed key for pg_advisory_xact_lock: unlikely to meet another application's lock in a shared database.
MIGRATION_LOCK = int.from_bytes(hashlib.sha256(b"nodus.state.migrate").digest()[:8], "big", signed=True)


def _sorted_loads(text: str | bytes) -> Any:
    """JSONB comes back in PostgreSQL's key order; sort it so both stores return identical documents."""
    return json.loads(text, object_pairs_hook=lambda pairs: dict(sorted(pairs)))


@lru_cache(maxsize=256)
def _placeholders(sql: str) -> str:
    return sql.replace("?", "%s")


def _psycopg() -> Any:
    try:
        import psycopg
    except ImportError as error:
        raise PrerequisiteError(
            "a PostgreSQL state store needs psycopg 3, which is not installed",
            hint="pip install 'psycopg[binary]>=3.2'",
        ) from error
    return psycopg


class PostgresStore(SqlStore):
    """`StateStore` in a PostgreSQL database; tables go to the first schema of the connection's search_path."""

    dialect = POSTGRES
    for_update = " FOR UPDATE"

    def __init__(
        self, url: str, *, busy_timeout_s: float = BUSY_TIMEOUT_S, clock: Callable[[], float] = time.time
    ) -> None:
        super().__init__(redact_url(url), clock=clock)
        self._conninfo = url
        self._busy_timeout_s = busy_timeout_s
        self._driver = _psycopg()

    def _connect(self) -> psycopg.Connection[Any]:
        driver = self._driver
        try:
            options = driver.conninfo.conninfo_to_dict(self._conninfo)
        except driver.ProgrammingError as error:
            reason = str(error).split(" in URI")[0].strip()
            raise ConfigError(f"--state {self.url}: not a valid PostgreSQL URL ({reason})") from error
        # Defaults a URL may override: give up on an unreachable host, and name nodus in pg_stat_activity.
        extra = {"connect_timeout": CONNECT_TIMEOUT_S, "application_name": "nodus"}
        try:
            connection: psycopg.Connection[Any] = driver.connect(
                self._conninfo, autocommit=True, **{k: v for k, v in extra.items() if k not in options}
            )
        except driver.OperationalError as error:
            raise self._connect_error(error) from error
        driver.types.json.set_json_loads(_sorted_loads, connection)
        # Like SQLite's busy timeout: a writer queued behind a stuck one gives up instead of waiting forever.
        connection.execute(f"SET lock_timeout = {int(self._busy_timeout_s * 1000)}")
        return connection

    def _connect_error(self, error: Exception) -> NodusError:
        text = " ".join(str(error).split())
        if "does not exist" in text or "authentication failed" in text or "no password supplied" in text:
            return ConfigError(f"cannot use the state store {self.url}: {text}", hint="check --state")
        return TemporaryError(
            f"cannot reach the state store {self.url}: {text}",
            delay=10.0,
            hint="check --state and that the server is up",
        )

    def _usable(self, connection: Any) -> bool:
        return not (connection.closed or connection.broken)

    def _execute(self, connection: Any, sql: str, params: Sequence[object]) -> Cursor:
        cursor: Cursor = connection.execute(_placeholders(sql), tuple(params))
        return cursor

    def _begin(self, connection: Any) -> None:
        # Explicit: a server whose default is SERIALIZABLE would fail writers queued on the serial row lock.
        connection.execute("BEGIN ISOLATION LEVEL READ COMMITTED")

    def _lock_writes(self) -> None:
        self._run("SELECT value FROM counters WHERE name = 'serial' FOR UPDATE")

    def _lock_migrations(self) -> None:
        self._run("SELECT pg_advisory_xact_lock(?)", (MIGRATION_LOCK,))

    def _has_table(self, name: str) -> bool:
        row = self._one("SELECT to_regclass(?) IS NOT NULL", (name,))
        return bool(row and row[0])

    def _table_names(self) -> set[str]:
        # The tables the search_path shows, as to_regclass finds them: where migrate() made them.
        rows = self._all("SELECT relname FROM pg_class WHERE relkind IN ('r', 'p') AND pg_table_is_visible(oid)")
        return {str(row[0]) for row in rows}

    def _dump_json(self, document: JSONObject) -> object:
        return self._driver.types.json.Jsonb(document, dumps=canonical)

    def _load_json(self, value: Any) -> JSONObject:
        document: JSONObject = value
        return document

    def _translate(self, error: Exception) -> NodusError | None:
        driver = self._driver
        text = " ".join(str(error).split())
        if isinstance(error, driver.errors.InsufficientPrivilege):
            return ConfigError(f"the state store {self.url} refused: {text}", hint="grant the user of --state rights")
        if isinstance(error, driver.errors.LockNotAvailable):
            return TemporaryError(
                f"the state store {self.url} is busy: another nodus kept it locked for over {self._busy_timeout_s:g}s",
                delay=5.0,
            )
        if isinstance(error, driver.OperationalError):
            # Lost connection, server shutdown, deadlock or serialization failure: all clear by trying again.
            return TemporaryError(f"the state store {self.url} failed: {text}", delay=5.0)
        return None
