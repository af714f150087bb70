"""The schema of the state store as numbered migration steps, written once for SQLite and PostgreSQL.

Who uses it: `nodus.reconciler.state.sql.SqlStore.migrate()` (both stores) applies the steps newer than the
version recorded in `schema_migrations`, one transaction per run. A step is only ever appended, never edited:
a store created by an older nodus is brought forward by the steps it lacks.

The dialects differ in two column types only: JSON documents (TEXT holding canonical JSON on SQLite, JSONB on
PostgreSQL so a team can query them) and the auto-numbered event id. The rest is SQL both accept.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Dialect:
    name: str
    json: str
    """Column type of a JSON document."""
    serial_id: str
    """Column definition of an auto-numbered primary key."""


SQLITE = Dialect(name="sqlite", json="TEXT", serial_id="INTEGER PRIMARY KEY")
POSTGRES = Dialect(name="postgresql", json="JSONB", serial_id="BIGINT GENERATED ALWAYS AS IDENTITY PRIMARY KEY")


@dataclass(frozen=True)
class Migration:
    version: int
    description: str
    statements: tuple[str, ...]
    """SQL with `{json}` and `{serial_id}` standing for the dialect's column types."""

    def sql(self, dialect: Dialect) -> list[str]:
        return [statement.format(json=dialect.json, serial_id=dialect.serial_id) for statement in self.statements]


# The bookkeeping table itself is created outside the numbered steps (it records them).
SCHEMA_MIGRATIONS_DDL = (
    "CREATE TABLE IF NOT EXISTS schema_migrations ("
    "version INTEGER PRIMARY KEY, description TEXT NOT NULL, applied_at DOUBLE PRECISION NOT NULL)"
)

MIGRATIONS: tuple[Migration, ...] = (
    Migration(
        1,
        "resources, events, launches, leases, values and the serial",
        (
            """CREATE TABLE resources (
                kind TEXT NOT NULL,
                project TEXT NOT NULL,
                name TEXT NOT NULL,
                spec {json} NOT NULL,
                spec_hash TEXT NOT NULL,
                generation BIGINT NOT NULL,
                status {json} NOT NULL,
                status_version BIGINT NOT NULL,
                created_at DOUBLE PRECISION NOT NULL,
                updated_at DOUBLE PRECISION NOT NULL,
                deleting BOOLEAN NOT NULL DEFAULT FALSE,
                PRIMARY KEY (kind, project, name)
            )""",
            """CREATE TABLE events (
                id {serial_id},
                kind TEXT NOT NULL,
                project TEXT NOT NULL,
                name TEXT NOT NULL,
                type TEXT NOT NULL,
                reason TEXT NOT NULL,
                message TEXT NOT NULL,
                happened_at DOUBLE PRECISION NOT NULL,
                count BIGINT NOT NULL
            )""",
            "CREATE INDEX events_by_key ON events (kind, project, name, id)",
            """CREATE TABLE launches (
                launch_key TEXT PRIMARY KEY,
                kind TEXT NOT NULL,
                project TEXT NOT NULL,
                name TEXT NOT NULL,
                job TEXT NOT NULL,
                data {json} NOT NULL,
                launched_at DOUBLE PRECISION NOT NULL
            )""",
            "CREATE INDEX launches_by_key ON launches (kind, project, name)",
            """CREATE TABLE leases (
                name TEXT PRIMARY KEY,
                id TEXT NOT NULL UNIQUE,
                holder TEXT NOT NULL,
                operation TEXT NOT NULL,
                acquired_at DOUBLE PRECISION NOT NULL,
                expires_at DOUBLE PRECISION NOT NULL
            )""",
            "CREATE TABLE kv (name TEXT PRIMARY KEY, value TEXT NOT NULL)",
            # One row per counter; the `serial` row doubles as the writers' lock on PostgreSQL.
            "CREATE TABLE counters (name TEXT PRIMARY KEY, value BIGINT NOT NULL)",
            "INSERT INTO counters (name, value) VALUES ('serial', 0)",
        ),
    ),
    Migration(
        2,
        "sync records of nodus controller",
        (
            # Not keyed to `resources`: a resource in git that is not (yet) in the store has a sync record too.
            """CREATE TABLE sync_records (
                kind TEXT NOT NULL,
                project TEXT NOT NULL,
                name TEXT NOT NULL,
                revision TEXT NOT NULL,
                desired_hash TEXT NOT NULL,
                outcome TEXT NOT NULL,
                message TEXT NOT NULL,
                synced_at DOUBLE PRECISION NOT NULL,
                PRIMARY KEY (kind, project, name)
            )""",
        ),
    ),
)

LATEST_VERSION = MIGRATIONS[-1].version


def pending(current: int) -> list[Migration]:
    """The steps a store at version `current` still needs, oldest first."""
    return [migration for migration in MIGRATIONS if migration.version > current]
