"""The training rollout plays each episode as its own task, even when tasks share a prompt.

Every seed of an OpenEnv environment opens with the same rules, so its tasks differ only by taskId; TRL hands the
rollout prompts only. Before `multiturn.rollout_rows` marked each row with its taskId, the rollout looked tasks
up by prompt and played every episode as the last task of that prompt (tests/test_train_ecosystem.py saw eight
training episodes of one seed out of eight). Fast: a stand-in tokenizer and model, TRL's dataset round trip
(`datasets`) and a recording grader; no weights.
"""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

import pytest

from nodus.runtimes.grpo_lora import Parameters
from nodus.runtimes.multiturn import TASK_MARK, make_rollout, rollout_rows

torch = pytest.importorskip("torch")
datasets = pytest.importorskip("datasets")

RULES = "I picked a whole number from 1 to 50. Guess it: reply with your guess in brackets, like [25]."


class Tokenizer:
    """Renders nothing real; records the messages (and tools) the chat template was given."""

    eos_token_id = 0
    pad_token_id = 0

    def __init__(self) -> None:
        self.rendered: list[tuple[list[dict[str, Any]], Any]] = []

    def apply_chat_template(self, messages: list[dict[str, Any]], tools: Any = None, **_: Any) -> str:
        self.rendered.append(([dict(m) for m in messages], tools))
        return "rendered"

    def __call__(self, text: str, add_special_tokens: bool = False) -> dict[str, list[int]]:
        return {"input_ids": [1, 2]}

    def decode(self, ids: list[int], skip_special_tokens: bool = True) -> str:
        return "[25]"


class Model:
    device = "cpu"

    def generate(self, input_ids: Any, **_: Any) -> Any:
        return SimpleNamespace(sequences=torch.cat([input_ids, torch.tensor([[5]])], dim=1), scores=[torch.zeros(1, 8)])


class Grader:
    def __init__(self) -> None:
        self.graded: list[str] = []
        self.items: list[dict[str, Any]] = []

    def grade(self, items: list[dict[str, Any]], phase: str) -> list[dict[str, Any]]:
        self.graded += [item["taskId"] for item in items]
        self.items += items
        return [{"verdict": "Incorrect", "reward": 0.0, "done": True} for _ in items]


def test_tasks_that_share_a_prompt_are_played_and_graded_as_themselves() -> None:
    tools = [{"type": "function", "function": {"name": "guess", "parameters": {"type": "object"}}}]
    tasks = [
        {"taskId": "seed-3", "prompt": RULES, "metadata": {"seed": 3}},
        {"taskId": "seed-7", "prompt": RULES, "metadata": {"seed": 7, "tools": tools}},
    ]
    rows, task_ids, offered = rollout_rows(tasks)
    # What TRL passes the rollout: the dataset's prompts, repeated per group, after Arrow's round trip (which
    # gives every message the mark's key, None where it was not set).
    prompts = [row["prompt"] for row in datasets.Dataset.from_list(rows) for _ in range(2)]
    grader, tokenizer = Grader(), Tokenizer()
    context = SimpleNamespace(api=grader)
    trainer = SimpleNamespace(processing_class=tokenizer, model=Model())
    rollout = make_rollout(context, Parameters(max_tokens=4, max_turns=2), task_ids, offered)  # type: ignore[arg-type]

    out = rollout(prompts, trainer)

    assert grader.graded == ["seed-3", "seed-3", "seed-7", "seed-7"]
    assert out["episode_reward"] == [0.0, 0.0, 0.0, 0.0]
    # The model is shown the task's own prompt (no mark) and the tools that task offers, no other's.
    assert [messages for messages, _ in tokenizer.rendered] == [[{"role": "user", "content": RULES}]] * 4
    assert [offered_tools for _, offered_tools in tokenizer.rendered] == [None, None, tools, tools]
    assert all(TASK_MARK not in m for messages, _ in tokenizer.rendered for m in messages)
    # Each turn is graded alone, so each item names its GRPO group (the batch and the task) and its episode.
    assert [(item["group"], item["episode"]) for item in grader.items] == [
        ("s0.b0/seed-3", 0),
        ("s0.b0/seed-3", 1),
        ("s0.b0/seed-7", 0),
        ("s0.b0/seed-7", 1),
    ]
    rollout(prompts, trainer)
    assert {item["group"] for item in grader.items[4:]} == {"s0.b1/seed-3", "s0.b1/seed-7"}
