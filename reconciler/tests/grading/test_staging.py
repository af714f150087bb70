"""Staging environment files for the grader uid: who owns them, who can read them, when they are reused."""

from __future__ import annotations

import os
import stat
import subprocess
from pathlib import Path

import pytest

from nodus.errors import ConfigError
from nodus.reconciler.grading.models import EnvironmentRef
from nodus.reconciler.grading.staging import Stager, tree_digest


def _package(root: Path, answer: str = "42") -> Path:
    (root / "pkg" / "__pycache__").mkdir(parents=True)
    (root / "pkg" / "answers.py").write_text(f"ANSWER = {answer}\n")
    (root / "pkg" / "__pycache__" / "answers.cpython-311.pyc").write_bytes(b"cache")
    (root / "run.sh").write_text("#!/bin/sh\n")
    (root / "run.sh").chmod(0o755)
    return root


def test_the_digest_covers_content_and_ignores_caches(tmp_path: Path) -> None:
    folder = _package(tmp_path / "a")
    first = tree_digest((folder,))
    (folder / "pkg" / "__pycache__" / "other.pyc").write_bytes(b"more cache")
    assert tree_digest((folder,)) == first
    (folder / "pkg" / "answers.py").write_text("ANSWER = 43\n")
    assert tree_digest((folder,)) != first and first.startswith("sha256:")


def test_a_stage_is_a_private_copy_for_the_owner(tmp_path: Path) -> None:
    folder = _package(tmp_path / "src")
    owner = 10001 if os.geteuid() == 0 else None
    stager = Stager(tmp_path / "stage", owner)
    staged = stager.stage(EnvironmentRef("demo", "1.0.0", paths=(folder,)))
    copy = staged.dirs[0]
    assert (copy / "pkg" / "answers.py").read_text() == "ANSWER = 42\n"
    assert not (copy / "pkg" / "__pycache__").exists()
    assert stat.S_IMODE((tmp_path / "stage").stat().st_mode) == 0o700
    expected_uid = owner if owner is not None else os.getuid()
    for path in [copy.parent, copy, copy / "pkg", copy / "pkg" / "answers.py", copy / "run.sh"]:
        info = path.stat()
        assert info.st_uid == expected_uid
        assert stat.S_IMODE(info.st_mode) & 0o077 == 0, f"{path} is readable by others"
    assert stat.S_IMODE((copy / "run.sh").stat().st_mode) == 0o700
    assert stat.S_IMODE((copy / "pkg" / "answers.py").stat().st_mode) == 0o600


def test_a_stage_is_reused_for_the_same_content_and_redone_for_new_content(tmp_path: Path) -> None:
    folder = _package(tmp_path / "src")
    env = EnvironmentRef("demo", "1.0.0", paths=(folder,))
    first = Stager(tmp_path / "stage", None).stage(env)
    marker = first.dirs[0] / "pkg" / "answers.py"
    inode = marker.stat().st_ino
    again = Stager(tmp_path / "stage", None).stage(env)  # a new service on the same host
    assert again == first and marker.stat().st_ino == inode
    (folder / "pkg" / "answers.py").write_text("ANSWER = 7\n")
    changed = Stager(tmp_path / "stage", None).stage(env)
    assert changed.digest != first.digest and changed.dirs[0] != first.dirs[0]


def test_staging_refuses_a_path_that_is_not_a_folder(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="is not a folder"):
        Stager(tmp_path / "stage", None).stage(EnvironmentRef("demo", "1.0.0", paths=(tmp_path / "missing",)))


