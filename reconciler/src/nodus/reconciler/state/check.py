"""`nodus state check`: whether a state store is whole, found without changing it.

Who calls it: `nodus state check` (`nodus.cli.state`). The checks, in order, each one `Check`:
- SQLite: `file` (there, a file, not empty, SQLite's header), `mode` (0600, and its WAL, shared-memory and
  journal files too), `integrity` (`PRAGMA integrity_check`: every page, every index against its table),
  `schema` (a version this nodus knows), `tables` (those the version has), `documents` (every stored JSON
  document parses: SQLite checks pages, not the text in them);
- PostgreSQL: `connection`, then `schema` and `tables` (the server keeps its own pages; JSONB is parsed on write).
A check that cannot run after one failed is `skipped` (a file that is not SQLite has no schema). The file is
opened read only: nothing is created, migrated or narrowed (a wide mode is reported with its fix).
"""

from __future__ import annotations

import stat
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

from nodus.errors import NodusError
from nodus.reconciler.state import locate, migrations
from nodus.reconciler.state.postgres import PostgresStore
from nodus.reconciler.state.sql import SqlStore, redact_url
from nodus.reconciler.state.sqlite import SIDE_FILES, SqliteStore, file_problem

Outcome = Literal["ok", "failed", "skipped"]
_SHOWN = 5
"""Problems of one check shown one line each; more are counted."""


@dataclass(frozen=True)
class Check:
    name: str
    outcome: Outcome
    detail: str
    """What was found: the one line of an `ok`, the summary of a `failed`, why a check was `skipped`."""
    problems: tuple[str, ...] = ()
    """Each problem a failed check found (the detail when it found one thing)."""


@dataclass
class Report:
    store: str
    """The file, or the URL without its password."""
    checks: list[Check] = field(default_factory=list)

    @property
    def healthy(self) -> bool:
        return all(check.outcome == "ok" for check in self.checks)

    def problem_lines(self) -> list[str]:
        """One line per problem, naming the store and the check."""
        lines = []
        for check in self.checks:
            if check.outcome == "failed":
                found = check.problems or (check.detail,)
                lines += [f"{self.store}: {check.name}: {problem}" for problem in found[:_SHOWN]]
                if len(found) > _SHOWN:
                    lines.append(f"{self.store}: {check.name}: and {len(found) - _SHOWN} more problems")
        return lines

    def to_json(self) -> dict[str, Any]:
        return {
            "store": self.store,
            "healthy": self.healthy,
            "checks": [
                {"name": c.name, "outcome": c.outcome, "detail": c.detail, "problems": list(c.problems)}
                for c in self.checks
            ],
        }

    def add(self, name: str, outcome: Outcome, detail: str, problems: tuple[str, ...] = ()) -> bool:
        self.checks.append(Check(name, outcome, detail, problems))
        return outcome == "ok"

    def skip(self, names: tuple[str, ...], why: str) -> None:
        for name in names:
            self.add(name, "skipped", why)


def check_store(url_or_path: str | Path | None, *, project_state_dir: Path) -> Report:
    """Every check of the store `--state` names (None: SQLite in `project_state_dir`)."""
    where = locate(url_or_path, project_state_dir)
    if isinstance(where, Path):
        return _check_sqlite(where.expanduser().absolute())
    return _check_postgres(where)


def _check_sqlite(path: Path) -> Report:
    report = Report(str(path))
    later = ("integrity", "schema", "tables", "documents")
    if not report.add("file", *_file(path)):
        report.skip(("mode", *later), "the file check failed")
        return report
    report.add("mode", *_modes(path))
    try:
        store = SqliteStore(path, read_only=True)
    except NodusError as error:
        report.add("integrity", "failed", _what(error))
        report.skip(later[1:], "the file cannot be opened")
        return report
    try:
        try:
            problems = store.integrity_problems(thorough=True)
        except NodusError as error:
            problems = [_what(error)]
        if problems:
            report.add("integrity", "failed", f"PRAGMA integrity_check found {_count(problems)}", tuple(problems))
            report.skip(later[1:], "SQLite finds the file damaged")
            return report
        pages = store.fetch_one("PRAGMA page_count")
        report.add("integrity", "ok", f"PRAGMA integrity_check: ok ({pages[0] if pages else '?'} pages)")
        _schema_and_tables(report, store)
    finally:
        store.close()
    return report


