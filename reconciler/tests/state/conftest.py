"""Fixtures for the state store tests: one suite, run against SQLite and against a throwaway PostgreSQL.

`store_url` is parametrized over both backends; the postgres case is marked `postgres` and needs the
PostgreSQL server binaries (Debian: `apt-get install postgresql`, which `.ci/run` does), skipping otherwise.
`postgres_cluster` starts one private cluster per pytest(-xdist) worker: initdb into a fresh temp folder, a
server listening on a Unix socket in that folder only (no TCP at all), fsync off; each test gets a database of
its own, and the server is stopped by pg_ctl at the end of the session. As root the cluster runs as the
`postgres` system user (initdb refuses root). `run_processes` races real processes on one store. `damage` does
to a SQLite store what a full disk, a bad copy or a flipped bit does.
"""

from __future__ import annotations

import os
import pwd
import shutil
import sqlite3
import subprocess
import sys
import tempfile
import textwrap
import time
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import quote

import pytest

from nodus.reconciler.state import open_store
from nodus.reconciler.state.records import StateStore

INSTALL_HINT = "PostgreSQL server binaries not found (initdb, pg_ctl): apt-get install postgresql"


class FakeClock:
    """A clock the test moves: lease expiry without sleeping."""

    def __init__(self, now: float = 1_000_000.0) -> None:
        self.now = now

    def __call__(self) -> float:
        return self.now

    def advance(self, seconds: float) -> None:
        self.now += seconds


def _postgres_bin() -> Path | None:
    """Debian's versioned folder (newest first), else initdb on PATH; None when there is no server."""
    candidates = sorted(Path("/usr/lib/postgresql").glob("*/bin"), key=lambda p: p.parent.name, reverse=True)
    on_path = shutil.which("initdb")
    if on_path:
        candidates.append(Path(on_path).resolve().parent)
    for folder in candidates:
        if all((folder / tool).is_file() for tool in ("initdb", "pg_ctl", "postgres")):
            return folder
    return None


@dataclass
class PostgresCluster:
    root: Path
    bin: Path
    as_user: list[str]
    """Command prefix that runs a tool as the cluster's owner (runuser as root, nothing otherwise)."""
    admin: Any = None
    databases: list[str] = field(default_factory=list)

    @property
    def data(self) -> Path:
        return self.root / "data"

    @property
    def socket_dir(self) -> Path:
        return self.root / "sock"

    def url(self, database: str) -> str:
        return f"postgresql://postgres@/{database}?host={quote(str(self.socket_dir), safe='')}"

    def tool(self, name: str, *args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [*self.as_user, str(self.bin / name), *args],
            cwd=self.root,
            capture_output=True,
            text=True,
            timeout=60,
            check=False,
        )

    def create_database(self) -> str:
        import psycopg

        if self.admin is None:
            self.admin = psycopg.connect(self.url("postgres"), autocommit=True)
        name = f"test_{uuid.uuid4().hex[:16]}"
        self.admin.execute(f"CREATE DATABASE {name}")
        self.databases.append(name)
        return self.url(name)


def _start_cluster() -> PostgresCluster:
    folder = _postgres_bin()
    if folder is None:
        pytest.skip(INSTALL_HINT)
    as_user: list[str] = []
    ids: tuple[int, int] | None = None
    root = Path(tempfile.mkdtemp(prefix="nodus-pg-"))  # in /tmp: pytest's own temp folder is root-only (0700)
    if os.geteuid() == 0:
        try:
            owner = pwd.getpwnam("postgres")
        except KeyError:
            shutil.rmtree(root)
            pytest.skip("as root the test cluster runs as the postgres system user: apt-get install postgresql")
        as_user = ["runuser", "-u", "postgres", "--"]
        ids = (owner.pw_uid, owner.pw_gid)
        os.chown(root, *ids)
    cluster = PostgresCluster(root, folder, as_user)
    initdb = cluster.tool(
        "initdb", "-D", str(cluster.data), "-U", "postgres", "--auth=trust", "-N", "-E", "UTF8", "--no-locale"
    )
    if initdb.returncode != 0:
        shutil.rmtree(root, ignore_errors=True)
        pytest.fail(f"initdb failed: {initdb.stderr.strip()}")
    cluster.socket_dir.mkdir()
    if ids is not None:
        os.chown(cluster.socket_dir, *ids)
    # Unix socket in our folder only: listen_addresses='' opens no TCP port; fsync off: a throwaway cluster.
    options = f"-k {cluster.socket_dir} -c listen_addresses='' -c fsync=off -c synchronous_commit=off"
    options += " -c full_page_writes=off -c max_connections=200"
    start = cluster.tool(
        "pg_ctl", "-D", str(cluster.data), "-w", "-t", "60", "-s", "-l", str(root / "log"), "-o", options, "start"
    )
    if start.returncode != 0:
        log = (root / "log").read_text(errors="replace")[-2000:] if (root / "log").exists() else ""
        shutil.rmtree(root, ignore_errors=True)
        pytest.fail(f"pg_ctl start failed: {start.stderr.strip()}\n{log}")
    return cluster


@pytest.fixture(scope="session")
def postgres_cluster() -> Iterator[PostgresCluster]:
    cluster = _start_cluster()
    try:
        yield cluster
    finally:
        if cluster.admin is not None:
            cluster.admin.close()
        cluster.tool("pg_ctl", "-D", str(cluster.data), "-m", "immediate", "-s", "stop")
        shutil.rmtree(cluster.root, ignore_errors=True)


