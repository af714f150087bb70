"""The quickstart through the Ray executor (issue 15's first acceptance point): the same TrainingJob applied once
on the local executor and once on a Ray cluster (the root conftest's `ray_cluster`: a head without CPUs and two
workers of made-up GPU types, in a network namespace of its own, with token auth). Through Ray it runs on a
worker, is graded there in the container sandbox, and ends with the same summary as locally; `nodus cp` of its
adapter checks the sha256 its node recorded, and the file is the one `status.outputs` names.

The cluster and this project share one filesystem (`executor.ray.sharedFilesystem: true`): the node session reads
the grader image, manifests and model from the project's store, and keeps its job folder beside it.

Needs Ray (the `nodus[ray]` extra), root for the namespace, podman and the base image, and the training stack.
"""

from __future__ import annotations

import hashlib
import json
import shutil
from pathlib import Path
from typing import Any

import pytest

from nodus.reconciler.executors.ray.cluster import dashboard_nodes
from nodus.testing.module_project import build_project, nodus
from nodus.testing.ray_cluster import RayTestCluster

pytestmark = [pytest.mark.ray, pytest.mark.podman, pytest.mark.slow]

QUICKSTART = Path(__file__).resolve().parents[1] / "examples" / "quickstart"
ADAPTER = "adapter/adapter_model.safetensors"


def quickstart(root: Path, base_reference: str, settings: str | None) -> Path:
    """A copy of the quickstart at `root`, its Environment built against the session's base image, with
    `settings` as its nodus.yaml."""
    root.mkdir()
    for name in ("environment.yaml", "env/reverse_words.py", "trainingjob.yaml"):
        (root / name).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy(QUICKSTART / name, root / name)
    (root / "nodus.lock").write_text("lockfileVersion: 1\nenvironments: {}\n")
    if settings is not None:
        (root / "nodus.yaml").write_text(settings)
    return build_project(root, base_reference)


def applied(root: Path, monkeypatch: pytest.MonkeyPatch) -> dict[str, Any]:
    """`nodus apply --build --wait` of the project at `root`; the TrainingJob's status after it."""
    monkeypatch.chdir(root)
    code, output = nodus("apply", ".", "--build", "--yes", "--wait", "--timeout", "10m")
    assert code == 0 and "TrainingJob/quickstart: Succeeded" in output, output
    code, output = nodus("get", "tj", "quickstart", "-o", "json")
    assert code == 0, output
    status: dict[str, Any] = json.loads(output)["status"]
    return status


def test_the_quickstart_runs_on_a_ray_worker_graded_there_with_the_local_result(
    tmp_path: Path,
    base_reference: str,
    tiny_model: tuple[str, str],
    ray_cluster: RayTestCluster,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("HF_HUB_CACHE", tiny_model[0])
    local = applied(quickstart(tmp_path / "local", base_reference, None), monkeypatch)

    monkeypatch.setenv("RAY_AUTH_TOKEN", ray_cluster.token)
    settings = f"executor: {{ray: {{address: {ray_cluster.dashboard_url}, sharedFilesystem: true}}}}\n"
    project = quickstart(tmp_path / "on-ray", base_reference, settings)
    with ray_cluster.inside():
        status = applied(project, monkeypatch)
        from ray.job_submission import JobSubmissionClient

        client = JobSubmissionClient(ray_cluster.dashboard_url, headers=ray_cluster.headers())
        # This project's runs only: other tests on the shared cluster run a `quickstart` of their own.
        owner = json.loads((project / ".nodus" / "jobs" / "ray-owner.json").read_text())["owner"]
        runs = [job for job in client.list_jobs() if (job.submission_id or "").startswith(f"nodus_{owner}_")]
        nodes = dashboard_nodes(ray_cluster.dashboard_url, ray_cluster.token)
        copied = tmp_path / "adapter.safetensors"
        code, output = nodus("cp", f"tj/quickstart:outputs/{ADAPTER}", str(copied))
    # It ran on a worker (the head offers no CPU for the session's reservation), once.
    workers = {node["node_id"] for node in nodes if not node.get("is_head_node")}
    assert len(runs) == 1 and runs[0].driver_node_id in workers, [(r.submission_id, r.driver_node_id) for r in runs]
    # Graded on that node in the container sandbox, and the same result as the local run, task for task.
    assert {c["type"]: c["status"] for c in status["conditions"]}.get("ContainerSandbox") == "True", status
    for side in ("baseline", "final", "comparison"):
        assert status["summary"][side] == local["summary"][side], side
    assert status["summary"]["comparison"]["comparable"] is True
    # The adapter came back checked against the sha256 its node recorded, which status.outputs shows too.
    assert code == 0 and "verified" in output, output
    recorded = {entry["name"]: entry["sha256"] for entry in status["outputs"]}
    assert hashlib.sha256(copied.read_bytes()).hexdigest() == recorded[ADAPTER]
