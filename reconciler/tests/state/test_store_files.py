"""The state store's files: private modes (new and older projects) and damage said in one line, never an empty store.

Before: `.nodus/` was 0755 and `state.db` with its WAL 0644 (receipts, key hashes, stored answers readable by every
user); a 0-byte `state.db` was opened as a new, empty store (plan showed everything as new), and a truncated or
bit-flipped one ended in a sqlite3.DatabaseError traceback.
"""

from __future__ import annotations

import os
import sqlite3
import stat
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from nodus.errors import ConfigError
from nodus.reconciler.project import Project
from nodus.reconciler.state import migrations, open_store
from nodus.reconciler.state.records import ResourceKey, StateStore

from .conftest import DAMAGES, damage

VOLUME = ResourceKey("Volume", "default", "scratch")


def mode(path: Path) -> int:
    return stat.S_IMODE(path.stat().st_mode)


@pytest.fixture(autouse=True)
def usual_umask() -> Iterator[None]:
    """The umask most users have (022): files would be 0644 and folders 0755 unless nodus asks for less."""
    old = os.umask(0o022)
    yield
    os.umask(old)


@pytest.fixture
def project(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    root = tmp_path / "project"
    root.mkdir()
    (root / "nodus.lock").write_text("lockfileVersion: 1\n")
    for name in ("NODUS_STATE", "NODUS_HOME"):
        monkeypatch.delenv(name, raising=False)
    return root


def test_a_new_projects_state_folder_and_store_are_private(project: Path) -> None:
    store = Project.find(project).open_state()
    try:
        store.put(VOLUME, {"kind": "Volume"})  # a write: the WAL and shared-memory files exist now
        folder = project / ".nodus"
        assert mode(folder) == 0o700
        assert mode(folder / ".gitignore") == 0o600
        for name in ("state.db", "state.db-wal", "state.db-shm"):
            assert mode(folder / name) == 0o600, name
    finally:
        store.close()
    assert [p.name for p in (project / ".nodus").iterdir() if p.name.startswith(".state.db")] == []  # no temporary


def test_a_store_named_by_state_gets_a_private_new_folder_and_file(tmp_path: Path) -> None:
    path = tmp_path / "elsewhere" / "team.db"
    store = open_store(path, project_state_dir=tmp_path / "unused")
    try:
        store.set_value("k", "v")
        assert (mode(path.parent), mode(path), mode(Path(f"{path}-wal"))) == (0o700, 0o600, 0o600)
    finally:
        store.close()


def test_an_older_projects_modes_are_narrowed_when_a_read_opens_it(project: Path) -> None:
    store = Project.find(project).open_state()
    store.put(VOLUME, {"kind": "Volume"})
    store.close()
    folder = project / ".nodus"
    # What an older nodus left: everything readable by all, and a WAL beside the file (a writer still has it open).
    other = sqlite3.connect(folder / "state.db", isolation_level=None)
    other.execute("INSERT INTO kv (name, value) VALUES ('older', 'nodus')")
    old = [folder, folder / "state.db", folder / "state.db-wal", folder / "state.db-shm"]
    for path in old:
        path.chmod(0o755 if path.is_dir() else 0o644)
    try:
        reader = Project.find(project).open_state(create=False)  # what `nodus get` opens
        try:
            assert reader.get(VOLUME) is not None and reader.get_value("older") == "nodus"
        finally:
            reader.close()
        assert [mode(path) for path in old] == [0o700, 0o600, 0o600, 0o600]
    finally:
        other.close()


def test_a_missing_store_is_a_new_one_made_whole(tmp_path: Path) -> None:
    path = tmp_path / ".nodus" / "state.db"
    store = open_store(path, project_state_dir=tmp_path, migrate=False)
    try:
        # Never an empty file: SQLite's header (WAL mode) is in it before it has its name.
        assert path.read_bytes()[:16] == b"SQLite format 3\x00" and store.schema_version() == 0
    finally:
        store.close()
    assert sorted(p.name for p in path.parent.iterdir()) == ["state.db"]


RACER = """
import sys, time
from pathlib import Path
from nodus.reconciler.state import open_store
path, go = Path(sys.argv[1]), Path(sys.argv[2])
while not go.exists():
    time.sleep(0.001)
store = open_store(path, project_state_dir=path.parent)
print(store.schema_version())
store.close()
"""


def test_processes_making_a_new_store_at_once_all_open_it(tmp_path: Path) -> None:
    """None of them may find the file another one is making empty (and call it damaged)."""
    path, go = tmp_path / ".nodus" / "state.db", tmp_path / "go"
    racers = [
        subprocess.Popen([sys.executable, "-c", RACER, str(path), str(go)], stdout=subprocess.PIPE, text=True)
        for _ in range(4)
    ]
    time.sleep(1.0)  # each has imported nodus and waits
    go.touch()
    outputs = [racer.communicate(timeout=60)[0] for racer in racers]
    assert [racer.returncode for racer in racers] == [0] * 4
    assert outputs == [f"{migrations.LATEST_VERSION}\n"] * 4
    assert sorted(p.name for p in path.parent.iterdir()) == ["state.db"]


@pytest.fixture
def stored(tmp_path: Path) -> Path:
    """A SQLite store with one resource, closed."""
    path = tmp_path / ".nodus" / "state.db"
    store = open_store(path, project_state_dir=tmp_path)
    store.put(VOLUME, {"kind": "Volume", "metadata": {"name": "scratch"}})
    store.close()
    return path


@pytest.mark.parametrize("how", DAMAGES)
@pytest.mark.parametrize("migrate", [True, False])
def test_a_damaged_store_is_one_line_and_left_as_it_is(stored: Path, how: str, migrate: bool) -> None:
    left = damage(stored, how)
    with pytest.raises(ConfigError) as refused:
        open_store(stored, project_state_dir=stored.parent, migrate=migrate)
    message = refused.value.message
    assert message.startswith(f"the state store {stored} is damaged: ") and "\n" not in message
    assert "restore it from a backup" in message and "nodus state check" in message
    said = {"empty": "empty (0 bytes)", "not-sqlite": "not a SQLite database", "truncated": "SQLite"}
    assert said.get(how, "SQLite") in message
    assert stored.read_bytes() == left  # nothing written into it, nothing started over


def test_a_flipped_bit_inside_a_stored_document_is_one_line_when_read(stored: Path) -> None:
    damage(stored, "document")  # SQLite's checks pass: they look at pages, not at the text in them
    store = open_store(stored, project_state_dir=stored.parent)
    try:
        with pytest.raises(ConfigError, match="is damaged: a stored JSON document does not parse"):
            store.get(VOLUME)
    finally:
        store.close()


def test_a_store_lacking_a_table_of_its_version_is_damaged(
    open_at: Callable[..., StateStore], raw_sql: Callable[[str], None], store_url: str
) -> None:
    open_at().close()
    raw_sql("DROP TABLE sync_records")
    with pytest.raises(ConfigError) as refused:
        open_at()
    assert f"schema version {migrations.LATEST_VERSION} has tables it lacks (sync_records)" in refused.value.message
    assert "\n" not in refused.value.message
