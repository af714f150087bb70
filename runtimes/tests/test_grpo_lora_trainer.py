"""The GRPO-LoRA trainer as a process against a stand-in attempt API (no podman): stages, an InfrastructureFailure
left out of its group instead of scored 0, and multi-turn episodes that learn only from the model's tokens.

Slow (the tiny model is built once per session, about 30 s; each run a few seconds). The real path (supervisor,
sandboxed graders) is tests/test_train_grpo.py.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from fake_platform import FakePlatform

pytestmark = pytest.mark.slow

REPO = Path(__file__).resolve().parents[2]
REVERSE_WORDS = REPO / "examples" / "quickstart" / "env" / "reverse_words.py"
GUESS_AGAIN = Path(__file__).parent / "envs" / "guess_again.py"


def run_trainer(root: Path, model: Path, module: Path, parameters: dict[str, Any], **platform: Any) -> FakePlatform:
    (root / "input").mkdir(parents=True)
    params = {
        "parameters": {"groupSize": 4, "groupsPerStep": 2, "maxTokens": 32, "learningRate": 1e-3, **parameters},
        "evaluation": {"baseline": True, "final": True},
        "modelRevision": "hf://nodus/tiny-qwen3@test",
        "runtime": {"name": "nodus/grpo-lora", "digest": "sha256:test"},
    }
    (root / "input" / "params.json").write_text(json.dumps(params))
    socket = root / "api.sock"
    with FakePlatform(socket, module, **platform) as fake:
        env = {
            **os.environ,
            "NODUS_INPUT_PARAMS": str(root / "input"),
            "NODUS_INPUT_MODEL": str(model),
            "NODUS_STATE_DIR": str(root / "state"),
            "NODUS_OUTPUT_DIR": str(root / "outputs"),
            "NODUS_ATTEMPT_API": str(socket),
            "NODUS_JOB_NAME": "test",
        }
        result = subprocess.run(
            [sys.executable, "-m", "nodus.runtimes.grpo_lora"], env=env, capture_output=True, text=True, timeout=600
        )
        assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    return fake


@pytest.fixture
def model(tiny_model: tuple[str, str]) -> Path:
    cache, revision = tiny_model
    return Path(cache) / "models--nodus--tiny-qwen3" / "snapshots" / revision


def test_an_infrastructure_failure_is_left_out_not_scored_zero(tmp_path: Path, model: Path) -> None:
    fake = run_trainer(tmp_path, model, REVERSE_WORDS, {"steps": 3}, train=40, test=16, fail_every=7)
    stages = [event["stage"] for event in fake.events if "stage" in event]
    assert stages[0] == "Baseline" and "Training" in stages and stages[-1] == "Exporting"
    assert any(g["verdict"] == "InfrastructureFailure" for g in fake.gradings)
    outputs = json.loads((tmp_path / "outputs" / "manifest.json").read_text())["files"]
    assert "adapter/adapter_model.safetensors" in outputs and "curves.png" in outputs
    # The trainer's reward for a failed grading is None (no score), so TRL's mean reward per step is the mean
    # over the scored replies only; with every fourth reply failing a 0 would drag it down visibly.
    rewards = [event["metrics"]["reward"] for event in fake.events if "reward" in event.get("metrics", {})]
    assert len(rewards) == 3 and all(0.0 <= r <= 1.0 for r in rewards)


def test_multi_turn_episodes_run_turn_by_turn(tmp_path: Path, model: Path) -> None:
    fake = run_trainer(tmp_path, model, GUESS_AGAIN, {"steps": 2, "maxTurns": 3}, train=12, test=4)
    training = [r for r in fake.requests if r["path"].endswith("/gradings") and r["request"]["phase"] == "Training"]
    turns = [len(item["turns"]) for r in training for item in r["request"]["items"]]
    assert turns and max(turns) >= 2, turns  # some episodes went on after "Try again."
    assert max(turns) <= 3
    evaluation = [r for r in fake.requests if r["path"].endswith("/gradings") and r["request"]["phase"] == "Evaluation"]
    assert evaluation and all("turns" in item for r in evaluation for item in r["request"]["items"])
