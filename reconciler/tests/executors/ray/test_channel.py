"""The Ray executor's registry channel (`executors/ray/channel.py`) against a real registry: a job's inputs pushed
from a project's store and fetched into a node's own store by digest, its outputs pushed by the node and fetched one
file at a time on the controller's host, each checked against the sha256 the node recorded; and what is refused.

Marked `registry` (Debian's docker-registry on 127.0.0.1, the root conftest's `local_registry`); the test with a
grader image loads it into podman as a node does, and is marked `podman` too. The whole path through a Ray cluster
is tests/test_ray_registry.py.
"""

from __future__ import annotations

import hashlib
import json
import subprocess
from pathlib import Path

import pytest

from nodus.builder.layers import Entry
from nodus.builder.oci import NewLayer, add_layer, write_image
from nodus.builder.store import Store
from nodus.errors import ConfigError
from nodus.reconciler.executors.local.outputs import copy_verified
from nodus.reconciler.executors.local.resolve import ADAPTERS_VARIABLE, resolve
from nodus.reconciler.executors.ray.channel import OutputsCache, RegistryChannel, node_store
from nodus.reconciler.executors.workload import (
    AdapterArtifact,
    DataArtifact,
    EnvironmentArtifact,
    ModelArtifact,
    VolumeRevision,
    Workload,
    WorkloadKey,
)
from nodus.reconciler.model_cache import MANIFEST, imported, model_folder
from nodus.reconciler.project import Project

pytestmark = pytest.mark.registry

URI = "hf://nodus/tiny-qwen3@" + "a" * 40
MODEL_FILES = {"config.json": b'{"hidden_size": 64}\n', "model.safetensors": bytes(range(256)) * 64}


def project_at(root: Path) -> Project:
    root.mkdir(parents=True)
    (root / "nodus.lock").write_text("lockfileVersion: 1\nenvironments: {}\n")
    return Project(root, root / "nodus.lock", Store(root / ".nodus"), None)


def import_model(folder: Path) -> None:
    folder.mkdir(parents=True)
    for name, data in MODEL_FILES.items():
        (folder / name).write_bytes(data)
    entries = {name: {"sha256": hashlib.sha256(data).hexdigest()} for name, data in MODEL_FILES.items()}
    (folder / MANIFEST).write_text(json.dumps({"files": entries}))


def workload(**fields: object) -> Workload:
    key = WorkloadKey(project="default", name="tj-1", kind="TrainingJob")
    return Workload(key=key, command=("python", "-m", "trainer"), **fields)  # type: ignore[arg-type]


def test_a_pinned_model_reaches_the_node_by_digest_and_a_second_fetch_changes_nothing(
    tmp_path: Path, local_registry: str
) -> None:
    project = project_at(tmp_path / "project")
    import_model(model_folder(project, URI))
    channel = RegistryChannel.parse(f"{local_registry}/nodus/ray")
    job = workload(model=ModelArtifact(uri=URI))

    digest = channel.publish_inputs(job, project)
    assert digest is not None and digest == channel.publish_inputs(job, project)  # the same inputs, the same digest

    node = node_store(tmp_path / "node" / "node-jobs")
    assert node.root == tmp_path / "node" / "node-store" and not imported(node, URI)
    channel.fetch_inputs(job, digest, node)
    assert imported(node, URI)
    for name, data in MODEL_FILES.items():
        assert (model_folder(node, URI) / name).read_bytes() == data
    before = {p: p.stat().st_mtime_ns for p in model_folder(node, URI).iterdir()}
    channel.fetch_inputs(job, digest, node)
    assert {p: p.stat().st_mtime_ns for p in model_folder(node, URI).iterdir()} == before


def test_a_volume_revision_reaches_the_node_where_the_resolver_looks_for_it(
    tmp_path: Path, local_registry: str
) -> None:
    project = project_at(tmp_path / "project")
    folder = project.volume_revision("default", "my-sft", 3)
    import_model(folder)
    (folder / "sub").mkdir()
    (folder / "sub" / "tokenizer.json").write_text("{}")
    channel = RegistryChannel.parse(f"{local_registry}/nodus/ray")
    job = workload(model=ModelArtifact(volume=VolumeRevision(name="my-sft", revision=3)))
    node = node_store(tmp_path / "node" / "node-jobs")
    channel.fetch_inputs(job, channel.publish_inputs(job, project), node)
    there = node.volume_revision("default", "my-sft", 3)
    assert (there / "sub" / "tokenizer.json").read_text() == "{}"
    assert (there / "model.safetensors").read_bytes() == MODEL_FILES["model.safetensors"]