@pytest.fixture(params=["sqlite", pytest.param("postgres", marks=pytest.mark.postgres)])
def store_url(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    """A URL of a fresh, empty (not yet migrated) store on each backend."""
    if request.param == "sqlite":
        return f"sqlite://{tmp_path / 'project' / '.nodus' / 'state.db'}"
    cluster: PostgresCluster = request.getfixturevalue("postgres_cluster")
    return cluster.create_database()


@pytest.fixture
def backend(store_url: str) -> str:
    return store_url.split(":", 1)[0]


@pytest.fixture
def clock() -> FakeClock:
    return FakeClock()


@pytest.fixture
def open_at(store_url: str, tmp_path: Path) -> Iterator[Callable[..., StateStore]]:
    """`open_at(clock=..., migrate=...)`: another store object on the test's URL, closed afterwards."""
    opened: list[StateStore] = []

    def open_(clock: Callable[[], float] = time.time, migrate: bool = True) -> StateStore:
        store = open_store(store_url, project_state_dir=tmp_path / "unused", migrate=migrate, clock=clock)
        opened.append(store)
        return store

    yield open_
    for store in opened:
        store.close()


@pytest.fixture
def store(open_at: Callable[..., StateStore], clock: FakeClock) -> StateStore:
    """A migrated store on the fake clock."""
    return open_at(clock=clock)


_PRELUDE = """
import json, sys, time
from pathlib import Path
from nodus.reconciler.state import open_store
from nodus.reconciler.state.records import Launch, LeaseHeld, ResourceKey
url, sync, me = sys.argv[1], Path(sys.argv[2]), sys.argv[3]
store = open_store(url, project_state_dir=sync / "unused", migrate=False)
(sync / f"ready-{me}").touch()
while not (sync / "go").exists():
    time.sleep(0.001)
"""


@pytest.fixture
def run_processes(store_url: str, tmp_path: Path) -> Callable[[str, int], list[str]]:
    """`run_processes(body, n)`: n Python processes run `body` on the store at the same moment (a start line
    they all wait behind, after each has imported nodus and opened the store); returns their stdouts."""

    def run(body: str, count: int) -> list[str]:
        sync = tmp_path / f"sync-{uuid.uuid4().hex[:8]}"
        sync.mkdir()
        script = _PRELUDE + textwrap.dedent(body)
        children = [
            subprocess.Popen(
                [sys.executable, "-c", script, store_url, str(sync), str(index)],
                stdout=subprocess.PIPE,
                stderr=subprocess.PIPE,
                text=True,
            )
            for index in range(count)
        ]
        try:
            deadline = time.monotonic() + 60
            while len(list(sync.glob("ready-*"))) < count and time.monotonic() < deadline:
                if any(child.poll() not in (None, 0) for child in children):
                    break
                time.sleep(0.005)
            (sync / "go").touch()
            results = [child.communicate(timeout=60) for child in children]
        finally:
            for child in children:
                if child.poll() is None:
                    child.kill()
                    child.wait()
        for child, (_, err) in zip(children, results, strict=True):
            assert child.returncode == 0, err
        return [out for out, _ in results]

    return run


@pytest.fixture
def raw_sql(store_url: str) -> Callable[[str], None]:
    """Run one statement on the store's database behind its back (to fake what another nodus wrote)."""

    def run(statement: str) -> None:
        if store_url.startswith("sqlite://"):
            import sqlite3

            connection = sqlite3.connect(store_url[len("sqlite://") :], isolation_level=None)
            try:
                connection.execute(statement)
            finally:
                connection.close()
            return
        import psycopg

        with psycopg.connect(store_url, autocommit=True) as connection:
            connection.execute(statement)  # type: ignore[arg-type]

    return run


DAMAGES = ("empty", "truncated", "bit-flipped", "not-sqlite")


def damage(path: Path, how: str) -> bytes:
    """Damage the SQLite store at `path` (closed) as `how` in DAMAGES says; the bytes it now holds.

    Its WAL is checkpointed into it first and removed, so the file alone is the store (a copy of state.db).
    `bit-flipped` flips one bit of the page-type byte of the resources table's root page, which SQLite notices;
    `document` one bit of the first resource's stored spec (`{` -> `z`), which only parsing it notices."""
    connection = sqlite3.connect(path, isolation_level=None)
    try:
        connection.execute("PRAGMA wal_checkpoint(TRUNCATE)")
        root = connection.execute("SELECT rootpage FROM sqlite_master WHERE name = 'resources'").fetchone()[0]
        page_size = connection.execute("PRAGMA page_size").fetchone()[0]
        spec = connection.execute("SELECT spec FROM resources ORDER BY kind, project, name LIMIT 1").fetchone()
    finally:
        connection.close()
    for suffix in ("-wal", "-shm"):  # empty after the checkpoint
        Path(f"{path}{suffix}").unlink(missing_ok=True)
    data = bytearray(path.read_bytes())
    if how == "empty":
        data = bytearray()
    elif how == "truncated":
        data = data[: len(data) // 2]
    elif how == "bit-flipped":
        data[(root - 1) * page_size + (100 if root == 1 else 0)] ^= 0x01
    elif how == "document":
        at = bytes(data).index(spec[0].encode())
        data[at] ^= 0x01
    elif how == "not-sqlite":
        data = bytearray(b"apiVersion: nodus.dev/v1\nkind: Volume\n" * 100)
    else:
        raise ValueError(how)
    path.write_bytes(bytes(data))
    return bytes(data)
