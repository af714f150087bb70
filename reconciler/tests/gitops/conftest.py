"""Fixtures for the controller's tests: a git repository in a temporary folder, committed to like a person does.

`git_repo` is a fresh repository on branch main (no commit yet); `home` is the project the controller runs in
(its state folder holds the checkout and the SQLite store), far from the repository.
"""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from nodus.builder.store import Store
from nodus.reconciler.project import Project


class GitRepo:
    """A repository a test writes files into and commits, returning the commit's sha."""

    def __init__(self, folder: Path) -> None:
        self.folder = folder
        folder.mkdir(parents=True)
        self.git("init", "-q", "-b", "main")
        self.git("config", "user.email", "test@example.com")
        self.git("config", "user.name", "test")
        self.git("config", "commit.gpgsign", "false")

    def git(self, *args: str) -> str:
        done = subprocess.run(["git", *args], cwd=self.folder, capture_output=True, text=True, check=True)
        return done.stdout.strip()

    def commit(self, message: str, files: dict[str, str | None]) -> str:
        """Write (or, for None, remove) `files` and commit them all; the new commit's sha."""
        for name, text in files.items():
            path = self.folder / name
            if text is None:
                path.unlink()
                continue
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(text)
        self.git("add", "-A")
        self.git("commit", "-q", "--allow-empty", "-m", message)
        return self.git("rev-parse", "HEAD")


@pytest.fixture
def git_repo(tmp_path: Path) -> GitRepo:
    return GitRepo(tmp_path / "repo")


@pytest.fixture
def home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Project:
    monkeypatch.delenv("NODUS_HOME", raising=False)
    monkeypatch.delenv("NODUS_STATE", raising=False)
    folder = tmp_path / "service"
    folder.mkdir()
    return Project(folder, folder / "nodus.lock", Store(folder / ".nodus"), None)