def _check_postgres(url: str) -> Report:
    store: SqlStore | None = None
    try:
        store = PostgresStore(url)
        report = Report(store.url)
        row = store.fetch_one("SHOW server_version")
    except NodusError as error:
        report = Report(store.url if store is not None else redact_url(url))
        report.add("connection", "failed", error.message)
        report.skip(("schema", "tables"), "no connection")
        if store is not None:
            store.close()
        return report
    try:
        report.add("connection", "ok", f"PostgreSQL {row[0] if row else '?'}")
        _schema_and_tables(report, store, documents=False)
    finally:
        store.close()
    return report


def _schema_and_tables(report: Report, store: SqlStore, *, documents: bool = True) -> None:
    """`schema`, `tables` and (SQLite) `documents`: each a failed line, never an exception, on a damaged store."""
    try:
        version = store.schema_version()
    except NodusError as error:
        report.add("schema", "failed", _what(error))
        report.skip(("tables", "documents") if documents else ("tables",), "no schema version")
        return
    if version == 0:
        report.add("schema", "failed", "no schema version recorded: not a store nodus wrote")
    elif version > migrations.LATEST_VERSION:
        latest = migrations.LATEST_VERSION
        report.add(
            "schema",
            "failed",
            f"version {version}, from a newer nodus (this one knows up to {latest}): upgrade nodus to read it",
        )
    elif version < migrations.LATEST_VERSION:
        report.add("schema", "ok", f"version {version} (this nodus migrates it to {migrations.LATEST_VERSION} on open)")
    else:
        report.add("schema", "ok", f"version {version}, the newest this nodus knows")
    if version == 0 or version > migrations.LATEST_VERSION:
        report.skip(("tables", "documents") if documents else ("tables",), "no schema this nodus knows")
        return
    try:
        missing = store.missing_tables(version)
    except NodusError as error:
        missing = [_what(error)]
    expected = len(migrations.tables(version))
    if missing:
        report.add("tables", "failed", f"missing {', '.join(missing)}", tuple(f"table {m} is missing" for m in missing))
    else:
        report.add("tables", "ok", f"all {expected} tables of schema version {version}")
    if not documents:
        return
    try:
        unreadable = store.unreadable_documents()
    except NodusError as error:
        unreadable = [_what(error)]
    if unreadable:
        report.add("documents", "failed", f"{_count(unreadable)} in stored documents", tuple(unreadable))
    else:
        report.add("documents", "ok", "every stored JSON document parses")


def _file(path: Path) -> tuple[Outcome, str]:
    try:
        info = path.stat()
        problem = None if not stat.S_ISREG(info.st_mode) else file_problem(path)
    except FileNotFoundError:
        return "failed", "there is no state store here (nothing was applied yet, or it was removed)"
    except OSError as error:
        return "failed", f"cannot read it: {error.strerror}"
    if not stat.S_ISREG(info.st_mode):
        return "failed", "it is not a file"
    if problem is not None:
        return "failed", problem
    return "ok", f"{info.st_size} bytes, SQLite format 3"


def _modes(path: Path) -> tuple[Outcome, str]:
    real = path.resolve()
    modes = {}
    for suffix in ("", *SIDE_FILES):
        try:
            modes[real.name + suffix] = stat.S_IMODE(real.with_name(real.name + suffix).stat().st_mode)
        except FileNotFoundError:
            continue
    wide = [f"{name} is {mode:04o}" for name, mode in modes.items() if mode & 0o077]
    if wide:
        return "failed", f"others may read it ({', '.join(wide)}): chmod 600 them (any nodus command on it does)"
    return "ok", ", ".join(f"{name} {mode:04o}" for name, mode in modes.items())


def _what(error: NodusError) -> str:
    return str(getattr(error, "what", error.message))


def _count(problems: list[str]) -> str:
    return f"{len(problems)} problem{'s' if len(problems) != 1 else ''}"
