"""A multi-turn game trained on the tiny model: nodus/higher-lower built with nodus-build, trained for two GRPO
steps through `nodus apply`, each wrong guess answered Higher. or Lower. by the grader in its container, with
the platform's baseline/final comparison.

The tiny model (the default Recipe) is warmed up on the game's own gold games (`gold_turns`: a binary
search), so it plays by the feedback and its first guess is right only when the secret is 8: most episodes
go on past the first turn, and a game it wins after the first guess shows it read the feedback.

Needs podman and the base image (the Environment is built) and the training stack; marked like
tests/test_train_multiturn.py.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path

import pytest

from nodus.testing.module_project import graded_pairs, nodus, training_project

pytestmark = [pytest.mark.podman, pytest.mark.slow]

FOLDER = Path(__file__).resolve().parents[1] / "catalog" / "higher-lower"
MODULE = "higher_lower_env.py"
# Up to four guesses, the game's own limit; a guess is about 20 tokens, the prompt about 170. 16 held-out games
# (the comparison's default minimum) with seed 0 include two whose secret is 8, which the warmed-up model's
# first guess wins, so the baseline is above zero and the comparison is computed.
JOB = """apiVersion: nodus.dev/v1beta1
kind: TrainingJob
metadata: {{name: game}}
spec:
  runtime: nodus/grpo-lora
  model: {{uri: "hf://nodus/tiny-qwen3@{revision}"}}
  environment: {{name: higher-lower@1.0.0, trainTasks: 8, heldOutTasks: 16, seed: 0}}
  evaluation: {{baseline: true, final: true}}
  parameters: {{steps: 2, groupsPerStep: 2, groupSize: 4, maxTokens: 24, maxTurns: 4, maxEpisodeTokens: 480}}
"""


@pytest.fixture(scope="session")
def game_model(warmed_model: Callable[..., tuple[str, str]]) -> tuple[str, str]:
    """(HF_HUB_CACHE, revision) of the tiny model warmed up on higher-lower's gold binary search."""
    return warmed_model(FOLDER / MODULE, "game")


@pytest.fixture
def project(tmp_path: Path, base_reference: str, game_model: tuple[str, str], monkeypatch: pytest.MonkeyPatch) -> Path:
    return training_project(
        tmp_path / "project", FOLDER / MODULE, "higher-lower", base_reference, JOB, game_model, monkeypatch
    )


def test_games_go_on_past_the_first_guess_with_the_graders_feedback(project: Path) -> None:
    code, output = nodus("apply", str(project), "--yes", "--wait", "--timeout", "10m")
    assert code == 0 and "TrainingJob/game: Succeeded" in output, output
    pairs = graded_pairs(project, "game")
    training = pairs["Training"]
    turns = [len(item["turns"]) for item, _ in training]
    assert turns and all(1 <= count <= 4 for count in turns), turns
    assert max(turns) >= 2, turns  # episodes went past the first guess
    feedback = {v.get("next") for _, v in training if not v["done"]}
    assert feedback and feedback <= {"Higher.", "Lower."}, feedback  # the grader's replies, from its container
    # Held-out games before and after, on the same 16 tasks, played turn by turn.
    for phase in ("Baseline", "Evaluation"):
        assert pairs[phase] and all("turns" in item for item, _ in pairs[phase]), phase
        assert max(len(item["turns"]) for item, _ in pairs[phase]) >= 2, phase
    status = json.loads(nodus("get", "tj", "game", "-o", "json")[1])["status"]
    summary = status["summary"]
    assert summary["baseline"]["tasks"] == 16 and summary["final"]["tasks"] == 16, summary
    assert summary["baseline"]["passed"] >= 1, summary  # a nonzero baseline: GRPO has something to work with
    # The platform's comparison: a change in points on the same 16 games (not all won on both sides).
    comparison = summary["comparison"]
    assert comparison.get("comparable") is True and comparison["tasks"] == 16, comparison
