"""API keys of the inference gateway: made with a secret shown once, stored as the secret's sha256, revoked by name.

Who uses it: the CLI (`nodus keys create NAME --scope inference:invoke`, `nodus keys revoke`, `nodus keys list`,
through `nodus.reconciler.inference.api`), the gateway (`find_key` turns a bearer secret into the key's project,
name and scopes) and the ledger (which checks the key again inside the transaction that admits a request, so a
key revoked a moment ago admits nothing more).

A key belongs to one project and has a name unique there (a DNS label, as `allowedKeys` names it). The secret is
`nds_` and 43 URL-safe characters (256 random bits); the store keeps only its sha256 and the last 4 characters
(`secretHint`, so a person can tell keys apart). A revoked key's name can be given to a new key.
"""

from __future__ import annotations

import hashlib
import secrets
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from nodus.errors import ConfigError
from nodus.reconciler.state.records import DEFAULT_PROJECT
from nodus.reconciler.state.sql import Row, SqlStore
from nodus.specs.types import DNS_LABEL_RE

SCOPE_INVOKE = "inference:invoke"
"""The scope a key needs to call models and endpoints (the seeds' scope name)."""
KNOWN_SCOPES = (SCOPE_INVOKE,)
SECRET_PREFIX = "nds_"
_COLUMNS = "project, name, scopes, secret_hint, created_at, revoked_at"


@dataclass(frozen=True)
class ApiKey:
    project: str
    name: str
    scopes: tuple[str, ...]
    secret_hint: str
    """The secret's last 4 characters."""
    created_at: float
    revoked_at: float | None = None

    @property
    def revoked(self) -> bool:
        return self.revoked_at is not None

    def to_json(self) -> dict[str, object]:
        return {
            "project": self.project,
            "name": self.name,
            "scopes": list(self.scopes),
            "secretHint": f"...{self.secret_hint}",
            "createdAt": self.created_at,
            "revokedAt": self.revoked_at,
        }


@dataclass(frozen=True)
class NewKey:
    """A key just made and its secret: the only time the secret exists outside the caller's hands."""

    key: ApiKey
    secret: str


def secret_digest(secret: str) -> str:
    return hashlib.sha256(secret.encode()).hexdigest()


def _key(row: Row) -> ApiKey:
    revoked = row[5]
    return ApiKey(
        row[0], row[1], tuple(str(row[2]).split()), row[3], float(row[4]), None if revoked is None else float(revoked)
    )


def _check_name(project: str, name: str) -> None:
    if not DNS_LABEL_RE.match(name) or len(name) > 63:
        raise ConfigError(f"key {name!r}: a key name is a DNS label (a-z, 0-9 and -, at most 63 characters)")
    if not DNS_LABEL_RE.match(project):
        raise ConfigError(f"key {name}: project {project!r} is not a project name")


def _check_scopes(name: str, scopes: Sequence[str]) -> tuple[str, ...]:
    chosen = tuple(dict.fromkeys(scopes))
    if not chosen:
        raise ConfigError(f"key {name}: give at least one scope (--scope {SCOPE_INVOKE})")
    unknown = [scope for scope in chosen if scope not in KNOWN_SCOPES]
    if unknown:
        raise ConfigError(f"key {name}: --scope {unknown[0]}: unknown scope (known: {', '.join(KNOWN_SCOPES)})")
    return chosen


def create_key(
    store: SqlStore,
    name: str,
    *,
    project: str = DEFAULT_PROJECT,
    scopes: Sequence[str] = (SCOPE_INVOKE,),
    clock: Callable[[], float] = time.time,
) -> NewKey:
    """Make a key; ConfigError when the project already has a live key of that name (revoke it first)."""
    _check_name(project, name)
    chosen = _check_scopes(name, scopes)
    secret = SECRET_PREFIX + secrets.token_urlsafe(32)
    key = ApiKey(project, name, chosen, secret[-4:], clock())
    with store.write_transaction():
        row = store.fetch_one("SELECT revoked_at FROM inference_keys WHERE project = ? AND name = ?", (project, name))
        if row is not None and row[0] is None:
            raise ConfigError(
                f"key {name}: project {project} already has a key of that name",
                hint=f"revoke it first (nodus keys revoke {name}) or choose another name",
            )
        store.execute("DELETE FROM inference_keys WHERE project = ? AND name = ?", (project, name))
        store.execute(
            "INSERT INTO inference_keys (project, name, scopes, secret_sha256, secret_hint, created_at, revoked_at) "
            "VALUES (?, ?, ?, ?, ?, ?, NULL)",
            (project, name, " ".join(chosen), secret_digest(secret), key.secret_hint, key.created_at),
        )
    return NewKey(key, secret)


def revoke_key(
    store: SqlStore, name: str, *, project: str = DEFAULT_PROJECT, clock: Callable[[], float] = time.time
) -> ApiKey:
    """Revoke a key at once (the next request with it gets 401); revoking a revoked key changes nothing.
    ConfigError when the project has no key of that name."""
    with store.write_transaction():
        store.execute(
            "UPDATE inference_keys SET revoked_at = ? WHERE project = ? AND name = ? AND revoked_at IS NULL",
            (clock(), project, name),
        )
        row = store.fetch_one(f"SELECT {_COLUMNS} FROM inference_keys WHERE project = ? AND name = ?", (project, name))
    if row is None:
        raise ConfigError(f"key {name}: project {project} has no key of that name", hint="nodus keys list")
    return _key(row)


def list_keys(store: SqlStore, *, project: str | None = None) -> list[ApiKey]:
    """Keys sorted by project and name, revoked ones included."""
    if project is None:
        rows = store.fetch_all(f"SELECT {_COLUMNS} FROM inference_keys")
    else:
        rows = store.fetch_all(f"SELECT {_COLUMNS} FROM inference_keys WHERE project = ?", (project,))
    return sorted((_key(row) for row in rows), key=lambda key: (key.project, key.name))


def find_key(store: SqlStore, secret: str) -> ApiKey | None:
    """The key whose secret this is (revoked ones too: the caller says why it refuses), or None."""
    row = store.fetch_one(f"SELECT {_COLUMNS} FROM inference_keys WHERE secret_sha256 = ?", (secret_digest(secret),))
    return _key(row) if row else None
