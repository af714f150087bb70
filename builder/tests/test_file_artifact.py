"""Artifacts of plain files (`nodus.builder.file_artifact`): a layer per file whose digest is the file's sha256, the
same digest for the same files, names that stay inside, and a round trip through a real registry (marked)."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

import pytest

from nodus.builder import registry
from nodus.builder.file_artifact import TITLE, annotations_of, artifact_files, write_artifact
from nodus.builder.oci import blob_path, read_blob
from nodus.errors import BuildError

KIND = "application/vnd.nodus.test-files.v1"


def files(root: Path) -> dict[str, Path]:
    (root / "adapter").mkdir(parents=True)
    (root / "adapter" / "weights.bin").write_bytes(bytes(range(256)) * 100)
    (root / "results.json").write_text('{"reward": 0.75}\n')
    return {"results.json": root / "results.json", "adapter/weights.bin": root / "adapter" / "weights.bin"}


def test_each_file_is_a_layer_named_by_its_path_whose_digest_is_its_sha256(tmp_path: Path) -> None:
    given = files(tmp_path / "out")
    manifest = write_artifact(tmp_path / "layout", KIND, given, {"dev.nodus.job": "default/quickstart"})
    raw = read_blob(tmp_path / "layout", manifest.digest)
    found = artifact_files(raw, KIND, "test")
    assert sorted(found) == ["adapter/weights.bin", "results.json"]
    for name, blob in found.items():
        data = given[name].read_bytes()
        assert blob.digest == "sha256:" + hashlib.sha256(data).hexdigest() and blob.size == len(data)
        assert blob_path(tmp_path / "layout", blob.digest).read_bytes() == data
    document = json.loads(raw)
    assert document["artifactType"] == KIND and document["config"]["mediaType"] == "application/vnd.oci.empty.v1+json"
    assert [layer["annotations"][TITLE] for layer in document["layers"]] == ["adapter/weights.bin", "results.json"]
    assert annotations_of(raw) == {"dev.nodus.job": "default/quickstart"}


def test_the_same_files_give_the_same_digest_in_another_layout(tmp_path: Path) -> None:
    first = write_artifact(tmp_path / "one", KIND, files(tmp_path / "a"))
    second = write_artifact(tmp_path / "two", KIND, dict(reversed(list(files(tmp_path / "b").items()))))
    assert first == second
    assert write_artifact(tmp_path / "one", KIND, files(tmp_path / "c")) == first  # written again: nothing new


@pytest.mark.parametrize("name", ["../escape", "/etc/passwd", "a/../../b", "", "a\\b", "a//b"])
def test_a_name_outside_the_artifact_is_refused(tmp_path: Path, name: str) -> None:
    (tmp_path / "f").write_text("x")
    with pytest.raises(BuildError, match="not a relative path inside the artifact"):
        write_artifact(tmp_path / "layout", KIND, {name: tmp_path / "f"})


def test_reading_refuses_another_kind_and_layers_without_a_safe_unique_title(tmp_path: Path) -> None:
    manifest = write_artifact(tmp_path / "layout", KIND, files(tmp_path / "out"))
    raw = read_blob(tmp_path / "layout", manifest.digest)
    with pytest.raises(BuildError, match=r"not an artifact of type application/vnd\.nodus\.other"):
        artifact_files(raw, "application/vnd.nodus.other", "outputs")
    document = json.loads(raw)
    document["layers"][1]["annotations"][TITLE] = document["layers"][0]["annotations"][TITLE]
    with pytest.raises(BuildError, match="two layers are both named"):
        artifact_files(json.dumps(document).encode(), KIND, "outputs")
    document["layers"][1]["annotations"][TITLE] = "../../outside"
    with pytest.raises(BuildError, match="not a relative path inside"):
        artifact_files(json.dumps(document).encode(), KIND, "outputs")
    del document["layers"][1]["annotations"]
    with pytest.raises(BuildError, match="a layer has no title"):
        artifact_files(json.dumps(document).encode(), KIND, "outputs")


@pytest.mark.registry
def test_pushed_then_fetched_one_file_at_a_time_through_a_real_registry(tmp_path: Path, local_registry: str) -> None:
    given = files(tmp_path / "out")
    manifest = write_artifact(tmp_path / "layout", KIND, given)
    target = registry.RegistryRef.parse(f"{local_registry}/nodus/outputs")
    pushed = registry.push(tmp_path / "layout", manifest.digest, target, tags=["run-1"])
    assert pushed.digest == manifest.digest and registry.resolve_tag(target, "run-1") == manifest.digest

    found = artifact_files(registry.fetch_manifest(target, manifest.digest), KIND, "pulled")
    elsewhere = tmp_path / "elsewhere"
    registry.fetch_blobs(target, [found["results.json"]], elsewhere)
    assert blob_path(elsewhere, found["results.json"].digest).read_bytes() == given["results.json"].read_bytes()
    assert not blob_path(elsewhere, found["adapter/weights.bin"].digest).exists()  # only what was asked for

    missing = found["results.json"].__class__("application/octet-stream", "sha256:" + "0" * 64, 3)
    with pytest.raises(BuildError):
        registry.fetch_blobs(target, [missing], elsewhere)
