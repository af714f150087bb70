"""`nodus cp` into and out of a Volume: an upload commits the next revision (the files of the one before and the new
ones, a sha256 each, read-only), a download is checked against that sha256, and what cannot be done is one line."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

import pytest
from click.testing import CliRunner

from nodus.cli.main import cli

VOLUMES = """apiVersion: nodus.dev/v1
kind: Volume
metadata: {name: chats}
spec: {size: 1Ki}
---
apiVersion: nodus.dev/v1
kind: Volume
metadata: {name: weights}
spec: {accessMode: ReadOnlyMany, source: {path: ./weights}}
"""


def nodus(*args: str) -> tuple[int, str]:
    result = CliRunner().invoke(cli, list(args))
    return result.exit_code, result.output


@pytest.fixture
def project(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.delenv("NODUS_HOME", raising=False)
    monkeypatch.delenv("NODUS_STATE", raising=False)
    (tmp_path / "nodus.lock").write_text("lockfileVersion: 1\n")
    (tmp_path / "weights").mkdir()
    (tmp_path / "weights" / "config.json").write_text("{}")
    (tmp_path / "volumes.yaml").write_text(VOLUMES)
    monkeypatch.chdir(tmp_path)
    code, output = nodus("apply", ".", "--yes")
    assert code == 0, output
    return tmp_path


def volume_status() -> dict[str, object]:
    status: dict[str, object] = json.loads(nodus("get", "volume", "chats", "-o", "json")[1])["status"]
    return status


def test_each_upload_commits_the_next_revision_with_a_sha256_per_file(project: Path) -> None:
    (project / "chats.jsonl").write_text('{"question": "a b", "answer": "b a"}\n')
    code, output = nodus("cp", "chats.jsonl", "vol/chats:chats.jsonl")
    assert code == 0 and output.startswith("Volume/chats revision 1: 1 file uploaded"), output
    (project / "more").mkdir()
    (project / "more" / "eval.jsonl").write_text('{"question": "c d", "answer": "d c"}\n')
    code, output = nodus("cp", "-r", "more", "vol/chats:held-out")
    assert code == 0 and "revision 2: 1 file uploaded (2 files" in output, output

    status = volume_status()
    assert (status["phase"], status["revision"], status["files"]) == ("Ready", 2, 2)
    folder = Path(str(status["path"]))
    manifest = json.loads((folder / ".nodus-manifest.json").read_text())
    for name in ("chats.jsonl", "held-out/eval.jsonl"):
        data = (folder / name).read_bytes()
        assert manifest["files"][name] == {"sha256": hashlib.sha256(data).hexdigest(), "size": len(data)}
        assert not (folder / name).stat().st_mode & 0o222  # read-only
    assert (folder.parent / "rev1" / "chats.jsonl").is_file()  # revision 1 stays as it was

    code, output = nodus("cp", "vol/chats:held-out/eval.jsonl", str(project / "out") + "/")
    assert code == 0 and "verified against its sha256" in output, output
    assert (project / "out" / "eval.jsonl").read_text() == '{"question": "c d", "answer": "d c"}\n'


def test_what_a_volume_refuses_is_one_line_and_commits_nothing(project: Path) -> None:
    (project / "big.bin").write_bytes(b"x" * 2048)
    code, output = nodus("cp", "big.bin", "vol/chats:big.bin")
    assert code == 1 and "Volume/chats: revision 1 would hold 2048 bytes, over spec.size" in output, output
    assert volume_status()["revision"] == 0
    code, output = nodus("cp", "big.bin", "vol/weights:big.bin")
    assert code == 1 and "Volume/weights is ReadOnlyMany: uploads go to a ReadWriteOnce Volume" in output, output
    code, output = nodus("cp", "big.bin", "vol/nothing:big.bin")
    assert code == 1 and "Volume/nothing not found in project default" in output, output
    code, output = nodus("cp", "big.bin", "vol/chats:../escape")
    assert code == 1 and "'../escape' is not a path inside the Volume" in output, output
    code, output = nodus("cp", "vol/chats:missing.jsonl", "here.jsonl")
    assert code == 1 and "Volume/chats revision 0 has no 'missing.jsonl'" in output, output


def test_a_file_changed_after_its_commit_is_not_copied_out(project: Path) -> None:
    (project / "chats.jsonl").write_text("one\n")
    assert nodus("cp", "chats.jsonl", "vol/chats:chats.jsonl")[0] == 0
    stored = Path(str(volume_status()["path"])) / "chats.jsonl"
    stored.chmod(0o644)
    stored.write_text("tampered\n")
    code, output = nodus("cp", "vol/chats:chats.jsonl", "back.jsonl")
    assert code == 1 and "no longer matches the sha256 committed with it" in output, output
    assert not (project / "back.jsonl").exists()


def revision_folders(project: Path) -> list[str]:
    """What the Volume's folder holds (revisions, and any partial one a failed upload left)."""
    folder = project / ".nodus" / "volumes" / "default" / "chats"
    return sorted(path.name for path in folder.iterdir()) if folder.is_dir() else []


