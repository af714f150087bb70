"""GRPO-LoRA end to end: `nodus apply` -> supervisor -> trainer (TRL + PEFT) -> sandboxed grader, on the tiny model.

Needs podman and the base image (the Environment is built), and the training stack; marked like the other
end-to-end tests. The project is the quickstart's (examples/quickstart) with one task planted in both splits
whose answer is a sentinel string no model could write: it must never reach the trainer.
"""

from __future__ import annotations

import json
import os
import signal
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner

from nodus.cli.main import cli

pytestmark = [pytest.mark.podman, pytest.mark.slow]

PLANTED = "plantedanswerqxvzkj"  # lower case: the reward compares in lower case
PLANT = f'''

_tasks = tasks


def tasks(split):
    # One task whose answer is a sentinel: the grader knows it, the trainer must never see it.
    planted = {{"prompt": PROMPT.format(word="qzx" + split), "answer": "{PLANTED}", "metadata": {{}}}}
    return [planted, *_tasks(split)]
'''
JOB = """apiVersion: nodus.dev/v1beta1
kind: TrainingJob
metadata: {{name: {name}}}
spec:
  runtime: nodus/grpo-lora
  model: {{uri: "hf://nodus/tiny-qwen3@{revision}"}}
  environment: {{name: reverse-words@1.0.0, trainTasks: 601, heldOutTasks: {held_out}, seed: 0}}
  evaluation: {{baseline: true, final: true}}
  parameters: {parameters}
"""
EVALUATE = """apiVersion: nodus.dev/v1beta1
kind: TrainingJob
metadata: {{name: score}}
spec:
  runtime: nodus/evaluate
  mode: Evaluate
  model: {{uri: "hf://nodus/tiny-qwen3@{revision}"}}
  environment: {{name: reverse-words@1.0.0, trainTasks: 1, heldOutTasks: 65, seed: 0}}
  evaluation: {{baseline: false, final: true}}
  parameters: {{maxTokens: 32, adapter: "{adapter}"}}
"""


def nodus(*args: str) -> tuple[int, str]:
    result = CliRunner().invoke(cli, list(args), catch_exceptions=False)
    return result.exit_code, result.output


@pytest.fixture
def project(built_quickstart: Callable[[str], Path], monkeypatch: pytest.MonkeyPatch) -> Path:
    root = built_quickstart(PLANT)
    monkeypatch.setenv("NODUS_RECORD_WIRE", "1")
    return root


def write_job(root: Path, name: str, revision: str, parameters: dict[str, Any], held_out: int = 65) -> None:
    text = JOB.format(name=name, revision=revision, held_out=held_out, parameters=json.dumps(parameters))
    (root / "job.yaml").write_text(text)


def job_dir(root: Path, name: str) -> Path:
    return root / ".nodus" / "jobs" / "default" / name


def evaluation_verdicts(folder: Path) -> dict[str, str]:
    """The last scored verdict per task of a job's Evaluation phase, from the platform's record."""
    verdicts: dict[str, str] = {}
    for line in (folder / "logs" / "gradings.jsonl").read_text().splitlines():
        record = json.loads(line)
        if record.get("phase") == "Evaluation" and record["verdict"] != "InfrastructureFailure":
            verdicts[record["taskId"]] = record["verdict"]
    return verdicts


def status(name: str) -> dict[str, Any]:
    code, output = nodus("get", "tj", name, "-o", "json")
    assert code == 0, output
    return dict(json.loads(output)["status"])


