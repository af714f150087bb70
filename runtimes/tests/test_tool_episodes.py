"""Tool calling in the trainer, in process: the tools a task offers reach the chat template, a tool's result
becomes a tool message of the next turn, and training learns only from the model's own tokens.

Who runs it: pytest. `run_episodes` (baseline and final evaluation) is driven by a scripted generator that
records what it was asked; the training rollout (`multiturn.make_rollout`) runs the real tiny model with a
stand-in grader that answers the first reply with a tool result. Slow: it needs the tiny model (built once per
session).
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pytest

from nodus.runtimes.evaluation import run_episodes
from nodus.runtimes.generation import Messages, Sampling, Tools, next_message, tools_of

TOOLS = [{"type": "function", "function": {"name": "calculate", "parameters": {"type": "object"}}}]
TASK = {"taskId": "t1", "prompt": "Compute 2 + 3.", "metadata": {"tools": TOOLS}}
CALL = '<tool_call>{"name": "calculate", "arguments": {"expression": "2 + 3"}}</tool_call>'


class ScriptedGenerator:
    """Replies from a script, recording every conversation and the tools it was offered."""

    name = "scripted"

    def __init__(self, replies: list[str]) -> None:
        self.replies = replies
        self.seen: list[tuple[Messages, Tools]] = []

    def generate(
        self, conversations: Sequence[Messages], sampling: Sampling, tools: Sequence[Tools] | None = None
    ) -> list[str]:
        offered = list(tools) if tools is not None else [None] * len(conversations)
        self.seen += [([dict(m) for m in c], t) for c, t in zip(conversations, offered, strict=True)]
        return [self.replies.pop(0) for _ in conversations]


class ScriptedGrader:
    """A tool result after a call, the end of the episode after anything else."""

    def __init__(self) -> None:
        self.items: list[dict[str, Any]] = []

    def grade(self, items: Any, phase: str) -> list[dict[str, Any]]:
        self.items += [{**item, "turns": list(item["turns"])} for item in items]  # as sent: the trainer adds on
        verdicts = []
        for item in items:
            if CALL in item["turns"][-1]:
                verdicts.append({"verdict": "Incorrect", "reward": 0.0, "next": "5", "done": False, "nextRole": "tool"})
            else:
                right = item["turns"][-1] == "<answer>5</answer>"
                verdicts.append({"verdict": "Correct" if right else "Incorrect", "next": None, "done": True})
        return verdicts


def test_tools_come_from_the_task_metadata_and_a_tool_result_is_a_tool_message() -> None:
    assert (
        tools_of(TASK) == TOOLS and tools_of({"metadata": {}}) is None and tools_of({"metadata": {"tools": 1}}) is None
    )
    assert next_message({"next": "5", "nextRole": "tool"}) == {"role": "tool", "content": "5"}
    assert next_message({"next": "again"}) == {"role": "user", "content": "again"}
    assert next_message({"next": None, "nextRole": "tool"}) is None


def test_evaluation_offers_the_tools_and_shows_the_tool_result_as_a_tool_message() -> None:
    generator, grader = ScriptedGenerator([CALL, "<answer>5</answer>"]), ScriptedGrader()
    result = run_episodes(generator, [TASK], grader, phase="Evaluation", sampling=Sampling(), max_turns=3)  # type: ignore[arg-type]
    assert [v["verdict"] for v in result.verdicts] == ["Correct"]
    (first, first_tools), (second, second_tools) = generator.seen
    assert first == [{"role": "user", "content": "Compute 2 + 3."}] and first_tools == TOOLS
    assert second[1:] == [{"role": "assistant", "content": CALL}, {"role": "tool", "content": "5"}]
    assert second_tools == TOOLS
    assert [item["turns"] for item in grader.items] == [[CALL], [CALL, "<answer>5</answer>"]]


def test_a_single_turn_task_with_tools_is_rendered_with_them() -> None:
    generator = ScriptedGenerator(["<answer>5</answer>"])

    class Completions:
        def grade(self, items: Any, phase: str) -> list[dict[str, Any]]:
            return [{"verdict": "Correct", "reward": 1.0} for _ in items]

    run_episodes(generator, [TASK], Completions(), phase="Baseline", sampling=Sampling())  # type: ignore[arg-type]
    assert generator.seen[0][1] == TOOLS


@pytest.fixture
def tiny(tiny_model: tuple[str, str]) -> tuple[Any, Any]:
    from transformers import AutoModelForCausalLM, AutoTokenizer

    folder = Path(tiny_model[0]) / "models--nodus--tiny-qwen3" / "snapshots" / tiny_model[1]
    return AutoModelForCausalLM.from_pretrained(folder), AutoTokenizer.from_pretrained(folder)


@pytest.mark.slow
def test_the_tiny_model_s_template_offers_tools_and_renders_tool_results(tiny: tuple[Any, Any]) -> None:
    _, tokenizer = tiny
    chat = [{"role": "user", "content": "Compute 2 + 3."}, {"role": "assistant", "content": CALL}]
    offered = [
        *TOOLS,
        {
            "type": "function",
            "function": {
                "name": "lookup",
                "description": "The capital of a country.",
                "parameters": {"type": "object", "properties": {"country": {"type": "string"}, "year": {}}},
            },
        },
    ]
    text = tokenizer.apply_chat_template([*chat, {"role": "tool", "content": "5"}], tools=offered, tokenize=False)
    # One signature line per tool (the tiny model has 512 positions), then how to call one.
    system = (
        "<|im_start|>system\nTools:\ncalculate()\nlookup(country: string, year: any): The capital of a country.\n"
        'Call one with <tool_call>{"name": ..., "arguments": {...}}</tool_call><|im_end|>\n'
    )
    assert text.startswith(system), text
    assert text.endswith("<|im_start|>user\n<tool_response>\n5\n</tool_response><|im_end|>\n")
    plain = tokenizer.apply_chat_template(chat, tokenize=False)
    assert plain == f"<|im_start|>user\nCompute 2 + 3.<|im_end|>\n<|im_start|>assistant\n{CALL}<|im_end|>\n"


def test_a_tiny_tokenizer_for_tools_keeps_qwen_s_tool_tags_whole_through_decoding() -> None:
    from nodus.runtimes.tiny_model import TOOL_TOKENS, Recipe, train_tokenizer

    tokenizer = train_tokenizer(["Compute 2 + 3.", CALL], Recipe(), tools=True)
    ids = tokenizer(CALL)["input_ids"]
    pieces = tokenizer.convert_ids_to_tokens(ids)
    assert pieces[0] == "<tool_call>" and pieces[-1] == "</tool_call>", pieces
    # Not special: the trainer decodes with skip_special_tokens, and the call must survive it.
    assert tokenizer.decode(ids, skip_special_tokens=True) == CALL
    assert all(len(tokenizer(tag)["input_ids"]) == 1 for tag in TOOL_TOKENS)
    plain = train_tokenizer(["Compute 2 + 3.", CALL], Recipe())
    assert len(plain(CALL)["input_ids"]) > len(ids) + 10  # letters and signs for each tag


@pytest.mark.slow
def test_the_rollout_learns_only_from_the_model_s_tokens_around_a_tool_result(tiny: tuple[Any, Any]) -> None:
    from nodus.runtimes.grpo_lora import Parameters
    from nodus.runtimes.multiturn import make_rollout, prompt_key

    model, tokenizer = tiny
    prompt = [{"role": "user", "content": "Compute 2 + 3."}]

    class CallingFirst:
        """Whatever the model wrote first is answered with a tool result; the second reply ends the episode."""

        def __init__(self) -> None:
            self.items: list[dict[str, Any]] = []

        def grade(self, items: Any, phase: str) -> list[dict[str, Any]]:
            self.items += list(items)
            if len(items[0]["turns"]) == 1:
                return [{"verdict": "Incorrect", "reward": 0.0, "next": "5", "done": False, "nextRole": "tool"}]
            return [{"verdict": "Incorrect", "reward": 0.0, "next": None, "done": True}]

    class Context:
        api = CallingFirst()

    class Trainer:
        processing_class = tokenizer

    Trainer.model = model
    p = Parameters(max_tokens=6, max_turns=2, max_episode_tokens=400)
    rollout = make_rollout(Context(), p, {prompt_key(prompt): "t1"}, {prompt_key(prompt): TOOLS})  # type: ignore[arg-type]
    out = rollout([prompt], Trainer())
    head = tokenizer.decode(out["prompt_ids"][0])
    assert head.startswith("<|im_start|>system\nTools:\ncalculate(") and head.endswith("<|im_start|>assistant\n")
    completion, mask = out["completion_ids"][0], out["env_mask"][0]
    environment = tokenizer.decode([t for t, m in zip(completion, mask, strict=True) if m == 0])
    assert "<|im_start|>user\n<tool_response>\n5\n</tool_response><|im_end|>\n<|im_start|>assistant\n" in environment
    assert sum(mask) > 0 and len(Context.api.items) == 2  # both replies are the model's, the result between them
    assert out["episode_reward"] == [0.0]
