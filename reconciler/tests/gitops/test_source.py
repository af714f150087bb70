"""The controller's git checkout: cloned once, then fetched and reset to the branch head; exactly the commit."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from nodus.errors import ConfigError, TemporaryError
from nodus.reconciler.gitops.source import GitSource, is_url


def test_clone_then_follow_the_branch_head(git_repo: Any, tmp_path: Path) -> None:
    first = git_repo.commit("first", {"a.yaml": "one"})
    source = GitSource(str(git_repo.folder), "main", tmp_path / "checkouts")
    revision = source.update()
    assert (revision.sha, revision.subject, revision.short) == (first, "first", first[:7])
    assert (revision.folder / "a.yaml").read_text() == "one"
    second = git_repo.commit("second", {"a.yaml": "two", "b.yaml": "new"})
    revision = source.update()
    assert revision.sha == second and (revision.folder / "b.yaml").read_text() == "new"
    assert source.update().sha == second  # nothing new: the same commit


def test_the_checkout_is_exactly_the_commit(git_repo: Any, tmp_path: Path) -> None:
    git_repo.commit("first", {"a.yaml": "one", "b.yaml": "two"})
    source = GitSource(str(git_repo.folder), "main", tmp_path / "checkouts")
    folder = source.update().folder
    (folder / "a.yaml").write_text("edited by hand")
    (folder / "stray.yaml").write_text("left behind")
    git_repo.commit("drop b", {"b.yaml": None})
    source.update()
    assert (folder / "a.yaml").read_text() == "one"
    assert not (folder / "stray.yaml").exists() and not (folder / "b.yaml").exists()


def test_a_force_pushed_branch_is_followed(git_repo: Any, tmp_path: Path) -> None:
    git_repo.commit("first", {"a.yaml": "one"})
    git_repo.commit("second", {"a.yaml": "two"})
    source = GitSource(str(git_repo.folder), "main", tmp_path / "checkouts")
    source.update()
    git_repo.git("reset", "-q", "--hard", "HEAD~1")
    rewritten = git_repo.commit("rewritten", {"a.yaml": "three"})
    assert source.update().sha == rewritten


def test_file_urls_and_other_branches(git_repo: Any, tmp_path: Path) -> None:
    git_repo.commit("first", {"a.yaml": "one"})
    git_repo.git("checkout", "-q", "-b", "staging")
    staged = git_repo.commit("on staging", {"a.yaml": "staged"})
    source = GitSource(f"file://{git_repo.folder}", "staging", tmp_path / "checkouts")
    assert is_url(source.repo) and source.update().sha == staged
    assert GitSource(str(git_repo.folder), "main", tmp_path / "checkouts").folder != source.folder


def test_a_leftover_of_a_killed_clone_is_replaced(git_repo: Any, tmp_path: Path) -> None:
    git_repo.commit("first", {"a.yaml": "one"})
    source = GitSource(str(git_repo.folder), "main", tmp_path / "checkouts")
    source.folder.mkdir(parents=True)
    (source.folder / "half").write_text("no .git here")
    assert (source.update().folder / "a.yaml").exists() and not (source.folder / "half").exists()


def test_a_missing_repository_or_branch_is_a_one_line_config_error(git_repo: Any, tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match=r"--repo .*nowhere: no such folder"):
        GitSource(str(tmp_path / "nowhere"), "main", tmp_path / "checkouts")
    git_repo.commit("first", {"a.yaml": "one"})
    with pytest.raises(ConfigError, match="there is no branch release"):
        GitSource(str(git_repo.folder), "release", tmp_path / "checkouts").update()
    with pytest.raises(ConfigError, match="is not a branch name"):
        GitSource(str(git_repo.folder), "--upload-pack=x", tmp_path / "checkouts")
    with pytest.raises(ConfigError, match="git clone of file:///nowhere/at/all"):
        GitSource("file:///nowhere/at/all", "main", tmp_path / "checkouts").update()


def test_a_failed_fetch_is_temporary(git_repo: Any, tmp_path: Path) -> None:
    git_repo.commit("first", {"a.yaml": "one"})
    source = GitSource(str(git_repo.folder), "main", tmp_path / "checkouts")
    source.update()
    git_repo.folder.rename(tmp_path / "moved")
    with pytest.raises(TemporaryError, match="git fetch of"):
        source.update()


def test_a_password_in_the_url_is_never_shown() -> None:
    source = GitSource("https://bot:s3cret@git.example.invalid/team/specs.git", "main", Path("/unused"))
    assert "s3cret" not in source.shown and "s3cret" not in str(source.folder)
    assert source.folder.name.startswith("specs-")
