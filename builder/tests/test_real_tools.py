"""The layouts we write, read by the real tools: skopeo, umoci and podman (no pulls, no network).

podman runs Debian's python3.11 from an image built here from this host's files (`python_rootfs`), as uid
10001 with the FACTS.md flags. The image podman stores while running it is removed by its id, which is
the config digest we wrote.
"""

from __future__ import annotations

import hashlib
import json
import subprocess
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from nodus.builder.layers import Entry
from nodus.builder.oci import ImageConfig, ImageRef, NewLayer, add_layer, blob_path, read_image, write_image

pytestmark = pytest.mark.podman

PODMAN = ["podman", "--runtime", "runc", "--cgroup-manager", "cgroupfs"]
RUN_FLAGS = ["--rm", "--network=none", "--ulimit", "nofile=1024:1024", "--ulimit", "nproc=1000:1000"]


def run(*argv: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(argv, capture_output=True, text=True, check=False, timeout=120)


@pytest.fixture(scope="module")
def python_image(python_rootfs: dict[str, Entry], tmp_path_factory: pytest.TempPathFactory) -> ImageRef:
    """Two layers: the Python rootfs, then a small program owned by the grader uid."""
    layout = tmp_path_factory.mktemp("store")
    program = {
        "opt/environment": Entry.directory(mode=0o700, uid=10001, gid=10001),
        "opt/environment/answer.py": Entry.file(b"print(6 * 7)\n", mode=0o600, uid=10001, gid=10001),
    }
    layers = [NewLayer(add_layer(layout, python_rootfs), "python3.11"), NewLayer(add_layer(layout, program), "program")]
    config = ImageConfig(env={"PATH": "/usr/bin"}, entrypoint=["/usr/bin/python3"], working_dir="/opt/environment")
    return write_image(layout, "python", layers, config=config, epoch=0)


@pytest.fixture
def small_image(tmp_path: Path, sample_entries: Callable[..., dict[str, Entry]]) -> ImageRef:
    layer = add_layer(tmp_path, sample_entries(), epoch=0)
    return write_image(tmp_path, "small", [NewLayer(layer, "files")], config=ImageConfig(user="10001"), epoch=0)


def test_skopeo_inspects_the_image_and_reports_our_digests(
    need_tool: Callable[[str], str], small_image: ImageRef
) -> None:
    need_tool("skopeo")
    inspected = run("skopeo", "inspect", small_image.transport)
    assert inspected.returncode == 0, inspected.stderr
    report = json.loads(inspected.stdout)
    image = read_image(small_image.layout, small_image.tag)
    assert report["Digest"] == small_image.manifest_digest
    assert report["Layers"] == [layer.digest for layer in image.layers]
    assert (report["Architecture"], report["Os"], report["Created"]) == ("amd64", "linux", "1970-01-01T00:00:00Z")
    raw = subprocess.run(["skopeo", "inspect", "--raw", small_image.transport], capture_output=True, check=True)
    assert raw.stdout == blob_path(small_image.layout, small_image.manifest_digest).read_bytes()
    config = subprocess.run(
        ["skopeo", "inspect", "--config", "--raw", small_image.transport], capture_output=True, check=True
    )
    assert "sha256:" + hashlib.sha256(config.stdout).hexdigest() == small_image.config_digest


def test_skopeo_copies_the_image_to_another_layout_with_the_same_digest(
    need_tool: Callable[[str], str], small_image: ImageRef, tmp_path: Path
) -> None:
    need_tool("skopeo")
    copied = run("skopeo", "copy", small_image.transport, f"oci:{tmp_path / 'copy'}:again")
    assert copied.returncode == 0, copied.stderr
    assert read_image(tmp_path / "copy", "again").ref.manifest_digest == small_image.manifest_digest


def test_umoci_stat_accepts_the_image(need_tool: Callable[[str], str], small_image: ImageRef) -> None:
    need_tool("umoci")
    stat = run("umoci", "stat", "--json", "--image", f"{small_image.layout}:{small_image.tag}")
    assert stat.returncode == 0, stat.stderr
    history = json.loads(stat.stdout)["history"]
    assert [(h["created_by"], h["created"]) for h in history] == [("files", "1970-01-01T00:00:00Z")]
    image = read_image(small_image.layout, small_image.tag)
    assert [h["layer"]["digest"] for h in history] == [layer.digest for layer in image.layers]


@pytest.fixture
def podman_image(need_tool: Callable[[str], str], request: pytest.FixtureRequest) -> Iterator[ImageRef]:
    """The Python image for podman; the copy podman keeps in its store is removed afterwards."""
    need_tool("podman")
    need_tool("runc")
    python_image: ImageRef = request.getfixturevalue("python_image")  # built only when podman is there
    yield python_image
    run(*PODMAN, "rmi", "--force", python_image.config_digest.removeprefix("sha256:"))


def test_podman_runs_python_from_our_image_as_the_grader_uid(podman_image: ImageRef) -> None:
    argv = [*PODMAN, "run", *RUN_FLAGS, "--user", "10001:10001", podman_image.transport]
    result = run(*argv, "-c", "import os, json; print(6 * 7, os.getuid(), os.getcwd())")
    assert result.returncode == 0, result.stderr
    assert result.stdout.split() == ["42", "10001", "/opt/environment"]
    script = run(*argv, "answer.py")  # the second layer, readable by its owner only
    assert (script.returncode, script.stdout) == (0, "42\n"), script.stderr
    stored = run(*PODMAN, "image", "inspect", "--format", "{{.Id}}", podman_image.config_digest.removeprefix("sha256:"))
    assert stored.stdout.strip() == podman_image.config_digest.removeprefix("sha256:")
