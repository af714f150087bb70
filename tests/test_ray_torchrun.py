"""A two-node torchrun Job through the Ray executor (issue 15's second acceptance point): the seeds' `train.py`
(examples/multi-node/train.py, DDP on gloo) applied as a Job with `launcher: Torchrun` and `distributed.nodes: 2`
on the root conftest's `ray_cluster` (a head without CPUs and two one-CPU workers, in a network namespace of its own,
token auth). torchrun reads its rendezvous from the PET_* variables every rank gets, and rank 0 prints
`world_size=2` once both nodes joined; `nodus logs` shows it from the Ray job's log, and the Job's status has the
gang's `topology` and where each rank ran.

Needs Ray (the `nodus[ray]` extra), root for the namespace, and torch.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from nodus.testing.module_project import nodus
from nodus.testing.ray_cluster import RayTestCluster

pytestmark = [pytest.mark.ray, pytest.mark.slow]

TRAIN = Path(__file__).resolve().parents[1] / "examples" / "multi-node" / "train.py"
JOB = """\
apiVersion: nodus.dev/v1beta1
kind: Job
metadata:
  name: torchrun-2-node
spec:
  command: [torchrun, train.py]
  launcher: Torchrun
  distributed: {nodes: 2, startupTimeout: 5m}
"""


def test_a_two_node_torchrun_job_prints_world_size_2_from_rank_0(
    tmp_path: Path, ray_cluster: RayTestCluster, monkeypatch: pytest.MonkeyPatch
) -> None:
    project = tmp_path / "torchrun"
    project.mkdir()
    shutil.copy(TRAIN, project / "train.py")
    (project / "job.yaml").write_text(JOB)
    (project / "nodus.lock").write_text("lockfileVersion: 1\nenvironments: {}\n")
    (project / "nodus.yaml").write_text(
        f"executor: {{ray: {{address: {ray_cluster.dashboard_url}, sharedFilesystem: true}}}}\n"
    )
    monkeypatch.setenv("RAY_AUTH_TOKEN", ray_cluster.token)
    monkeypatch.chdir(project)
    with ray_cluster.inside():
        code, applied = nodus("apply", ".", "--yes", "--wait", "--timeout", "5m")
        _, logs = nodus("logs", "job/torchrun-2-node")
        _, stored = nodus("get", "job", "torchrun-2-node", "-o", "json")
    assert code == 0 and "Job/torchrun-2-node: Succeeded" in applied, applied + logs
    rank0 = [line for line in logs.splitlines() if line.startswith("[rank 0] world_size=")]
    assert rank0 and rank0[0].split()[2:5] == ["world_size=2", "node=0", "transport=private"], logs
    assert not any(line.startswith("[rank 1] world_size=") for line in logs.splitlines()), logs
    assert "[gang] epoch 1 assembled: rank 0 on node" in logs and "network check passed" in logs, logs
    status = json.loads(stored)["status"]
    assert status["topology"] == {"nodes": 2, "gpusPerNode": 0, "totalGPUs": 0}, status
    assert (status["gang"]["epoch"], status["gang"]["restarts"]) == (1, 0), status
    assert [member["rank"] for member in status["gang"]["members"]] == [0, 1], status
