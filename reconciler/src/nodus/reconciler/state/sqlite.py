"""The default state store: one SQLite file in the project's state folder (`.nodus/state.db`).

Who uses it: `open_store()` when `--state` is absent, a file path or `sqlite:///PATH`; `nodus state check` opens
one read only. Two `nodus apply` processes, and threads within one, may use the same file at once:
- WAL journal, so readers never wait for the writer and the writer never waits for readers;
- every write transaction starts with `BEGIN IMMEDIATE`: it takes the file's write lock up front, waiting up to
  `busy_timeout_s` for another writer, instead of failing at its first write when a reader would have to
  upgrade (SQLITE_BUSY without waiting);
- one connection per thread (`SqlStore`), so transactions of different threads never mix.

The file holds receipts, key hashes and stored answers: it is 0600, and SQLite gives its WAL, shared-memory and
journal files the database file's mode. A new store is made whole (mode, header, WAL) under a temporary name and
linked into place, so `state.db` never exists empty: a missing file is a new store, while an empty, truncated or
corrupt one is damage (a full disk, a bad copy), reported in one line and never taken for an empty store.
"""

from __future__ import annotations

import errno
import json
import os
import shutil
import sqlite3
import tempfile
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any
from urllib.parse import quote

from nodus.builder.private import make_folder, tighten
from nodus.errors import ConfigError, NodusError, TemporaryError
from nodus.reconciler.state.migrations import SQLITE
from nodus.reconciler.state.records import JSONObject, canonical
from nodus.reconciler.state.sql import Cursor, DamagedStoreError, SqlStore

BUSY_TIMEOUT_S = 30.0
"""How long a writer waits for another one (an apply's transactions are short: milliseconds)."""
MAGIC = b"SQLite format 3\x00"
"""The first 16 bytes of every SQLite database file."""
SIDE_FILES = ("-wal", "-shm", "-journal")
# What SQLite says when the file's pages do not hold together: truncated, overwritten, bit-flipped.
_DAMAGE = ("malformed", "not a database", "corrupt")


def file_problem(path: Path) -> str | None:
    """What is wrong with the file of an existing store, from its first bytes (without SQLite), or None: empty
    (nodus never leaves one so: a full disk or a bad copy did), or not SQLite at all."""
    with path.open("rb") as handle:
        head = handle.read(len(MAGIC))
    if not head:
        return "it is empty (0 bytes), as a full disk or a bad copy leaves one"
    if head != MAGIC:
        return f"it is not a SQLite database (it begins {head[:12]!r})"
    return None


