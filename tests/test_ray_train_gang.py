"""A TrainingJob of two nodes through the Ray executor (issue 15, "Gangs": TrainingJobs with `resources.nodes > 1`):
the managed `nodus/sft` runtime on the tiny model, its data uploaded to a Volume with `nodus cp`, applied with
`resources: {nodes: 2}` on the root conftest's `ray_cluster` (a head without CPUs and two one-CPU workers, in a
network namespace of its own, token auth).

Every member runs a node session of its own (`executors/ray/gang_sessions.py`): its supervisor, attempt API and
state folder, and the trainer with the gang's torch variables, so the two trainers form one data-parallel gloo
group across the two workers. Rank 0's session is the run's: its summary, events and outputs; both ranks' trainer
lines are in `nodus logs`. The run learns (held-out loss falls, measured across both ranks), its adapter comes back
with `nodus cp` checked against the sha256 rank 0's node recorded, and the status has the gang's topology, members
and one attempt per rank.

Needs Ray (the `nodus[ray]` extra), root for the namespace, and the training stack.
"""

from __future__ import annotations

import importlib.util
import json
import re
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from nodus.reconciler.executors.ray import cluster, netns
from nodus.testing.module_project import nodus
from nodus.testing.ray_cluster import GANG_OF_TWO_ASSEMBLED, RayTestCluster, kill_node, spare_worker_cluster

pytestmark = [pytest.mark.ray, pytest.mark.slow]

JOB = """\
apiVersion: nodus.dev/v1beta1
kind: TrainingJob
metadata: {{name: sft-2-nodes}}
spec:
  runtime: nodus/sft
  model: {{uri: "{model}"}}
  data: {{volume: chats, path: chats.jsonl, format: JSONL, columns: {{prompt: question, completion: answer}}}}
  parameters: {{steps: {steps}, learningRate: 1.0e-2, batchSize: 4, saveSteps: {save}, lora: {{r: 8, alpha: 16}}}}
  resources: {{nodes: 2}}
  recovery: {{maxAttempts: 1}}
"""
REVERSE_WORDS = Path(__file__).resolve().parents[1] / "examples" / "quickstart" / "env" / "reverse_words.py"
PROMPT = "Spell the word backwards inside <answer></answer>.\n\nWord: {word}"
VOLUME = "apiVersion: nodus.dev/v1\nkind: Volume\nmetadata: {name: chats}\nspec: {accessMode: ReadWriteOnce}\n"


def chats(count: int) -> str:
    """JSONL of `count` chats of the quickstart's skill (a made-up word, spelt backwards), as the runtimes test has
    them (tests/test_train_runtimes.py)."""
    spec = importlib.util.spec_from_file_location("reverse_words_for_gang", REVERSE_WORDS)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    words = [str(task["answer"])[::-1] for task in module.tasks("train")][:count]
    rows = [{"question": PROMPT.format(word=w), "answer": f"<answer>{w[::-1]}</answer>"} for w in words]
    return "".join(json.dumps(row) + "\n" for row in rows)


def project_on(root: Path, dashboard_url: str, revision: str, steps: int, save: int) -> Path:
    """An SFT project at `root` on the cluster at `dashboard_url`: a Volume `chats` to upload to, the job."""
    (root / "volumes").mkdir(parents=True)
    (root / "jobs").mkdir()
    (root / "nodus.lock").write_text("lockfileVersion: 1\n")
    (root / "nodus.yaml").write_text(f"executor: {{ray: {{address: {dashboard_url}, sharedFilesystem: true}}}}\n")
    (root / "volumes" / "chats.yaml").write_text(VOLUME)
    job = JOB.format(model=f"hf://nodus/tiny-qwen3@{revision}", steps=steps, save=save)
    (root / "jobs" / "sft.yaml").write_text(job)
    return root


