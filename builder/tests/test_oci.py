"""The OCI layout store: canonical JSON, fixed times, many tags in one layout, base images, reading back."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path

import pytest

from nodus.builder.layers import Entry
from nodus.builder.oci import (
    BASE_DIGEST,
    CONFIG_MEDIA_TYPE,
    MANIFEST_MEDIA_TYPE,
    REF_NAME,
    ImageConfig,
    ImageRef,
    NewLayer,
    add_layer,
    blob_path,
    canonical_json,
    created_timestamp,
    list_tags,
    read_blob,
    read_config,
    read_image,
    resolve,
    write_image,
)
from nodus.errors import BuildError, ConfigError

Sample = Callable[..., dict[str, Entry]]
FIXTURES = Path(__file__).parent / "fixtures"


def tree_bytes(root: Path) -> dict[str, tuple[int, bytes]]:
    """Every file under `root`: its mode and bytes (what "byte-identical layout" means here)."""
    return {
        str(path.relative_to(root)): (path.stat().st_mode, path.read_bytes())
        for path in sorted(root.rglob("*"))
        if path.is_file()
    }


def build(
    layout: Path,
    tag: str,
    entries: dict[str, Entry],
    *,
    config: ImageConfig | None = None,
    annotations: dict[str, str] | None = None,
) -> ImageRef:
    layer = add_layer(layout, entries, epoch=0)
    layers = [NewLayer(layer, f"files of {tag}")]
    return write_image(layout, tag, layers, config=config, annotations=annotations, epoch=0)


def test_every_document_is_canonical_json(tmp_path: Path, sample_entries: Sample) -> None:
    ref = build(tmp_path, "v1", sample_entries(), config=ImageConfig(labels={"b": "2", "a": "1"}))
    assert (tmp_path / "oci-layout").read_bytes() == b'{"imageLayoutVersion":"1.0.0"}'
    documents = [
        tmp_path / "index.json",
        blob_path(tmp_path, ref.manifest_digest),
        blob_path(tmp_path, ref.config_digest),
    ]
    for path in documents:
        raw = path.read_bytes()
        assert raw == canonical_json(json.loads(raw))
        assert b": " not in raw and b", " not in raw and not raw.endswith(b"\n")
    assert canonical_json({"b": [1, {"d": 1, "c": "é"}], "a": None}) == b'{"a":null,"b":[1,{"c":"\\u00e9","d":1}]}'


def test_config_and_manifest_fields(tmp_path: Path, sample_entries: Sample) -> None:
    config = ImageConfig(
        env={"PATH": "/usr/bin", "LANG": "C.UTF-8"},
        entrypoint=["/usr/bin/python3"],
        cmd=["-c", "print(1)"],
        working_dir="/opt/environment",
        user="10001:10001",
        labels={"nodus.dev/environment": "tiny"},
    )
    ref = build(tmp_path, "v1", sample_entries(), config=config, annotations={"org.opencontainers.image.title": "t"})
    image = read_image(tmp_path, "v1")
    assert image.ref == ref and ref.transport == f"oci:{tmp_path.absolute()}:v1"
    assert image.config == {
        "architecture": "amd64",
        "os": "linux",
        "created": "1970-01-01T00:00:00Z",
        "config": {
            "Env": ["LANG=C.UTF-8", "PATH=/usr/bin"],
            "Entrypoint": ["/usr/bin/python3"],
            "Cmd": ["-c", "print(1)"],
            "WorkingDir": "/opt/environment",
            "User": "10001:10001",
            "Labels": {"nodus.dev/environment": "tiny"},
        },
        "rootfs": {"type": "layers", "diff_ids": [image.layers[0].diff_id]},
        "history": [{"created": "1970-01-01T00:00:00Z", "created_by": "files of v1"}],
    }
    layer = image.layers[0]
    assert image.manifest == {
        "schemaVersion": 2,
        "mediaType": MANIFEST_MEDIA_TYPE,
        "config": {
            "mediaType": CONFIG_MEDIA_TYPE,
            "digest": ref.config_digest,
            "size": blob_path(tmp_path, ref.config_digest).stat().st_size,
        },
        "layers": [{"mediaType": layer.media_type, "digest": layer.digest, "size": layer.size}],
        "annotations": {"org.opencontainers.image.title": "t"},
    }
    index = json.loads((tmp_path / "index.json").read_bytes())
    assert index["manifests"] == [
        {
            "mediaType": MANIFEST_MEDIA_TYPE,
            "digest": ref.manifest_digest,
            "size": blob_path(tmp_path, ref.manifest_digest).stat().st_size,
            "annotations": {REF_NAME: "v1"},
        }
    ]
    assert read_config(tmp_path, "v1") == image.config


def test_created_comes_from_source_date_epoch(
    tmp_path: Path, sample_entries: Sample, monkeypatch: pytest.MonkeyPatch
) -> None:
    assert created_timestamp(0) == "1970-01-01T00:00:00Z"
    assert created_timestamp(1_700_000_000) == "2023-11-14T22:13:20Z"
    monkeypatch.setenv("SOURCE_DATE_EPOCH", "1700000000")
    layer = add_layer(tmp_path, sample_entries())
    write_image(tmp_path, "dated", [NewLayer(layer, "x")])
    config = read_config(tmp_path, "dated")
    assert config["created"] == config["history"][0]["created"] == "2023-11-14T22:13:20Z"


def test_two_processes_write_byte_identical_layouts(tmp_path: Path) -> None:
    trees = []
    for seed in ("1", "2"):
        layout = tmp_path / f"layout-{seed}"
        env = {**os.environ, "PYTHONHASHSEED": seed}
        env.pop("SOURCE_DATE_EPOCH", None)
        subprocess.run([sys.executable, str(FIXTURES / "build_sample.py"), str(layout)], env=env, check=True)
        trees.append(tree_bytes(layout))
    assert trees[0] == trees[1]
    assert len([name for name in trees[0] if name.startswith("blobs/")]) == 6  # 2 layers, 2 configs, 2 manifests
    assert list_tags(tmp_path / "layout-1") == ["app", "base"]


def test_adding_a_second_tag_keeps_the_first(tmp_path: Path, sample_entries: Sample) -> None:
    first = build(tmp_path, "first", sample_entries())
    before = tree_bytes(tmp_path)
    second = build(tmp_path, "second", sample_entries(b"other\n"))
    assert list_tags(tmp_path) == ["first", "second"]
    assert resolve(tmp_path, "first").digest == first.manifest_digest
    assert resolve(tmp_path, "second").digest == second.manifest_digest
    after = tree_bytes(tmp_path)
    assert {name: after[name] for name in before if name != "index.json"} == {
        name: data for name, data in before.items() if name != "index.json"
    }
    assert read_image(tmp_path, "first").ref == first


def test_a_tag_written_again_moves_and_the_same_image_adds_nothing(tmp_path: Path, sample_entries: Sample) -> None:
    one = build(tmp_path, "v1", sample_entries())
    again = build(tmp_path, "v1", sample_entries())
    assert again == one
    moved = build(tmp_path, "v1", sample_entries(b"changed\n"))
    assert list_tags(tmp_path) == ["v1"] and resolve(tmp_path, "v1").digest == moved.manifest_digest
    assert blob_path(tmp_path, one.manifest_digest).exists()  # old blobs stay until a garbage collection


def test_one_byte_changes_the_layer_config_and_manifest_and_nothing_of_the_other_image(tmp_path: Path) -> None:
    shared = {f"usr/lib/lib{i}.so": Entry.file(bytes([i]) * 1000) for i in range(5)}
    app = {"opt/app/main.py": Entry.file(b"print('hello')\n"), "opt/app/data.txt": Entry.file(b"abc" * 100)}
    changed = {**app, "opt/app/data.txt": Entry.file(b"abc" * 99 + b"abd")}

    def image(tag: str, files: dict[str, Entry]) -> ImageRef:
        layers = [NewLayer(add_layer(tmp_path, shared), "libs"), NewLayer(add_layer(tmp_path, files), "app")]
        return write_image(tmp_path, tag, layers, epoch=0)

    one = image("one", app)
    one_files = tree_bytes(tmp_path)
    two = image("two", changed)
    first, second = read_image(tmp_path, "one"), read_image(tmp_path, "two")
    assert first.layers[0] == second.layers[0]  # the shared layer: one blob, used twice
    assert first.layers[1].digest != second.layers[1].digest
    assert first.layers[1].diff_id != second.layers[1].diff_id
    assert one.manifest_digest != two.manifest_digest and one.config_digest != two.config_digest
    assert first.config["history"] == second.config["history"]
    assert {k: v for k, v in first.config.items() if k != "rootfs"} == {
        k: v for k, v in second.config.items() if k != "rootfs"
    }
    new_blobs = {name for name in tree_bytes(tmp_path) if name not in one_files}
    assert new_blobs == {
        f"blobs/sha256/{d.removeprefix('sha256:')}"
        for d in (second.layers[1].digest, two.config_digest, two.manifest_digest)
    }
    assert read_image(tmp_path, "one") == first and first.ref == one
    assert all(tree_bytes(tmp_path)[name] == data for name, data in one_files.items() if name != "index.json")


def test_a_base_from_another_layout_is_stacked_on_and_its_blobs_linked(tmp_path: Path, sample_entries: Sample) -> None:
    base_layout, layout = tmp_path / "base", tmp_path / "store"
    build(
        base_layout,
        "debian",
        {"etc/os-release": Entry.file(b"ID=debian\n")},
        config=ImageConfig(
            env={"PATH": "/bin", "LANG": "C"}, entrypoint=["/bin/sh"], cmd=["-l"], labels={"os": "debian"}
        ),
    )
    base = read_image(base_layout, "debian")
    layer = add_layer(layout, sample_entries(), epoch=0)
    config = ImageConfig(env={"PATH": "/usr/bin"}, entrypoint=["/usr/bin/python3"], labels={"env": "tiny"})
    ref = write_image(layout, "tiny", [NewLayer(layer, "environment")], base=base, config=config, epoch=0)
    image = read_image(layout, "tiny")
    assert [item.digest for item in image.layers] == [base.layers[0].digest, layer.digest]
    assert image.config["rootfs"]["diff_ids"] == [base.layers[0].diff_id, layer.diff_id]
    assert [h["created_by"] for h in image.config["history"]] == ["files of debian", "environment"]
    assert image.config["config"] == {
        "Env": ["LANG=C", "PATH=/usr/bin"],
        "Entrypoint": ["/usr/bin/python3"],  # the base's Cmd went with its entrypoint
        "Labels": {"env": "tiny", "os": "debian"},
    }
    assert image.manifest["annotations"] == {BASE_DIGEST: base.ref.manifest_digest}
    linked = blob_path(layout, base.layers[0].digest)
    assert linked.stat().st_ino == blob_path(base_layout, base.layers[0].digest).stat().st_ino
    assert list_tags(base_layout) == ["debian"] and list_tags(layout) == ["tiny"]
    assert ref.manifest_digest == resolve(layout, "tiny").digest


def test_a_base_of_another_platform_is_refused(tmp_path: Path, sample_entries: Sample) -> None:
    build(tmp_path, "base", sample_entries())
    base = read_image(tmp_path, "base")
    foreign = type(base)(base.ref, base.manifest, {**base.config, "architecture": "arm64"}, base.layers)
    layer = add_layer(tmp_path, {"x": Entry.file(b"x")})
    with pytest.raises(BuildError, match="linux/arm64"):
        write_image(tmp_path, "mixed", [NewLayer(layer, "x")], base=foreign)


def test_concurrent_writers_keep_every_tag(tmp_path: Path, sample_entries: Sample) -> None:
    layer = add_layer(tmp_path, sample_entries(), epoch=0)
    errors: list[BaseException] = []

    def tag(number: int) -> None:
        try:
            config = ImageConfig(labels={"n": str(number)})
            write_image(tmp_path, f"t{number}", [NewLayer(layer, "x")], config=config, epoch=0)
        except BaseException as exc:  # reported below: a thread's exception would otherwise vanish
            errors.append(exc)

    threads = [threading.Thread(target=tag, args=(n,)) for n in range(8)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert errors == []
    assert list_tags(tmp_path) == [f"t{n}" for n in range(8)]
    assert not [p for p in tmp_path.iterdir() if p.name.startswith(".nodus-")]


def test_reading_errors_say_what_is_wrong(tmp_path: Path, sample_entries: Sample) -> None:
    assert list_tags(tmp_path / "nothing") == []
    ref = build(tmp_path, "v1", sample_entries())
    with pytest.raises(ConfigError, match="no image tagged 'v2'") as missing:
        resolve(tmp_path, "v2")
    assert missing.value.hint == "tags there: v1"
    with pytest.raises(ConfigError, match="not valid"):
        build(tmp_path, "bad tag", sample_entries())
    with pytest.raises(BuildError, match="not a sha256 digest"):
        blob_path(tmp_path, "sha256:../../etc/passwd")
    config = blob_path(tmp_path, ref.config_digest)
    config.write_bytes(config.read_bytes().replace(b"amd64", b"amd65"))
    with pytest.raises(BuildError, match="corrupt"):
        read_image(tmp_path, "v1")
    with pytest.raises(BuildError, match="missing"):
        read_blob(tmp_path, "sha256:" + "0" * 64)


def test_writing_an_image_needs_its_layers_in_the_layout(tmp_path: Path, sample_entries: Sample) -> None:
    layer = add_layer(tmp_path / "elsewhere", sample_entries())
    with pytest.raises(BuildError, match="is not in"):
        write_image(tmp_path / "store", "v1", [NewLayer(layer, "x")])


def test_a_base_with_docker_media_types_and_no_history_is_normalised(tmp_path: Path, sample_entries: Sample) -> None:
    build(tmp_path, "base", {"etc/os-release": Entry.file(b"ID=debian\n")})
    real = read_image(tmp_path, "base")
    docker_layers = tuple(
        replace(layer, media_type="application/vnd.docker.image.rootfs.diff.tar.gzip") for layer in real.layers
    )
    config = {key: value for key, value in real.config.items() if key != "history"}
    base = replace(real, config=config, layers=docker_layers)  # what `skopeo copy` of a Docker image can give
    layer = add_layer(tmp_path, sample_entries(), epoch=0)
    write_image(tmp_path, "app", [NewLayer(layer, "app")], base=base, epoch=0)
    image = read_image(tmp_path, "app")
    assert {item.media_type for item in image.layers} == {"application/vnd.oci.image.layer.v1.tar+gzip"}
    assert [h["created_by"] for h in image.config["history"]] == ["base image layer", "app"]
