"""The project's state folder: a new one is ignored by git as a whole and private (0700, files 0600, image blobs
too: they hold Environment packages with answers); an existing one keeps its files, its mode narrowed."""

from __future__ import annotations

import os
import shutil
import stat
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

from nodus.builder.layers import Entry
from nodus.builder.oci import add_layer, write_blob
from nodus.builder.store import Store


@pytest.fixture(autouse=True)
def usual_umask() -> Iterator[None]:
    """The umask most users have (022): files would be 0644 and folders 0755 unless nodus asks for less."""
    old = os.umask(0o022)
    yield
    os.umask(old)


def test_a_new_state_folder_ignores_itself(tmp_path: Path) -> None:
    store = Store(tmp_path / ".nodus")
    store.ensure()
    lines = (store.root / ".gitignore").read_text().splitlines()
    assert "*" in lines and all(line == "*" or line.startswith("#") for line in lines)


def test_an_existing_state_folder_is_left_as_it_is(tmp_path: Path) -> None:
    (tmp_path / ".nodus").mkdir()
    (tmp_path / ".nodus" / "state.db").write_bytes(b"")
    Store(tmp_path / ".nodus").ensure()
    assert not (tmp_path / ".nodus" / ".gitignore").exists()  # not created by nodus this time: not ours to add


def test_a_new_state_folder_and_what_the_build_writes_in_it_are_private(tmp_path: Path) -> None:
    store = Store(tmp_path / ".nodus")
    store.ensure()
    store.put_manifest(b'{"taskId": "1"}\n')
    store.record_build("sha256:" + "0" * 64, {"image": "x"})
    write_blob(store.images, b"answers", "application/octet-stream")
    add_layer(store.images, {"opt/environment/answers.json": Entry.file(b"{}", mode=0o600)}, epoch=0)
    wide = []
    for path in [store.root, *store.root.rglob("*")]:
        bits = stat.S_IMODE(path.stat().st_mode)
        if bits & 0o077 or bits & 0o700 != (0o700 if path.is_dir() else 0o600):
            wide.append(f"{path.relative_to(tmp_path)} {bits:04o}")
    assert wide == []


def test_an_older_state_folder_open_to_others_is_narrowed(tmp_path: Path) -> None:
    (tmp_path / ".nodus").mkdir(mode=0o755)
    Store(tmp_path / ".nodus").ensure_root()
    assert stat.S_IMODE((tmp_path / ".nodus").stat().st_mode) == 0o700


@pytest.mark.skipif(shutil.which("git") is None, reason="needs git")
def test_git_then_sees_nothing_of_it(tmp_path: Path) -> None:
    subprocess.run(["git", "init", "-q", str(tmp_path)], check=True)
    store = Store(tmp_path / ".nodus")
    store.ensure()
    (store.cache / "builds" / "x.json").write_text("{}")
    status = subprocess.run(
        ["git", "-C", str(tmp_path), "status", "--porcelain", "--untracked-files=all"],
        check=True,
        capture_output=True,
        text=True,
    )
    assert status.stdout == ""
