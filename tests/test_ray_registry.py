"""The quickstart on a Ray worker that does not see the project's folder: inputs and outputs through a registry.

Issue 15's "inputs reach the node by digest; outputs come back with their sha256, so `nodus cp` and `exportTo` work
as they do locally", for a cluster without a shared filesystem (`executor.ray.registry`, no `sharedFilesystem`). A
registry runs inside the test cluster's network namespace on 127.0.0.1, where its nodes and the applying thread
reach it. The job's node session fills a store of its own (`node-store`, beside the node's jobs folder) from the
registry: the grader image (loaded into podman there), the task manifests and the model's files; it pushes the
outputs there, and the controller's host fetches them back for `nodus cp` and the export into a Volume, each file
checked against the sha256 the node recorded. Nothing of the node's is in the project's folder.

Needs Ray (the `nodus[ray]` extra), root for the namespace, podman and the base image, docker-registry, and the
training stack.
"""

from __future__ import annotations

import hashlib
import json
import shutil
from pathlib import Path
from typing import Any

import pytest

from nodus.builder.oci import tags_of
from nodus.reconciler.executors.ray.channel import node_store
from nodus.reconciler.model_cache import imported
from nodus.testing.module_project import build_project, nodus
from nodus.testing.ray_cluster import RayTestCluster
from nodus.testing.registry_server import installed, registry_server

pytestmark = [pytest.mark.ray, pytest.mark.podman, pytest.mark.registry, pytest.mark.slow]

QUICKSTART = Path(__file__).resolve().parents[1] / "examples" / "quickstart"
ADAPTER = "adapter/adapter_model.safetensors"
VOLUME = "apiVersion: nodus.dev/v1\nkind: Volume\nmetadata: {name: adapters}\nspec: {}\n"


def project_for(root: Path, base_reference: str, registry: str) -> Path:
    """A copy of the quickstart exporting to a Volume, its Environment built, on Ray through `registry`."""
    root.mkdir()
    for name in ("environment.yaml", "env/reverse_words.py"):
        (root / name).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy(QUICKSTART / name, root / name)
    job = (QUICKSTART / "trainingjob.yaml").read_text()
    (root / "trainingjob.yaml").write_text(job.rstrip("\n") + "\n  exportTo: {volume: adapters}\n")
    (root / "volume.yaml").write_text(VOLUME)
    (root / "nodus.lock").write_text("lockfileVersion: 1\nenvironments: {}\n")
    return build_project(root, base_reference)


def test_the_quickstart_runs_on_a_worker_whose_inputs_and_outputs_travel_through_a_registry(
    tmp_path: Path,
    base_reference: str,
    tiny_model: tuple[str, str],
    ray_cluster: RayTestCluster,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    if installed() is None:
        pytest.skip("docker-registry is not installed (apt-get install docker-registry)")
    monkeypatch.setenv("HF_HUB_CACHE", tiny_model[0])
    monkeypatch.setenv("RAY_AUTH_TOKEN", ray_cluster.token)
    node_jobs = tmp_path / "node" / "node-jobs"  # the node's own folders, as a worker elsewhere would have
    monkeypatch.setenv("NODUS_NODE_JOBS", str(node_jobs))
    with registry_server(tmp_path / "registry", netns=ray_cluster.netns) as address:
        registry = f"{address}/nodus/ray"
        root = project_for(tmp_path / "project", base_reference, registry)
        (root / "nodus.yaml").write_text(
            f"executor: {{ray: {{address: {ray_cluster.dashboard_url}, registry: {registry}}}}}\n"
        )
        monkeypatch.chdir(root)
        with ray_cluster.inside():
            code, output = nodus("apply", ".", "--build", "--yes", "--wait", "--timeout", "10m")
            assert code == 0 and "TrainingJob/quickstart: Succeeded" in output, output
            job: dict[str, Any] = json.loads(nodus("get", "tj", "quickstart", "-o", "json")[1])
            environment = json.loads(nodus("get", "env", "reverse-words", "-o", "json")[1])["status"]
            volume = json.loads(nodus("get", "volume", "adapters", "-o", "json")[1])["status"]
            copied = tmp_path / "adapter.safetensors"
            cp_code, cp_output = nodus("cp", f"tj/quickstart:outputs/{ADAPTER}", str(copied))
    status = job["status"]

    # Graded on the node in the container sandbox, with a comparable before-and-after result.
    assert {c["type"]: c["status"] for c in status["conditions"]}.get("ContainerSandbox") == "True", status
    assert status["summary"]["comparison"]["comparable"] is True, status["summary"]
    # The node's inputs came from the registry into its own store; none of its folders are in the project's.
    node = node_store(node_jobs)
    assert imported(node, job["spec"]["model"]["uri"]), job["spec"]["model"]
    on_node = {path.name for path in node.files.manifests.iterdir()}
    assert {digest.removeprefix("sha256:") for digest in environment["manifests"].values()} <= on_node
    assert tags_of(node.files.images, environment["image"]), "the grader image was not pulled into the node's store"
    assert not (root / ".nodus" / "ray-node-jobs").exists()
    # The adapter came back through the registry, checked against the sha256 its node recorded.
    recorded = {entry["name"]: entry["sha256"] for entry in status["outputs"]}
    assert cp_code == 0 and "verified" in cp_output, cp_output
    assert hashlib.sha256(copied.read_bytes()).hexdigest() == recorded[ADAPTER]
    # exportTo committed the same files as a Volume revision.
    assert status["export"]["phase"] == "Exported", status.get("export")
    exported = Path(volume["path"]) / ADAPTER
    assert hashlib.sha256(exported.read_bytes()).hexdigest() == recorded[ADAPTER]