def test_an_upload_never_follows_a_link_and_names_it(project: Path, tmp_path: Path) -> None:
    secret = tmp_path.parent / f"{tmp_path.name}-shadow"
    secret.write_text("root:secret-hash\n")
    (project / "upload").mkdir()
    (project / "upload" / "chats.jsonl").write_text("one\n")
    (project / "upload" / "notes.txt").symlink_to(secret)
    before = revision_folders(project)
    code, output = nodus("cp", "-r", "upload", "vol/chats:up")
    assert code == 1 and "upload/notes.txt is a symbolic link: nothing was uploaded" in output, output
    assert "Traceback" not in output and volume_status()["revision"] == 0
    assert revision_folders(project) == before  # no revision, not even a partial one

    # A link to a folder inside the tree, the folder given, and a single file given: refused alike.
    (project / "upload" / "notes.txt").unlink()
    outside = tmp_path.parent / f"{tmp_path.name}-home"
    outside.mkdir()
    (outside / "id_rsa").write_text("private\n")
    (project / "upload" / "home").symlink_to(outside, target_is_directory=True)
    code, output = nodus("cp", "-r", "upload", "vol/chats:up")
    assert code == 1 and "upload/home is a symbolic link: nothing was uploaded" in output, output
    (project / "upload" / "home").unlink()
    (project / "linked").symlink_to(project / "upload", target_is_directory=True)
    code, output = nodus("cp", "-r", "linked", "vol/chats:up")
    assert code == 1 and "linked is a symbolic link: nothing was uploaded" in output, output
    (project / "shadow.txt").symlink_to(secret)
    code, output = nodus("cp", "shadow.txt", "vol/chats:notes.txt")
    assert code == 1 and "shadow.txt is a symbolic link: nothing was uploaded" in output, output
    assert volume_status()["revision"] == 0 and revision_folders(project) == before

    # Without the links the same folder goes in, and nothing of the links' targets is in the revision.
    code, output = nodus("cp", "-r", "upload", "vol/chats:up")
    assert code == 0, output
    folder = Path(str(volume_status()["path"]))
    assert sorted(p.relative_to(folder).as_posix() for p in folder.rglob("*") if p.is_file()) == [
        ".nodus-manifest.json",
        "up/chats.jsonl",
    ]


def test_an_absolute_volume_path_is_refused_like_dotdot(project: Path) -> None:
    (project / "evil").write_text("x\n")
    code, output = nodus("cp", "evil", "vol/chats:/etc/evil")
    assert code == 1 and "'/etc/evil' is absolute: a path inside the Volume starts at its top" in output, output
    (project / "tree").mkdir()
    (project / "tree" / "evil").write_text("x\n")
    code, output = nodus("cp", "-r", "tree", "vol/chats:/etc")
    assert code == 1 and "'/etc' is absolute: a path inside the Volume starts at its top" in output, output
    assert volume_status()["revision"] == 0
    assert nodus("cp", "evil", "vol/chats:evil")[0] == 0
    code, output = nodus("cp", "vol/chats:/evil", "back")
    assert code == 1 and "'/evil' is absolute: a path inside the Volume starts at its top" in output, output
    assert "vol/NAME: alone is the top itself" in output, output  # what the user may have meant by `vol/chats:/`
    assert not (project / "back").exists()
    assert nodus("cp", "-r", "tree", "vol/chats:")[0] == 0  # the top, written the one way


def test_an_upload_that_clashes_with_the_revision_is_one_line_and_commits_nothing(project: Path) -> None:
    (project / "a").write_text("a file\n")
    assert nodus("cp", "a", "vol/chats:a")[0] == 0
    (project / "b").write_text("b\n")
    code, output = nodus("cp", "b", "vol/chats:a/b")
    assert code == 1 and "Traceback" not in output and "a is a file in Volume/chats" in output, output
    assert volume_status()["revision"] == 1 and revision_folders(project) == ["rev0", "rev1"]


def test_a_download_never_writes_through_a_link_in_the_destination(project: Path, tmp_path: Path) -> None:
    (project / "notes.txt").write_text("from the volume\n")
    assert nodus("cp", "notes.txt", "vol/chats:notes.txt")[0] == 0
    victim = tmp_path.parent / f"{tmp_path.name}-bashrc"
    victim.write_text("mine\n")
    into = project / "down"
    into.mkdir()
    (into / ".notes.txt.partial").symlink_to(victim)  # where a copy used to be written first
    (into / "notes.txt").symlink_to(victim)
    code, output = nodus("cp", "vol/chats:notes.txt", f"{into}/")
    assert code == 0, output
    assert victim.read_text() == "mine\n"
    assert not (into / "notes.txt").is_symlink() and (into / "notes.txt").read_text() == "from the volume\n"


def test_a_link_in_the_volume_is_never_read(project: Path, tmp_path: Path) -> None:
    (project / "notes.txt").write_text("same bytes\n")
    assert nodus("cp", "notes.txt", "vol/chats:notes.txt")[0] == 0
    folder = Path(str(volume_status()["path"]))
    twin = tmp_path.parent / f"{tmp_path.name}-twin"
    twin.write_text("same bytes\n")  # the sha256 matches: only the link gives it away
    folder.chmod(0o755)
    (folder / "notes.txt").unlink()
    (folder / "notes.txt").symlink_to(twin)
    code, output = nodus("cp", "vol/chats:notes.txt", "back.txt")
    assert code == 1 and "notes.txt of Volume/chats revision 1 is a symbolic link" in output, output
    assert not (project / "back.txt").exists()