def test_what_cannot_travel_is_refused_in_one_line_before_anything_is_pushed(
    tmp_path: Path, local_registry: str
) -> None:
    project = project_at(tmp_path / "project")
    channel = RegistryChannel.parse(f"{local_registry}/nodus/ray")
    process_mode = EnvironmentArtifact(
        project="default", name="reverse-words", version="1.0.0", image_digest="sha256:" + "1" * 64
    )
    with pytest.raises(ConfigError, match="process-mode graders read the package folder on this host"):
        channel.publish_inputs(workload(environment=process_mode), project)
    with pytest.raises(ConfigError, match=r"model.uri: hf://nodus/tiny-qwen3@a+ is not imported"):
        channel.publish_inputs(workload(model=ModelArtifact(uri=URI)), project)
    assert channel.publish_inputs(workload(), project) is None  # nothing named, nothing pushed


def test_an_unreachable_registry_is_one_line_naming_the_job_and_the_registry(tmp_path: Path) -> None:
    project = project_at(tmp_path / "project")
    import_model(model_folder(project, URI))
    closed = RegistryChannel.parse("127.0.0.1:9/nodus/ray")  # discard: nothing listens on loopback port 9
    with pytest.raises(ConfigError, match=r"job default/tj-1: could not push its inputs to 127.0.0.1:9/nodus/ray: "):
        closed.publish_inputs(workload(model=ModelArtifact(uri=URI)), project)


def test_outputs_come_back_one_file_at_a_time_checked_against_the_recorded_sha256(
    tmp_path: Path, local_registry: str
) -> None:
    outputs = tmp_path / "node-job" / "outputs"
    (outputs / "adapter").mkdir(parents=True)
    (outputs / "adapter" / "adapter_model.safetensors").write_bytes(b"\x00\x01" * 5000)
    (outputs / "results.json").write_text('{"final": 0.8}\n')
    recorded = {
        path: {
            "sha256": hashlib.sha256((outputs / path).read_bytes()).hexdigest(),
            "size": (outputs / path).stat().st_size,
        }
        for path in ("adapter/adapter_model.safetensors", "results.json")
    }
    channel = RegistryChannel.parse(f"{local_registry}/nodus/ray")
    node = node_store(tmp_path / "node" / "node-jobs")
    digest = channel.publish_outputs(outputs, recorded, "nodus_0a1b2c3d_default_tj-1-g1-a1", node)
    artifact = {"registry": str(channel.ref), "digest": digest}

    cache = OutputsCache(tmp_path / "controller" / "ray-outputs")
    found = cache.files(artifact, ["results.json"], recorded, "job default/tj-1")
    assert found["results.json"].read_text() == '{"final": 0.8}\n'
    assert len(list((tmp_path / "controller" / "ray-outputs" / "blobs" / "sha256").iterdir())) == 1  # one file only
    copied = copy_verified(found, [("results.json", tmp_path / "out" / "r.json")], recorded, "job default/tj-1")
    assert copied[0].read_text() == '{"final": 0.8}\n'

    lying = {**recorded, "results.json": {**recorded["results.json"], "sha256": "0" * 64}}
    with pytest.raises(ConfigError, match=r"outputs/results.json in .* is not the file its node recorded"):
        cache.files(artifact, ["results.json"], lying, "job default/tj-1")
    (outputs / "results.json").write_text("changed after it was recorded\n")
    with pytest.raises(ConfigError, match=r"outputs/results.json changed after it was recorded"):
        channel.publish_outputs(outputs, recorded, "nodus_0a1b2c3d_default_tj-1-g1-a2", node)


