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
