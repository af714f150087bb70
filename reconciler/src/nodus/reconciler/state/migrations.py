"""The schema of the state store as numbered migration steps, written once for SQLite and PostgreSQL.

Who uses it: `nodus.reconciler.state.sql.SqlStore.migrate()` (both stores) applies the steps newer than the
version recorded in `schema_migrations`, one transaction per run. A step is only ever appended, never edited:
a store created by an older nodus is brought forward by the steps it lacks.

The dialects differ in two column types only: JSON documents (TEXT holding canonical JSON on SQLite, JSONB on
PostgreSQL so a team can query them) and the auto-numbered event id. The rest is SQL both accept.
"""

from __future__ import annotations

import re
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
    Migration(
        3,
        "the inference ledger: API keys, requests (receipts and holds), spend, idempotency keys, gateway processes",
        (
            # Written by nodus.reconciler.inference.ledger only, every write under the store's writer lock.
            # Amounts are integer nano-dollars (exact sums on both backends; SQLite has no exact decimal type).
            """CREATE TABLE inference_keys (
                project TEXT NOT NULL,
                name TEXT NOT NULL,
                scopes TEXT NOT NULL,
                secret_sha256 TEXT NOT NULL UNIQUE,
                secret_hint TEXT NOT NULL,
                created_at DOUBLE PRECISION NOT NULL,
                revoked_at DOUBLE PRECISION,
                PRIMARY KEY (project, name)
            )""",
            # One row per admitted request: its hold while Running, its receipt afterwards (kept 30 days), and
            # the entry the endpoint's rpm and tpm windows count.
            """CREATE TABLE inference_requests (
                id TEXT PRIMARY KEY,
                project TEXT NOT NULL,
                endpoint TEXT NOT NULL,
                key_name TEXT NOT NULL,
                operation TEXT NOT NULL,
                model TEXT NOT NULL,
                state TEXT NOT NULL,
                gateway TEXT NOT NULL,
                admitted_at DOUBLE PRECISION NOT NULL,
                finished_at DOUBLE PRECISION,
                day TEXT NOT NULL,
                held_input_tokens BIGINT NOT NULL,
                held_output_tokens BIGINT NOT NULL,
                hold_nanos BIGINT NOT NULL,
                window_tokens BIGINT NOT NULL,
                input_tokens BIGINT NOT NULL DEFAULT 0,
                cached_input_tokens BIGINT NOT NULL DEFAULT 0,
                output_tokens BIGINT NOT NULL DEFAULT 0,
                amount_nanos BIGINT NOT NULL DEFAULT 0,
                input_usd_per_million TEXT NOT NULL,
                output_usd_per_million TEXT NOT NULL,
                pricebook_version TEXT NOT NULL,
                idempotency_key TEXT,
                outcome TEXT NOT NULL DEFAULT '',
                answer_status INTEGER,
                answer_type TEXT,
                answer_body TEXT
            )""",
            "CREATE INDEX inference_requests_window ON inference_requests (project, endpoint, admitted_at)",
            "CREATE INDEX inference_requests_state ON inference_requests (state, gateway)",
            # Per endpoint: what it ever spent (maxCostUSD counts it all), what running requests hold, how many
            # run, and its labels as last seen (a Budget's selector matches them, after a delete too).
            """CREATE TABLE inference_endpoint_spend (
                project TEXT NOT NULL,
                endpoint TEXT NOT NULL,
                labels TEXT NOT NULL,
                settled_nanos BIGINT NOT NULL,
                held_nanos BIGINT NOT NULL,
                running BIGINT NOT NULL,
                PRIMARY KEY (project, endpoint)
            )""",
            # Settled spend per endpoint and UTC day (YYYY-MM-DD): Daily, Monthly and Total Budgets sum it.
            """CREATE TABLE inference_daily_spend (
                project TEXT NOT NULL,
                endpoint TEXT NOT NULL,
                day TEXT NOT NULL,
                settled_nanos BIGINT NOT NULL,
                PRIMARY KEY (project, endpoint, day)
            )""",
            """CREATE TABLE inference_idempotency (
                project TEXT NOT NULL,
                key_name TEXT NOT NULL,
                idempotency_key TEXT NOT NULL,
                body_sha256 TEXT NOT NULL,
                request_id TEXT NOT NULL,
                created_at DOUBLE PRECISION NOT NULL,
                PRIMARY KEY (project, key_name, idempotency_key)
            )""",
            # Gateway processes, so the requests of one that died are found (its pid on its host, its heartbeat).
            """CREATE TABLE inference_gateways (
                id TEXT PRIMARY KEY,
                host TEXT NOT NULL,
                pid BIGINT NOT NULL,
                process_start TEXT NOT NULL,
                listen TEXT NOT NULL,
                started_at DOUBLE PRECISION NOT NULL,
                heartbeat_at DOUBLE PRECISION NOT NULL,
                stopped_at DOUBLE PRECISION
            )""",
        ),
    ),
)

LATEST_VERSION = MIGRATIONS[-1].version
_CREATE_TABLE = re.compile(r"\s*CREATE TABLE (?:IF NOT EXISTS )?(\w+)")


def pending(current: int) -> list[Migration]:
    """The steps a store at version `current` still needs, oldest first."""
    return [migration for migration in MIGRATIONS if migration.version > current]


def tables(version: int) -> list[str]:
    """The tables a store at schema `version` has (read from the steps, so a new step needs no list of its own)."""
    names = ["schema_migrations"]
    for migration in MIGRATIONS:
        if migration.version <= version:
            names += [made.group(1) for made in map(_CREATE_TABLE.match, migration.statements) if made is not None]
    return names