def test_an_sft_trainingjob_trains_data_parallel_on_two_ray_nodes(
    tmp_path: Path, tiny_model: tuple[str, str], ray_cluster: RayTestCluster, monkeypatch: pytest.MonkeyPatch
) -> None:
    cache_folder, revision = tiny_model
    monkeypatch.setenv("HF_HUB_CACHE", cache_folder)
    monkeypatch.delenv("NODUS_HOME", raising=False)
    monkeypatch.delenv("NODUS_STATE", raising=False)
    project = project_on(tmp_path / "sft-gang", ray_cluster.dashboard_url, revision, steps=8, save=8)
    (tmp_path / "chats.jsonl").write_text(chats(160))
    monkeypatch.setenv("RAY_AUTH_TOKEN", ray_cluster.token)
    monkeypatch.chdir(project)
    with ray_cluster.inside():
        code, output = nodus("apply", "volumes", "--yes")
        assert code == 0, output
        code, output = nodus("cp", str(tmp_path / "chats.jsonl"), "vol/chats:chats.jsonl")
        assert code == 0, output
        code, applied = nodus("apply", "-f", "volumes", "-f", "jobs", "--yes", "--wait", "--timeout", "8m")
        _, logs = nodus("logs", "tj/sft-2-nodes")
        _, stored = nodus("get", "tj", "sft-2-nodes", "-o", "json")
        results_file = tmp_path / "results.json"
        copied = nodus("cp", "tj/sft-2-nodes:outputs/results.json", str(results_file))
        adapter = nodus("cp", "tj/sft-2-nodes:outputs/adapter/adapter_model.safetensors", str(tmp_path / "a.st"))
    assert code == 0 and "TrainingJob/sft-2-nodes: Succeeded" in applied, applied + logs[-6000:]
    # Both ranks trained, as one data-parallel group of two processes.
    for rank in (0, 1):
        assert any(
            line.startswith(f"[rank {rank}] ") and "2 processes, data-parallel" in line for line in logs.splitlines()
        ), logs[-6000:]
    assert "[gang] epoch 1 assembled: rank 0 on node" in logs, logs[-6000:]
    # It learned, measured on held-out rows (the evaluation gathers both ranks' losses).
    assert copied[0] == 0 and adapter[0] == 0 and "verified" in adapter[1], (copied, adapter)
    results: dict[str, Any] = json.loads(results_file.read_text())
    held = results["heldOut"]
    before, after = held["before"]["heldOutLoss"], held["after"]["heldOutLoss"]
    print(f"\nnodus/sft on 2 Ray nodes: held-out loss {before:.3f} -> {after:.3f}")
    assert after < before and held["improved"], held
    # The run's status is rank 0's summary under the gang's shape, members and attempts.
    status = json.loads(stored)["status"]
    assert status["topology"] == {"nodes": 2, "gpusPerNode": 0, "totalGPUs": 0}, status
    assert [member["rank"] for member in status["gang"]["members"]] == [0, 1], status
    attempts = status["gang"]["attempts"]
    assert sorted((a["rank"], a["phase"]) for a in attempts) == [(0, "Succeeded"), (1, "Succeeded")], attempts
    assert {a["node"] for a in attempts} and len({a["node"] for a in attempts}) == 2, attempts


# --- a node lost mid-run ------------------------------------------------------------------------------------------

STEP = re.compile(r"^\[rank 0\] .*step (\d+)/", re.MULTILINE)
ASSEMBLED = GANG_OF_TWO_ASSEMBLED


@pytest.fixture
def three_workers(tmp_path: Path) -> Iterator[cluster.ClusterRecord]:
    """A cluster of its own: a head and three one-CPU workers, so a lost rank has a spare node to go to."""
    with spare_worker_cluster(tmp_path / "cluster") as record:
        yield record


