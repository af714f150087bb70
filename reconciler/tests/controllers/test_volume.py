"""Model caching and Volumes: imported once from the local Hugging Face cache or a folder, read-only, reused."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from nodus.builder.store import Store
from nodus.reconciler.controllers.volume import ensure_model, reconcile_volume
from nodus.reconciler.model_cache import MANIFEST
from nodus.reconciler.project import Project
from nodus.reconciler.state.records import ResourceKey, ResourceRecord, spec_hash

REVISION = "c1899de289a04d12100db370d81485cdf75e47ca"
URI = f"hf://tiny/model@{REVISION}"


@pytest.fixture
def hub(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A Hugging Face cache as `huggingface-cli download` leaves it: snapshot files are symlinks to blobs."""
    cache = tmp_path / "hub"
    model = cache / "models--tiny--model"
    (model / "blobs").mkdir(parents=True)
    (model / "blobs" / "aaa").write_text('{"model_type": "qwen3"}')
    (model / "blobs" / "bbb").write_bytes(b"\0" * 1024)
    snapshot = model / "snapshots" / REVISION
    snapshot.mkdir(parents=True)
    (snapshot / "config.json").symlink_to("../../blobs/aaa")
    (snapshot / "model.safetensors").symlink_to("../../blobs/bbb")
    outside = tmp_path / "secret.txt"
    outside.write_text("not part of the model")
    (snapshot / "stray").symlink_to(outside)  # points out of the cache: never copied
    monkeypatch.setenv("HF_HUB_CACHE", str(cache))
    return cache


@pytest.fixture
def project(tmp_path: Path) -> Project:
    root = tmp_path / "project"
    root.mkdir()
    return Project(root, root / "nodus.lock", Store(root / ".nodus"), None)


def test_a_pinned_revision_is_imported_once_read_only_and_reused(hub: Path, project: Project) -> None:
    path, status = ensure_model(project, URI)
    assert path is not None and status["phase"] == "Ready"
    assert (path / "config.json").read_text() == '{"model_type": "qwen3"}'
    assert not (path / "config.json").is_symlink() and not (path / "stray").exists()
    assert not os.access(path / "config.json", os.W_OK) or os.geteuid() == 0
    assert (path / "config.json").stat().st_mode & 0o222 == 0
    inode = (path / "model.safetensors").stat().st_ino
    again, _ = ensure_model(project, URI)
    assert again == path and (path / "model.safetensors").stat().st_ino == inode  # reused, not copied again
    assert '"sizeBytes": 1047' in (path / MANIFEST).read_text()


def test_a_revision_not_in_the_cache_waits_with_the_command_to_fetch_it(hub: Path, project: Project) -> None:
    path, status = ensure_model(project, "hf://tiny/model@" + "0" * 40)
    assert path is None and status["reason"] == "ModelNotCached"
    assert "huggingface-cli download tiny/model --revision " + "0" * 40 in status["message"]


def test_the_tiny_model_not_built_yet_says_how_to_build_it_not_how_to_download_it(hub: Path, project: Project) -> None:
    from nodus.runtimes.tiny_model import REPO

    path, status = ensure_model(project, f"hf://{REPO}@" + "1" * 40)
    assert path is None and status["reason"] == "ModelNotCached"
    assert "build it with `python -m nodus.runtimes.tiny_model`" in status["message"]
    assert "huggingface-cli" not in status["message"]  # no hub has it


def _volume(spec: dict[str, object], name: str = "weights") -> ResourceRecord:
    document = {"apiVersion": "nodus.dev/v1", "kind": "Volume", "metadata": {"name": name}, "spec": spec}
    return ResourceRecord(ResourceKey("Volume", "default", name), document, spec_hash(document))


def test_volumes_from_a_model_a_folder_or_nothing(hub: Path, project: Project, tmp_path: Path) -> None:
    status = reconcile_volume(
        _volume({"accessMode": "ReadOnlyMany", "source": {"uri": URI}}), project=project, spec_file=None
    )
    assert status["phase"] == "Ready" and status["revision"] == 1 and status["files"] == 2
    folder = tmp_path / "chats"
    folder.mkdir()
    (folder / "chats.jsonl").write_text('{"q": 1}\n' * 100)
    spec_file = tmp_path / "volume.yaml"
    status = reconcile_volume(_volume({"source": {"path": "chats"}}, "chats"), project=project, spec_file=spec_file)
    assert status["phase"] == "Ready" and Path(status["path"], "chats.jsonl").is_file()
    small = _volume({"size": "100", "source": {"path": "chats"}}, "small")
    status = reconcile_volume(small, project=project, spec_file=spec_file)
    assert status["reason"] == "SizeExceeded"
    status = reconcile_volume(_volume({}, "empty"), project=project, spec_file=None)
    assert status["phase"] == "Ready" and status["revision"] == 0
    missing = reconcile_volume(_volume({"source": {"path": "nowhere"}}, "gone"), project=project, spec_file=spec_file)
    assert missing["reason"] == "SourceMissing"
