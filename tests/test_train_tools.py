"""Tool calling trained on the tiny model: nodus/tool-calculator built with nodus-build, trained for two GRPO
steps through `nodus apply`, its `calculate` calls run by the grader in its container and their results sent
back as `tool` turns, with the platform's baseline/final comparison.

The model is the default tiny `Recipe` warmed up on the Environment's own gold episodes (`gold_turns`: call the
tool, then answer with its result). The tiny template offers a tool in one signature line and its tokenizer
has Qwen's tool tags as tokens, so a prompt that offers the tool takes about 220 of its 512 positions and a
gold episode about 320. Warmed up to 70% of its dev turns (about 10 minutes on two cores), it calls the tool
right on every one of 32 held-out tasks when greedy and on 28 when sampled, so the episodes it plays go past the
first turn, and it answers with the tool's result.

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

FOLDER = Path(__file__).resolve().parents[1] / "catalog" / "tool-calculator"
MODULE = "tool_calculator_env.py"
# Two model turns: the call, then the answer with the tool's result. 64 tokens a reply holds a call (about 51).
JOB = """apiVersion: nodus.dev/v1beta1
kind: TrainingJob
metadata: {{name: tools}}
spec:
  runtime: nodus/grpo-lora
  model: {{uri: "hf://nodus/tiny-qwen3@{revision}"}}
  environment: {{name: tool-calculator@1.0.0, trainTasks: 8, heldOutTasks: 16, seed: 0}}
  evaluation: {{baseline: true, final: true}}
  parameters: {{steps: 2, groupsPerStep: 2, groupSize: 4, maxTokens: 64, maxTurns: 2, maxEpisodeTokens: 512}}
"""


@pytest.fixture(scope="session")
def tool_model(warmed_model: Callable[..., tuple[str, str]]) -> tuple[str, str]:
    """(HF_HUB_CACHE, revision) of the tiny model warmed up on tool-calculator's gold episodes, until 70% of the
    dev slice's turns are right: at 35% (the default) it writes the calls but not yet the answers."""
    from nodus.runtimes.tiny_model import Recipe

    return warmed_model(FOLDER / MODULE, "tools", Recipe(target=0.7))


@pytest.fixture
def project(tmp_path: Path, base_reference: str, tool_model: tuple[str, str], monkeypatch: pytest.MonkeyPatch) -> Path:
    return training_project(
        tmp_path / "project", FOLDER / MODULE, "tool-calculator", base_reference, JOB, tool_model, monkeypatch
    )


def test_tool_calls_run_in_the_grader_and_come_back_as_tool_turns(project: Path) -> None:
    code, output = nodus("apply", str(project), "--yes", "--wait", "--timeout", "10m")
    assert code == 0 and "TrainingJob/tools: Succeeded" in output, output
    pairs = graded_pairs(project, "tools")
    # The tool ran in the grader: a first turn with a <tool_call> got the tool's result back as a tool turn ...
    training = pairs["Training"]
    tool_turns = [v for item, v in training if len(item["turns"]) == 1 and v.get("nextRole") == "tool"]
    assert tool_turns, training[:3]
    assert all(not v["done"] and v["next"] for v in tool_turns), tool_turns[:3]
    # ... and the model's next turn was graded after it: episodes went past the first turn, none past maxTurns.
    assert {len(item["turns"]) for item, _ in training} == {1, 2}
    second = [item["turns"] for item, _ in training if len(item["turns"]) == 2]
    assert all("<tool_call>" in turns[0] for turns in second), second[:3]  # only a call gets a second turn
    # Held-out episodes before and after, on the same 16 tasks, played turn by turn with the tool offered.
    for phase in ("Baseline", "Evaluation"):
        assert pairs[phase] and all(1 <= len(item["turns"]) <= 2 for item, _ in pairs[phase]), phase
    # A held-out answer is right only through the tool: three operands of up to 999 are beyond a model of
    # 140k parameters, so a Correct verdict is an episode whose call ran in the grader and whose result the
    # model copied into its answer.
    correct = [item["turns"] for item, verdict in pairs["Baseline"] if verdict["verdict"] == "Correct"]
    assert correct and all(len(turns) == 2 and "<tool_call>" in turns[0] for turns in correct), pairs["Baseline"][:3]
    status = json.loads(nodus("get", "tj", "tools", "-o", "json")[1])["status"]
    summary = status["summary"]
    assert summary["baseline"]["tasks"] == 16 and summary["final"]["tasks"] == 16, summary
    assert summary["baseline"]["passed"] >= 1, summary
    # The reward signal sees GRPO's groups though each turn was graded alone: 2 steps of 2 groups.
    assert status["diagnostics"]["rewardSignal"]["groups"] == 4, status["diagnostics"]
    comparison = summary["comparison"]
    # A delta on the same 16 tasks, or the reason it is not comparable (all 16 right on both sides).
    assert comparison.get("tasks") == 16 or comparison["reason"] == "AllPassed", comparison
