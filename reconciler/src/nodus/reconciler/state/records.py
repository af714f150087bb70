"""What the state store keeps, and the interface every store implements (SQLite by default, PostgreSQL).

Who uses it: the planner reads `ResourceRecord`s as the observed state; `nodus apply` writes them and takes
the `Lease`; controllers update status, add `Event`s and record `Launch`es (the idempotency keys that make
a repeated or interrupted apply never start a second job); `nodus get/describe` read them. `nodus controller`
keeps its `SyncRecord`s here (what it last synced per resource), which `get` and `list` join onto records.

Identity: a resource is (kind, project, name); `project` is `metadata.project`, or `DEFAULT_PROJECT`.
`spec` is the normalised desired document (`model_dump(by_alias=True, mode="json", exclude_none=True)` of
the whole resource minus `status`: apiVersion, kind, metadata, spec), so server-filled defaults are the same
on both sides of a diff. `spec_hash` is the sha256 of its canonical JSON. `generation` counts spec changes
(1 at create); `status_version` counts status writes, for optimistic updates by controllers.
"""

from __future__ import annotations

import builtins
import hashlib
import json
from collections.abc import Iterator, Mapping, Sequence
from contextlib import AbstractContextManager
from dataclasses import dataclass, field
from typing import Any, Protocol

from nodus.errors import NodusError, TemporaryError

JSONObject = dict[str, Any]
DEFAULT_PROJECT = "default"


def canonical(document: object) -> str:
    """Canonical JSON text: sorted keys, no spaces (what hashes are taken of)."""
    return json.dumps(document, sort_keys=True, separators=(",", ":"), ensure_ascii=False)


def spec_hash(document: Mapping[str, Any]) -> str:
    return "sha256:" + hashlib.sha256(canonical(document).encode()).hexdigest()


@dataclass(frozen=True, order=True)
class ResourceKey:
    kind: str
    project: str
    name: str

    def __str__(self) -> str:
        if self.project == DEFAULT_PROJECT:
            return f"{self.kind}/{self.name}"
        return f"{self.kind}/{self.project}/{self.name}"


@dataclass(frozen=True)
class SyncRecord:
    """What `nodus controller` last synced for one resource: the git revision, the desired spec hash there, when,
    and how it went. `nodus get` compares `desired_hash` with the record's `spec_hash` (Synced or OutOfSync)."""

    key: ResourceKey
    revision: str
    """The commit sha the controller synced."""
    desired_hash: str
    """The resource's spec_hash in git at `revision`; empty when it is in the store but not in git there."""
    outcome: str
    """Applied, Failed, Pending (the apply is under way) or NotInGit (kept: the controller does not prune)."""
    message: str = ""
    at: float = 0.0


@dataclass(frozen=True)
class ResourceRecord:
    """One resource as the store holds it: the applied spec and what the controllers observed."""

    key: ResourceKey
    spec: JSONObject
    spec_hash: str
    generation: int = 1
    status: JSONObject = field(default_factory=dict)
    status_version: int = 0
    created_at: float = 0.0
    updated_at: float = 0.0
    deleting: bool = False
    """Set by `nodus delete`/prune while controllers tear it down; the row goes when they are done."""
    sync: SyncRecord | None = None
    """The controller's last sync of this resource (filled by `get` and `list`; None when none synced it)."""
    missing: bool = False
    """Not stored: a row `nodus get` shows for a resource the controller found in git but could not create."""


def missing_record(sync: SyncRecord) -> ResourceRecord:
    """The row of a resource in git at the controller's revision that the store does not hold (health Missing)."""
    return ResourceRecord(key=sync.key, spec={}, spec_hash="", generation=0, sync=sync, missing=True)


@dataclass(frozen=True)
class Lease:
    """The apply lock: one holder at a time per store (name `apply`), until released or expired."""

    id: str
    name: str
    holder: str
    """Who holds it: `user@host pid N`."""
    operation: str
    """What for: `apply examples/quickstart`."""
    acquired_at: float
    expires_at: float


class LeaseHeld(TemporaryError):  # noqa: N818 - named for what it says, like Conflict
    """Another holder has the lease; the message names it, its operation and since when."""

    def __init__(self, lease: Lease, now: float) -> None:
        age = max(0, int(now - lease.acquired_at))
        super().__init__(
            f"the state is locked by {lease.holder} ({lease.operation}) since {age}s ago, lease {lease.id}",
            delay=max(1.0, lease.expires_at - now),
            hint=f"wait for it, or if that process is gone: nodus unlock {lease.id}",
        )
        self.lease = lease