@pytest.mark.podman
def test_the_grader_image_and_manifests_reach_the_node_and_podman_there(tmp_path: Path, local_registry: str) -> None:
    project = project_at(tmp_path / "project")
    project.files.ensure()
    layer = add_layer(project.files.images, {"hello.txt": Entry.file(b"graded here\n")})
    image = write_image(project.files.images, "reverse-words-1.0.0", [NewLayer(layer, "test layer")])
    manifest_digest = project.files.put_manifest(b'{"taskId": "t-1", "prompt": "a b"}\n')
    name = f"localhost/nodus-test/channel-{tmp_path.name.lower()}:1"
    environment = EnvironmentArtifact(
        project="default",
        name="reverse-words",
        version="1.0.0",
        grader_image=name,
        grader_image_digest=image.config_digest,
        image_digest=image.manifest_digest,
        manifests={"train/0": manifest_digest},
    )
    channel = RegistryChannel.parse(f"{local_registry}/nodus/ray")
    job = workload(environment=environment)
    node = node_store(tmp_path / "node" / "node-jobs")
    try:
        channel.fetch_inputs(job, channel.publish_inputs(job, project), node)
        assert node.files.manifest(manifest_digest) == b'{"taskId": "t-1", "prompt": "a b"}\n'
        inspect = ["podman", "--runtime", "runc", "--cgroup-manager", "cgroupfs", "image", "inspect"]
        found = subprocess.run([*inspect, "--format", "{{.Id}}", name], capture_output=True, text=True, check=False)
        assert found.stdout.strip() == image.config_digest.removeprefix("sha256:"), found.stderr

        other = EnvironmentArtifact(**{**environment.model_dump(), "grader_image_digest": "sha256:" + "2" * 64})
        with pytest.raises(ConfigError, match=r"has id sha256:.*, not sha256:2222"):
            channel.fetch_inputs(workload(environment=other), None, node)
    finally:
        rmi = ["podman", "--runtime", "runc", "--cgroup-manager", "cgroupfs", "rmi", "--force", name]
        subprocess.run(rmi, capture_output=True, check=False)


def test_a_teacher_and_a_data_revision_reach_the_node_too(tmp_path: Path, local_registry: str) -> None:
    project = project_at(tmp_path / "project")
    teacher = "hf://nodus/teacher@" + "b" * 40
    import_model(model_folder(project, teacher))
    data = project.volume_revision("default", "chats", 2)
    data.mkdir(parents=True)
    (data / "chats.jsonl").write_text('{"question": "a b", "answer": "b a"}\n')
    job = workload(
        teacher=ModelArtifact(uri=teacher),
        data=DataArtifact(volume=VolumeRevision(name="chats", revision=2), path="chats.jsonl"),
    )
    channel = RegistryChannel.parse(f"{local_registry}/nodus/ray")
    node = node_store(tmp_path / "node" / "node-jobs")
    channel.fetch_inputs(job, channel.publish_inputs(job, project), node)
    assert imported(node, teacher)
    there = node.volume_revision("default", "chats", 2) / "chats.jsonl"
    assert there.read_text() == '{"question": "a b", "answer": "b a"}\n'
    missing = workload(data=DataArtifact(volume=VolumeRevision(name="chats", revision=7)))
    with pytest.raises(ConfigError, match=r"job default/tj-1: data.volume: Volume chats has no revision 7"):
        channel.publish_inputs(missing, project)


def test_the_adapters_of_an_exported_model_reach_the_node_where_its_resolver_looks(
    tmp_path: Path, local_registry: str
) -> None:
    """A model that is an exported LoRA adapter over a base: the base and the adapter folder are both published,
    and the node's resolver hands the trainer the adapter (NODUS_INPUT_ADAPTERS) from its own store."""
    project = project_at(tmp_path / "project")
    import_model(model_folder(project, URI))
    exported = project.volume_revision("default", "sft-out", 1) / "adapter"
    exported.mkdir(parents=True)
    (exported / "adapter_config.json").write_text('{"peft_type": "LORA"}\n')
    adapters = (AdapterArtifact(volume=VolumeRevision(name="sft-out", revision=1), path="adapter"),)
    job = workload(model=ModelArtifact(uri=URI, adapters=adapters))
    channel = RegistryChannel.parse(f"{local_registry}/nodus/ray")
    node = node_store(tmp_path / "node" / "node-jobs")
    channel.fetch_inputs(job, channel.publish_inputs(job, project), node)
    there = node.volume_revision("default", "sft-out", 1) / "adapter"
    assert (there / "adapter_config.json").read_text() == '{"peft_type": "LORA"}\n'
    assert resolve(job, node).env[ADAPTERS_VARIABLE] == str(there)