class SqliteStore(SqlStore):
    """`StateStore` in one SQLite file: made (with its folder, 0700) when missing, checked when it exists.

    `read_only=True` (`nodus state check`): an existing file only, opened so that nothing is written to it."""

    dialect = SQLITE

    def __init__(
        self,
        path: Path,
        *,
        busy_timeout_s: float = BUSY_TIMEOUT_S,
        clock: Callable[[], float] = time.time,
        read_only: bool = False,
    ) -> None:
        self.path = Path(path).expanduser().absolute()
        super().__init__(f"sqlite://{self.path}", clock=clock)
        self._busy_timeout_s = busy_timeout_s
        self._read_only = read_only
        if read_only:
            self._check_file()
            return
        try:
            make_folder(self.path.parent)
        except OSError as error:
            raise ConfigError(
                f"cannot create the folder of the state store {self.path}: {error.strerror}", hint="check --state"
            ) from error
        if not (self.path.exists() or self.path.is_symlink()):
            self._create()
        self._check_file()
        # A store an older nodus made (0644): receipts and key hashes are for their owner only.
        real = self.path.resolve()
        for suffix in ("", *SIDE_FILES):
            tighten(real.with_name(real.name + suffix))

    def _check_file(self) -> None:
        try:
            problem = file_problem(self.path)
        except FileNotFoundError:
            raise ConfigError(f"there is no state store at {self.path}", hint="check --state") from None
        except IsADirectoryError:
            raise ConfigError(f"the state store {self.path} is a folder, not a file", hint="check --state") from None
        except OSError as error:
            raise ConfigError(f"cannot read the state store {self.path}: {error.strerror}") from error
        if problem is not None:
            raise DamagedStoreError(str(self.path), problem)

    def _create(self) -> None:
        """A new store, whole: a 0600 file that already has SQLite's header and the WAL journal mode, made under a
        temporary name and linked to `path` (a link never replaces a file), so no process ever sees `path` empty.
        When two processes make it at the same moment, the second finds the first one's and uses it."""
        try:
            descriptor, name = tempfile.mkstemp(prefix=f".{self.path.name}.", suffix=".new", dir=self.path.parent)
        except OSError as error:
            raise ConfigError(
                f"cannot create the state store {self.path}: {error.strerror}", hint="check --state"
            ) from error
        os.close(descriptor)  # mkstemp made it 0600; SQLite writes into it
        temporary = Path(name)
        try:
            connection = sqlite3.connect(temporary, isolation_level=None)
            try:
                self._enable_wal(connection)
            finally:
                connection.close()
            try:
                os.link(temporary, self.path)
            except FileExistsError:
                pass
            except OSError as error:
                if error.errno not in (errno.EPERM, errno.EOPNOTSUPP):  # a file system without hard links
                    raise
                self._create_without_links(temporary)
        except (OSError, sqlite3.Error) as error:
            cause = error.strerror if isinstance(error, OSError) else str(error)
            raise ConfigError(f"cannot create the state store {self.path}: {cause}", hint="check --state") from error
        finally:
            for suffix in ("", *SIDE_FILES):
                Path(f"{temporary}{suffix}").unlink(missing_ok=True)

    def _create_without_links(self, temporary: Path) -> None:
        """On a file system without hard links: `path` made exclusively and filled at once (empty for an instant)."""
        try:
            descriptor = os.open(self.path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC, 0o600)
        except FileExistsError:
            return
        with os.fdopen(descriptor, "wb") as out, temporary.open("rb") as source:
            shutil.copyfileobj(source, out)

    def _connect(self) -> sqlite3.Connection:
        # isolation_level=None: the driver starts no transactions of its own; `transaction()` says BEGIN.
        # check_same_thread=False only so close() may close every thread's connection; each thread uses its own.
        if self._read_only:
            # mode=ro: no write reaches the file, and it is never created.
            target: str | Path = f"file:{quote(str(self.path))}?mode=ro"
        else:
            target = self.path
        connection = sqlite3.connect(
            target,
            timeout=self._busy_timeout_s,
            isolation_level=None,
            check_same_thread=False,
            uri=self._read_only,
        )
        try:
            connection.execute(f"PRAGMA busy_timeout = {int(self._busy_timeout_s * 1000)}")
            if not self._read_only:
                self._enable_wal(connection)
        except BaseException:
            connection.close()
            raise
        return connection

    def integrity_problems(self, *, thorough: bool = False) -> list[str]:
        """SQLite's own check of every page (`quick_check`; `integrity_check` when `thorough`, which also
        compares each index with its table): what it found, or nothing."""
        pragma = "integrity_check" if thorough else "quick_check"
        rows = self._all(f"PRAGMA {pragma}")
        found = [str(row[0]) for row in rows]
        return [] if found == ["ok"] else found

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

    def _table_names(self) -> set[str]:
        return {str(row[0]) for row in self._all("SELECT name FROM sqlite_master WHERE type = 'table'")}

    def _name(self) -> str:
        return str(self.path)

    def _dump_json(self, document: JSONObject) -> object:
        return canonical(document)

    def _load_json(self, value: Any) -> JSONObject:
        try:
            document: JSONObject = json.loads(value)
        except ValueError as error:  # SQLite checks pages, not the text in them: a flipped bit lands here
            raise DamagedStoreError(str(self.path), f"a stored JSON document does not parse ({error})") from error
        return document

    def _translate(self, error: Exception) -> NodusError | None:
        text = str(error)
        if isinstance(error, sqlite3.DatabaseError) and any(word in text for word in _DAMAGE):
            return DamagedStoreError(str(self.path), f"SQLite: {text}")
        if isinstance(error, sqlite3.OperationalError) and ("locked" in text or "busy" in text):
            return TemporaryError(
                f"the state store {self.path} is busy: another nodus kept it locked for over {self._busy_timeout_s:g}s",
                delay=5.0,
            )
        if isinstance(error, sqlite3.OperationalError) and "unable to open" in text:
            return ConfigError(f"cannot open the state store {self.path}: {text}", hint="check --state")
        if isinstance(error, sqlite3.DatabaseError) and "readonly" in text:
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
