"""The project's state folder: a new one is ignored by git as a whole; an existing one is left as it is."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest

from nodus.builder.store import Store


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