@pytest.mark.usefixtures("needs_root_namespaces")
def test_only_the_grader_uid_can_read_the_staged_answers(tmp_path: Path) -> None:
    folder = _package(tmp_path / "src")
    staged = Stager(tmp_path / "stage", 10001).stage(EnvironmentRef("demo", "1.0.0", paths=(folder,)))
    # A sandbox reaches its stage through a bind mount, not through the 0700 folders above it: hand the
    # reader an open descriptor of the staged folder, so only the permissions below it are checked.
    handle = os.open(staged.dirs[0], os.O_RDONLY | os.O_DIRECTORY)
    reader = f"import os; print(open(os.open('pkg/answers.py', os.O_RDONLY, dir_fd={handle})).read(), end='')"

    def read_as(uid: int) -> subprocess.CompletedProcess[str]:
        def become() -> None:
            os.setgroups([])
            os.setresgid(uid, uid, uid)
            os.setresuid(uid, uid, uid)

        argv = ["/usr/bin/python3", "-I", "-c", reader]
        return subprocess.run(argv, capture_output=True, text=True, check=False, preexec_fn=become, pass_fds=(handle,))

    try:
        result = read_as(10001)
        assert result.stdout == "ANSWER = 42\n", result.stderr
        denied = read_as(20000)  # a runner uid
        assert denied.returncode != 0 and "Permission denied" in denied.stderr
    finally:
        os.close(handle)


def test_a_project_folder_stages_only_the_files_nodus_build_packages(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The quickstart's package is its project folder (`path: .`): the stage must not take the state folder (its
    database, job folders and live sockets made process-mode grading fail with ENXIO), the lock, the resource
    files, version control, caches, sockets or FIFOs, and must be the builder's file set exactly."""
    import socket

    from nodus.builder.package_files import package_files

    project = tmp_path / "quickstart"
    (project / "data").mkdir(parents=True)
    (project / "reverse_words.py").write_text("def tasks(split): return []\n")
    (project / "data" / "words.txt").write_text("abc\n")
    (project / "environment.yaml").write_text("apiVersion: nodus.dev/v1\nkind: Environment\n")
    (project / "trainingjob.yaml").write_text('{"apiVersion": "nodus.dev/v1beta1", "kind": "TrainingJob"}\n')
    (project / "other.yaml").write_text("name: a config the environment reads\n")
    (project / "nodus.lock").write_text("lockfileVersion: 1\n")
    (project / "latest").symlink_to("data/words.txt")
    for folder in (".nodus/jobs/default/quickstart", ".git", ".pytest_cache", "__pycache__"):
        (project / folder).mkdir(parents=True)
    (project / ".nodus" / "state.db").write_bytes(b"SQLite")
    (project / ".git" / "HEAD").write_text("ref: refs/heads/main\n")
    os.mkfifo(project / "a-fifo")
    listener, stray = socket.socket(socket.AF_UNIX), socket.socket(socket.AF_UNIX)
    monkeypatch.chdir(project)  # socket paths are short relative ones: AF_UNIX paths have a 108-byte limit
    listener.bind(".nodus/jobs/default/quickstart/attempt.sock")
    stray.bind("stray.sock")
    try:
        staged = Stager(tmp_path / "stage", None).stage(EnvironmentRef("reverse-words", "1.0.0", paths=(project,)))
    finally:
        listener.close()
        stray.close()
    copy = staged.dirs[0]
    listed = sorted(p.relative_to(copy).as_posix() for p in copy.rglob("*") if not p.is_dir() or p.is_symlink())
    expected = ["data/words.txt", "latest", "other.yaml", "reverse_words.py"]
    assert listed == expected
    assert package_files(project) == expected  # one file set for the image and the stage
    assert (copy / "latest").is_symlink() and os.readlink(copy / "latest") == "data/words.txt"
    assert not (copy / ".nodus").exists()


def test_staging_never_changes_what_a_link_points_to(tmp_path: Path) -> None:
    """Links are copied as links, as the image keeps them; making the stage private must not chmod through them."""
    outside = tmp_path / "outside.txt"
    outside.write_text("not the package's\n")
    outside.chmod(0o644)
    package = tmp_path / "pkg"
    package.mkdir()
    (package / "env.py").write_text("X = 1\n")
    (package / "escape").symlink_to(outside)
    Stager(tmp_path / "stage", None).stage(EnvironmentRef("demo", "1.0.0", paths=(package,)))
    assert stat.S_IMODE(outside.stat().st_mode) == 0o644