class Conflict(NodusError):  # noqa: N818 - a lost optimistic write, not a failure of nodus
    """An optimistic write lost: the record changed since it was read (generation or status_version)."""


@dataclass(frozen=True)
class Event:
    key: ResourceKey
    type: str
    """Normal or Warning."""
    reason: str
    message: str
    at: float = 0.0
    count: int = 1


@dataclass(frozen=True)
class Launch:
    """An idempotency record: `launch_key` is unique; recording it twice returns the first record."""

    launch_key: str
    """e.g. `TrainingJob/default/tj1/gen1/attempt1`: one launch per key, ever."""
    key: ResourceKey
    job: str
    """The Job (executor-side) name it started."""
    data: JSONObject = field(default_factory=dict)
    at: float = 0.0


class StateStore(Protocol):
    """The one interface of observed state. Every method is atomic; `transaction()` groups several."""

    url: str

    def migrate(self) -> int:
        """Bring the schema to the newest version (idempotent); returns the version."""
        ...

    def schema_version(self) -> int: ...

    def transaction(self) -> AbstractContextManager[None]:
        """Everything inside commits together or not at all (nested calls join the outer one)."""
        ...

    # Resources
    def get(self, key: ResourceKey) -> ResourceRecord | None: ...

    def list(self, kind: str | None = None, project: str | None = None) -> list[ResourceRecord]:
        """Sorted by key."""
        ...

    def put(self, key: ResourceKey, spec: JSONObject, *, expected_generation: int | None = None) -> ResourceRecord:
        """Create (generation 1) or replace the spec (generation + 1 when the hash changed, else unchanged).
        `expected_generation` (0 = must not exist) makes it conditional: Conflict when it does not match."""
        ...

    def set_status(
        self, key: ResourceKey, status: JSONObject, *, expected_version: int | None = None
    ) -> ResourceRecord:
        """Replace status (status_version + 1); Conflict when `expected_version` is given and differs."""
        ...

    def mark_deleting(self, key: ResourceKey) -> ResourceRecord | None: ...

    def delete(self, key: ResourceKey) -> bool:
        """Remove the record with its events and launches; False when there was none."""
        ...

    # Events
    def add_event(self, event: Event) -> None:
        """Same key, type, reason and message as the latest event: its count goes up instead."""
        ...

    def events(self, key: ResourceKey, limit: int = 50) -> builtins.list[Event]:
        """Oldest first."""
        ...

    # Launch idempotency
    def record_launch(self, launch: Launch) -> tuple[Launch, bool]:
        """Insert if `launch_key` is new: (the stored record, True); else (the existing one, False)."""
        ...

    def launches(self, key: ResourceKey) -> builtins.list[Launch]: ...

    # The apply lease
    def acquire_lease(self, name: str, holder: str, operation: str, ttl_s: float) -> Lease:
        """Take the lease or raise LeaseHeld; an expired lease is taken over."""
        ...

    def renew_lease(self, lease: Lease, ttl_s: float) -> Lease:
        """Extend it; Conflict when it was broken or taken over meanwhile."""
        ...

    def release_lease(self, lease: Lease) -> None: ...

    def current_lease(self, name: str) -> Lease | None: ...

    def break_lease(self, lease_id: str) -> Lease | None:
        """`nodus unlock ID`: remove that lease whoever holds it; returns it, or None when unknown."""
        ...

    # What `nodus controller` last synced
    def record_sync(self, records: Sequence[SyncRecord]) -> None:
        """Replace every sync record with `records` (one revision's resources), all at once."""
        ...

    def sync_records(self) -> builtins.list[SyncRecord]:
        """Sorted by key, including resources the store has no record of (in git, not applied: Missing)."""
        ...

    # Key/value for small bookkeeping (the observed-state serial a saved plan records, price tables...)
    def get_value(self, name: str) -> str | None: ...

    def set_value(self, name: str, value: str) -> None: ...

    def serial(self) -> int:
        """A counter bumped by every put, set_status, mark_deleting and delete: a saved plan records it and
        is stale when it moved."""
        ...

    def close(self) -> None: ...


def iter_keys(records: list[ResourceRecord]) -> Iterator[ResourceKey]:
    return (record.key for record in records)