def test_grpo_learns_through_the_platform_and_never_sees_an_answer(project: Path, tiny_model: tuple[str, str]) -> None:
    parameters = {"steps": 40, "groupsPerStep": 8, "learningRate": 1e-3, "maxTokens": 32, "saveSteps": 20}
    write_job(project, "learn", tiny_model[1], parameters)
    code, output = nodus("apply", str(project), "--yes", "--wait", "--timeout", "12m")
    assert code == 0, output
    assert "TrainingJob/learn: Succeeded" in output, output

    folder = job_dir(project, "learn")
    rows = [json.loads(line) for line in (folder / "logs" / "events.jsonl").read_text().splitlines()]
    rewards = [row["metrics"]["reward"] for row in rows if row.get("metrics", {}).get("reward") is not None]
    assert len(rewards) == 40, rewards
    first, last = sum(rewards[:10]) / 10, sum(rewards[-10:]) / 10
    assert last > first, (first, last, rewards)

    # The comparison is the platform's, from its own record of the verdicts, on the same 65 held-out tasks.
    summary = status("learn")["summary"]
    assert summary["comparison"]["comparable"] is True, summary
    assert summary["finalPassRate"] > summary["baselinePassRate"], summary
    assert summary["baseline"]["tasks"] == summary["final"]["tasks"] == 65

    # The planted answer was graded (its task is in both splits) but never crossed the trainer's socket,
    # and the trainer wrote it nowhere: not in its state, its outputs or its log.
    gradings = (folder / "logs" / "gradings.jsonl").read_text()
    assert '"taskId"' in gradings
    wire = (folder / "logs" / "attempt-wire.jsonl").read_text()
    assert "qzxtrain" in wire and "qzxtest" in wire  # the planted prompts were served
    assert PLANTED not in wire
    for place in ("state", "outputs"):
        for path in (folder / place).rglob("*"):
            if path.is_file():
                assert PLANTED.encode() not in path.read_bytes(), path
    assert PLANTED not in (folder / "logs" / "trainer.log").read_text()

    outputs = json.loads((folder / "outputs" / "manifest.json").read_text())["files"]
    assert {
        "adapter/adapter_model.safetensors",
        "adapter/tokenizer.json",
        "results.json",
        "provenance.json",
        "curves.png",
    } <= set(outputs)
    provenance = json.loads((folder / "outputs" / "provenance.json").read_text())
    assert provenance["model"]["revision"] == f"hf://nodus/tiny-qwen3@{tiny_model[1]}"
    assert provenance["runtime"]["name"] == "nodus/grpo-lora" and provenance["runtime"]["digest"].startswith("sha256:")

    # nodus/evaluate with the trained adapter on the same held-out tasks scores what the final evaluation did
    # (greedy decoding, the same weights), graded again by the platform.
    (project / "score.yaml").write_text(EVALUATE.format(revision=tiny_model[1], adapter=folder / "outputs" / "adapter"))
    code, output = nodus("apply", str(project), "--yes", "--wait", "--timeout", "5m")
    assert code == 0 and "TrainingJob/score: Succeeded" in output, output
    # Task by task, where both runs got a score: an InfrastructureFailure (a grader that timed out on a busy
    # machine) is unscored on one side only, so the two pass rates can differ by their denominators.
    trained, again = evaluation_verdicts(folder), evaluation_verdicts(job_dir(project, "score"))
    both = sorted(set(trained) & set(again))
    assert len(both) >= 60, (trained, again)
    assert [again[task] for task in both] == [trained[task] for task in both]
    results = json.loads((job_dir(project, "score") / "outputs" / "results.json").read_text())
    assert results["runtime"] == "nodus/evaluate" and results["tasks"] == 65


def test_a_killed_supervisor_resumes_from_the_checkpoint_without_a_second_baseline(
    project: Path, tiny_model: tuple[str, str]
) -> None:
    parameters = {"steps": 14, "groupsPerStep": 4, "learningRate": 1e-3, "maxTokens": 32, "saveSteps": 2}
    write_job(project, "resume", tiny_model[1], parameters, held_out=24)
    code, output = nodus("apply", str(project), "--yes")
    assert code == 0, output

    folder = job_dir(project, "resume")
    deadline = time.monotonic() + 300
    while not list((folder / "state" / "checkpoints").glob("checkpoint-4")):
        assert time.monotonic() < deadline, (folder / "logs" / "trainer.log").read_text()
        time.sleep(0.5)
    supervisor = json.loads((folder / "supervisor.json").read_text())["pid"]
    os.kill(supervisor, signal.SIGKILL)
    deadline = time.monotonic() + 30
    while Path(f"/proc/{supervisor}").exists() and time.monotonic() < deadline:
        time.sleep(0.2)

    # Reconciling again (any command that reads status) finds the supervisor lost and starts attempt 2.
    code, output = nodus("wait", "tj/resume", "--for=jsonpath={.status.phase}=Succeeded", "--timeout=8m")
    assert code == 0, output
    assert status("resume")["attempt"] >= 2

    log = (folder / "logs" / "trainer.log").read_text()
    assert "resuming from checkpoint-" in log, log
    assert "baseline kept from attempt 1" in log, log
    records = [json.loads(line) for line in (folder / "logs" / "gradings.jsonl").read_text().splitlines()]
    baseline = [r for r in records if r.get("phase") == "Baseline"]
    assert len(baseline) == 24, len(baseline)  # graded once, by attempt 1
    assert status("resume")["summary"]["comparison"].get("reason") != "IncompleteEvents"
