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
from pathlib import Path

import pytest

from nodus.testing.module_project import graded_pairs, nodus, training_project

pytestmark = [pytest.mark.podman, pytest.mark.slow]

GUESS_AGAIN = Path(__file__).resolve().parents[1] / "runtimes" / "tests" / "envs" / "guess_again.py"
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


@pytest.fixture
def project(tmp_path: Path, base_reference: str, tiny_model: tuple[str, str], monkeypatch: pytest.MonkeyPatch) -> Path:
    return training_project(
        tmp_path / "project", GUESS_AGAIN, "guess-again", base_reference, JOB, tiny_model, monkeypatch
    )


def test_episodes_go_turn_by_turn_through_the_sandboxed_grader(project: Path) -> None:
    code, output = nodus("apply", str(project), "--yes", "--wait", "--timeout", "10m")
    assert code == 0 and "TrainingJob/episodes: Succeeded" in output, output
    pairs = graded_pairs(project, "episodes")
    training = pairs["Training"]
    turns = [len(item["turns"]) for item, _ in training]
    # Every reply was graded as part of an episode; some went on after "Try again.", none past maxTurns.
    assert turns and all(1 <= count <= 3 for count in turns), turns
    assert max(turns) >= 2, turns
    replies = [verdict.get("next") for _, verdict in training]
    assert "Try again." in replies  # the grader's reply, from its container
    # Held-out episodes before and after, on the same 4 tasks, scored by the platform.
    for phase in ("Baseline", "Evaluation"):
        assert pairs[phase] and all("turns" in item for item, _ in pairs[phase]), phase
    status = json.loads(nodus("get", "tj", "episodes", "-o", "json")[1])["status"]
    summary = status["summary"]
    assert summary["baseline"]["tasks"] == 4 and summary["final"]["tasks"] == 4, summary
    comparison = summary["comparison"]
    assert comparison.get("tasks") == 4 or comparison["reason"] in ("NonePassed", "AllPassed"), comparison
