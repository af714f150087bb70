"""The state store: observed state of a project (records, status, events, launches, the apply lease).

Who calls it: the CLI opens one per command with `open_store(--state, project_state_dir=...)` and hands it to
the planner (reads), `nodus apply` (the lease, puts, deletes) and the controllers (status, events, launches);
`nodus get/describe/unlock` read it or break a lease. What a store holds and promises is `records.py`.

`--state` takes:
- nothing: SQLite in the project's state folder, `<project>/.nodus/state.db` (one file, WAL, next to the
  resource files; keep `.nodus/` out of git);
- a file path, or `sqlite:///ABSOLUTE/PATH`: SQLite there;
- `postgresql://USER[:PASSWORD]@HOST[:PORT]/DB` (or `postgres://`; libpq options as query parameters, e.g.
  `?host=/run/postgresql` for a Unix socket): a database shared by a team; PASSWORD is better left to
  `~/.pgpass` or `PGPASSWORD`, and it is never printed.
Both backends behave the same: the one test suite runs against both (reconciler/tests/state). A store is
checked when opened (a damaged SQLite file is one line naming it, never an empty store) and migrated to the newest
schema, which is safe from several processes at once. `nodus state check` verifies one thoroughly (`check.py`).
"""

from __future__ import annotations

import re
import time
from collections.abc import Callable
from pathlib import Path

from nodus.errors import ConfigError
from nodus.reconciler.state.postgres import PostgresStore
from nodus.reconciler.state.records import StateStore
from nodus.reconciler.state.sql import SqlStore, redact_url
from nodus.reconciler.state.sqlite import SqliteStore

STATE_FILE = "state.db"
_SCHEME = re.compile(r"^([A-Za-z][A-Za-z0-9+.-]*):")
_FORMS = "a file path, sqlite:///PATH or postgresql://USER@HOST/DB"


def open_store(
    url_or_path: str | Path | None,
    *,
    project_state_dir: Path,
    migrate: bool = True,
    clock: Callable[[], float] = time.time,
) -> StateStore:
    """The store `--state` names (None: SQLite in `project_state_dir`), migrated unless `migrate=False`.

    `clock` is for tests that move time (lease expiry); ConfigError for a value that names no store, and for a
    damaged one (empty, truncated, corrupt, not SQLite, lacking tables), which is never read as an empty store."""
    where = locate(url_or_path, project_state_dir)
    store: SqlStore = SqliteStore(where, clock=clock) if isinstance(where, Path) else PostgresStore(where, clock=clock)
    try:
        store.verify()
        if migrate:
            store.migrate()
    except BaseException:
        store.close()
        raise
    return store


def locate(url_or_path: str | Path | None, project_state_dir: Path) -> Path | str:
    """Where `--state` points: a SQLite file (a Path) or a PostgreSQL URL (a str); ConfigError for anything else."""
    if url_or_path is None:
        return project_state_dir / STATE_FILE
    if isinstance(url_or_path, Path):
        return url_or_path
    text = url_or_path.strip()
    scheme = _SCHEME.match(text)
    if not text:
        raise ConfigError(f"--state is empty: give {_FORMS}")
    if scheme is None:
        return Path(text)
    name = scheme.group(1).lower()
    if name in ("postgresql", "postgres"):
        return text
    if name == "sqlite":
        return _sqlite_path(text)
    raise ConfigError(f"--state {redact_url(text)}: unknown kind of state store {name!r}; give {_FORMS}")


def _sqlite_path(url: str) -> Path:
    """`sqlite:///abs/path` -> /abs/path (the URL's path; no host, nothing relative, not in memory)."""
    rest = url[len("sqlite:") :]
    if not rest.startswith("///") or rest.strip("/") == "":
        raise ConfigError(f"--state {url}: a SQLite URL names an absolute file, sqlite:///PATH/state.db")
    path = rest[2:].split("?", 1)[0]
    if path.strip("/") == ":memory:":
        raise ConfigError(f"--state {url}: an in-memory store would forget everything when nodus exits; name a file")
    return Path(path)


__all__ = ["STATE_FILE", "locate", "open_store"]
