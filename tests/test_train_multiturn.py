"""Multi-turn GRPO end to end: `nodus apply` -> supervisor -> trainer -> sandboxed grader, episode by episode.

The Environment is `runtimes/tests/envs/guess_again.py` (reverse a word; a wrong reply gets "Try again." up to
three replies), built into a real grader image with nodus-build, so each turn's reply comes from the grader in
its container, not from a stand-in: the runtimes' own test plays the same episodes against a fake attempt API.
The tiny model (warmed up on reverse-words) gets some words wrong, so some episodes go on past the first turn.

Needs podman and the base image (the Environment is built) and the training stack; marked like
tests/test_train_grpo.py.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner

from nodus.builder.cli import main as nodus_build
from nodus.cli.main import cli

pytestmark = [pytest.mark.podman, pytest.mark.slow]

GUESS_AGAIN = Path(__file__).resolve().parents[1] / "runtimes" / "tests" / "envs" / "guess_again.py"
ENVIRONMENT = """apiVersion: nodus.dev/v1
kind: Environment
metadata: {name: guess-again}
spec:
  version: 1.0.0
  package: {path: ., loader: guess_again}
  modes: [Train, Evaluate]
  rewardType: Binary
  grading: {maxParallel: 2, timeout: 30s}
"""
JOB = """apiVersion: nodus.dev/v1beta1
kind: TrainingJob
metadata: {{name: episodes}}
spec:
  runtime: nodus/grpo-lora
  model: {{uri: "hf://nodus/tiny-qwen3@{revision}"}}
  environment: {{name: guess-again@1.0.0, trainTasks: 12, heldOutTasks: 4, seed: 0}}
  evaluation: {{baseline: true, final: true, minComparisonTasks: 4}}
  parameters: {{steps: 3, groupsPerStep: 2, groupSize: 4, maxTokens: 16, maxTurns: 3, maxEpisodeTokens: 256}}
"""


def nodus(*args: str) -> tuple[int, str]:
    result = CliRunner().invoke(cli, list(args), catch_exceptions=False)
    return result.exit_code, result.output


@pytest.fixture
def project(tmp_path: Path, base_reference: str, tiny_model: tuple[str, str], monkeypatch: pytest.MonkeyPatch) -> Path:
    root = tmp_path / "project"
    root.mkdir()
    shutil.copy(GUESS_AGAIN, root / "guess_again.py")
    (root / "environment.yaml").write_text(ENVIRONMENT)
    flags = ["--network", "none", "--base", base_reference, "--lock", str(root / "nodus.lock")]
    with pytest.raises(SystemExit) as exited:
        nodus_build([str(root), *flags, "--state-dir", str(root / ".nodus"), "--json"])
    assert exited.value.code == 0
    (root / "job.yaml").write_text(JOB.format(revision=tiny_model[1]))
    monkeypatch.setenv("HF_HUB_CACHE", tiny_model[0])
    monkeypatch.setenv("NODUS_RECORD_WIRE", "1")
    monkeypatch.chdir(root)
    return root


def test_episodes_go_turn_by_turn_through_the_sandboxed_grader(project: Path) -> None:
    code, output = nodus("apply", str(project), "--yes", "--wait", "--timeout", "10m")
    assert code == 0 and "TrainingJob/episodes: Succeeded" in output, output
    wire = project / ".nodus" / "jobs" / "default" / "episodes" / "logs" / "attempt-wire.jsonl"
    gradings: list[dict[str, Any]] = [
        record for line in wire.read_text().splitlines() if (record := json.loads(line))["path"].endswith("/gradings")
    ]
    by_phase: dict[str, list[dict[str, Any]]] = {}
    for record in gradings:
        by_phase.setdefault(record["request"].get("phase", "Training"), []).append(record)
    training = by_phase["Training"]
    turns = [len(item["turns"]) for record in training for item in record["request"]["items"]]
    # Every reply was graded as part of an episode; some went on after "Try again.", none past maxTurns.
    assert turns and all(1 <= count <= 3 for count in turns), turns
    assert max(turns) >= 2, turns
    replies = [v.get("next") for record in training for v in record["response"]["verdicts"]]
    assert "Try again." in replies  # the grader's reply, from its container
    # Held-out episodes before and after, on the same 4 tasks, scored by the platform.
    for phase in ("Baseline", "Evaluation"):
        items = [item for record in by_phase[phase] for item in record["request"]["items"]]
        assert items and all("turns" in item for item in items), phase
    status = json.loads(nodus("get", "tj", "episodes", "-o", "json")[1])["status"]
    summary = status["summary"]
    assert summary["baseline"]["tasks"] == 4 and summary["final"]["tasks"] == 4, summary
    comparison = summary["comparison"]
    assert comparison.get("tasks") == 4 or comparison["reason"] in ("NonePassed", "AllPassed"), comparison
