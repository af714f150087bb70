"""The controller's sync records in the state store (migration 2), on SQLite and PostgreSQL alike.

`record_sync` replaces the whole set at once; `get` and `list` join each record's sync record onto it; a sync
record may name a resource the store has no record of (in git, not applied); a store of schema version 1 is
brought forward with its data intact; and a whole controller pass works on either backend.
"""

from __future__ import annotations

import re
import subprocess
from collections.abc import Callable
from pathlib import Path

from nodus.builder.store import Store
from nodus.reconciler.gitops.source import GitSource
from nodus.reconciler.gitops.sync import Target, sync_pass
from nodus.reconciler.gitops.sync_status import sync_state
from nodus.reconciler.project import Project
from nodus.reconciler.state import migrations
from nodus.reconciler.state.records import ResourceKey, StateStore, SyncRecord, spec_hash

JOB = ResourceKey("Job", "default", "hello")
SECRET = ResourceKey("Secret", "team-b", "creds")
GONE = ResourceKey("Job", "default", "not-applied")


def doc(key: ResourceKey, **spec: object) -> dict[str, object]:
    return {"apiVersion": "nodus.dev/v1", "kind": key.kind, "metadata": {"name": key.name}, "spec": spec}


def test_get_and_list_carry_the_sync_record_of_their_key(store: StateStore) -> None:
    job = store.put(JOB, doc(JOB, command=["true"]))
    store.put(SECRET, doc(SECRET, keys=["A"]))
    assert store.get(JOB) is not None and store.get(JOB).sync is None  # type: ignore[union-attr]
    store.record_sync(
        [
            SyncRecord(JOB, "a" * 40, job.spec_hash, "Applied"),
            SyncRecord(GONE, "a" * 40, "sha256:x", "Failed", "refused", at=5.0),
        ]
    )
    found = store.get(JOB)
    assert found is not None and found.sync is not None
    assert (found.sync.revision, found.sync.desired_hash, found.sync.outcome) == ("a" * 40, job.spec_hash, "Applied")
    assert found.sync.at > 0
    listed = {record.key: record for record in store.list()}
    assert listed[JOB].sync == found.sync and listed[SECRET].sync is None
    assert [record.key for record in store.list("Job")] == [JOB]  # the record missing from the store is not listed
    assert [record.key for record in store.list(project="team-b")] == [SECRET]
    assert [(s.key, s.outcome, s.message, s.at) for s in store.sync_records()] == [
        (JOB, "Applied", "", found.sync.at),
        (GONE, "Failed", "refused", 5.0),
    ]


def test_record_sync_replaces_the_whole_set_and_does_not_move_the_serial(store: StateStore) -> None:
    store.put(JOB, doc(JOB, command=["true"]))
    serial = store.serial()
    store.record_sync([SyncRecord(JOB, "1" * 40, "h1", "Pending"), SyncRecord(SECRET, "1" * 40, "h2", "Pending")])
    store.record_sync([SyncRecord(JOB, "2" * 40, "h3", "Applied")])
    assert [(s.key, s.revision, s.desired_hash) for s in store.sync_records()] == [(JOB, "2" * 40, "h3")]
    assert store.serial() == serial  # a saved plan does not go stale because the controller took notes
    store.record_sync([])
    assert store.sync_records() == []


def test_a_failed_transaction_keeps_the_previous_sync_records(store: StateStore) -> None:
    store.record_sync([SyncRecord(JOB, "1" * 40, "h1", "Applied")])
    try:
        with store.transaction():
            store.record_sync([SyncRecord(JOB, "2" * 40, "h2", "Pending")])
            raise RuntimeError("killed mid-way")
    except RuntimeError:
        pass
    assert [s.revision for s in store.sync_records()] == ["1" * 40]


def test_writes_keep_working_with_sync_records(store: StateStore) -> None:
    """put, set_status and delete read records without the join (for update); nothing of theirs changes."""
    first = store.put(JOB, doc(JOB, command=["true"]))
    store.record_sync([SyncRecord(JOB, "1" * 40, first.spec_hash, "Applied")])
    second = store.put(JOB, doc(JOB, command=["false"]))
    assert second.generation == 2
    store.set_status(JOB, {"phase": "Running"})
    found = store.get(JOB)
    assert found is not None and found.sync is not None and found.spec_hash != found.sync.desired_hash
    assert store.delete(JOB)
    assert store.get(JOB) is None and [s.key for s in store.sync_records()] == [JOB]


def test_a_version_1_store_is_migrated_with_its_records(
    open_at: Callable[..., StateStore], raw_sql: Callable[[str], None]
) -> None:
    store = open_at(migrate=False)
    store.migrate()
    store.put(JOB, doc(JOB, command=["true"]))
    # Make it a store an older nodus wrote: schema version 1, none of the tables later steps made.
    later = [migration for migration in migrations.MIGRATIONS if migration.version > 1]
    for migration in reversed(later):
        for statement in reversed(migration.statements):
            made = re.match(r"\s*CREATE TABLE (?:IF NOT EXISTS )?(\w+)", statement)
            if made is not None:
                raw_sql(f"DROP TABLE {made.group(1)}")
    raw_sql("DELETE FROM schema_migrations WHERE version > 1")
    again = open_at(migrate=False)
    assert again.schema_version() == 1
    assert again.migrate() == migrations.LATEST_VERSION >= 2
    record = again.get(JOB)
    assert record is not None and record.spec_hash == spec_hash(doc(JOB, command=["true"])) and record.sync is None
    again.record_sync([SyncRecord(JOB, "1" * 40, record.spec_hash, "Applied")])
    assert again.get(JOB).sync is not None  # type: ignore[union-attr]


def test_a_controller_pass_on_each_backend(store_url: str, tmp_path: Path) -> None:
    """`nodus controller --state URL`: a pass applies, records and reads back its sync records on either store."""
    repo = tmp_path / "repo"
    repo.mkdir()
    (repo / "secret.yaml").write_text(
        "apiVersion: nodus.dev/v1\nkind: Secret\nmetadata: {name: creds}\nspec: {keys: [A]}\n"
    )
    for args in (
        ["init", "-q", "-b", "main"],
        ["add", "-A"],
        ["-c", "user.email=t@e", "-c", "user.name=t", "commit", "-qm", "one"],
    ):
        subprocess.run(["git", *args], cwd=repo, check=True, capture_output=True)
    home = Project(
        tmp_path / "service", tmp_path / "service" / "nodus.lock", Store(tmp_path / "service" / ".nodus"), store_url
    )
    store = home.open_state()
    try:
        target = Target(GitSource(str(repo), "main", home.files.root / "controller"))
        assert sync_pass(target, home, store).outcome == "Synced"
        assert sync_pass(target, home, store).outcome == "InSync"
        record = store.get(ResourceKey("Secret", "default", "creds"))
        assert record is not None and record.sync is not None and sync_state(record) == "Synced"
    finally:
        store.close()