def ray_log(record: cluster.ClusterRecord) -> str:
    from ray.job_submission import JobSubmissionClient

    client = JobSubmissionClient(record.dashboard_url, headers={"Authorization": f"Bearer {record.token()}"})
    runs = sorted(client.list_jobs(), key=lambda job: job.start_time or 0)
    return client.get_job_logs(runs[-1].submission_id) if runs else ""


def wait_for(record: cluster.ClusterRecord, pattern: re.Pattern[str], after: int = 0) -> tuple[re.Match[str], str]:
    deadline = time.monotonic() + 300
    while True:
        text = ray_log(record)
        found = pattern.search(text, after)
        if found is not None:
            return found, text
        assert time.monotonic() < deadline, f"no {pattern.pattern!r} in the log:\n{text[-6000:]}"
        time.sleep(1)


def latest_step(record: cluster.ClusterRecord, after: int) -> int:
    """The highest step rank 0 logged after `after` (0 before its first)."""
    return max((int(found.group(1)) for found in STEP.finditer(ray_log(record), after)), default=0)


def test_a_lost_node_restarts_the_trainingjob_gang_and_every_rank_starts_over_together(
    tmp_path: Path, tiny_model: tuple[str, str], three_workers: cluster.ClusterRecord, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Rank 1's node is killed after both ranks saved a checkpoint. The gang restarts at epoch 2 with rank 1 on the
    spare node, which holds no checkpoint: rank 0 does not resume from its own alone (the two would train different
    steps and wait for each other forever); both start over together and the run succeeds."""
    record = three_workers
    cache_folder, revision = tiny_model
    monkeypatch.setenv("HF_HUB_CACHE", cache_folder)
    monkeypatch.delenv("NODUS_HOME", raising=False)
    monkeypatch.delenv("NODUS_STATE", raising=False)
    monkeypatch.setenv("RAY_AUTH_TOKEN", record.token())
    # 60 steps of about a second: time to see step 5 in the log and kill the node well before the end.
    project = project_on(tmp_path / "sft-gang", record.dashboard_url, revision, steps=60, save=3)
    (tmp_path / "chats.jsonl").write_text(chats(160))
    monkeypatch.chdir(project)
    with netns.entered(record.netns):
        assert nodus("apply", "volumes", "--yes")[0] == 0
        assert nodus("cp", str(tmp_path / "chats.jsonl"), "vol/chats:chats.jsonl")[0] == 0
        code, output = nodus("apply", "-f", "volumes", "-f", "jobs", "--yes")
        assert code == 0, output
        first, _ = wait_for(record, ASSEMBLED)
        deadline = time.monotonic() + 300
        while latest_step(record, first.end()) < 5:  # checkpoint-3 saved on both nodes
            assert time.monotonic() < deadline, ray_log(record)[-6000:]
            time.sleep(0.5)
        kill_node(record, first.group(3))
        second, _ = wait_for(record, ASSEMBLED, first.end())
        code, applied = nodus("apply", "-f", "volumes", "-f", "jobs", "--yes", "--wait", "--timeout", "8m")
        _, logs = nodus("logs", "tj/sft-2-nodes")
        _, stored = nodus("get", "tj", "sft-2-nodes", "-o", "json")
        copied = nodus("cp", "tj/sft-2-nodes:outputs/results.json", str(tmp_path / "results.json"))
    assert code == 0 and "TrainingJob/sft-2-nodes: Succeeded" in applied, applied + logs[-8000:]
    assert second.group(1) == "2" and second.group(2) == first.group(2) and second.group(3) != first.group(3), logs
    assert "[rank 0] " in logs and "all start over" in logs, logs[-8000:]
    status = json.loads(stored)["status"]
    assert (status["gang"]["epoch"], status["gang"]["restarts"]) == (2, 1), status["gang"]
    # Trained all 60 steps in epoch 2 from the start, and learned.
    assert copied[0] == 0, copied
    held = json.loads((tmp_path / "results.json").read_text())["heldOut"]
    assert held["after"]["heldOutLoss"] < held["before"]["heldOutLoss"], held
