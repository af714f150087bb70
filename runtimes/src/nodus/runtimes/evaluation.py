"""Held-out evaluation: generate greedily for each task, have the platform grade, follow multi-turn episodes.

Who uses it: `grpo_lora` (the Baseline and the final Evaluation, on the same held-out tasks) and the `evaluate`
runtime. The trainer only submits replies: verdicts come from the Environment's sandboxed grader, and the
comparison of the two sides is computed by the platform from its own record of those verdicts. The pass rate
returned here is for the trainer's log and results.json only.

A single-turn task (`max_turns` 1) is one `{taskId, completion}` item. With more turns each reply is sent
as the episode so far (`{taskId, turns}`); the grader answers `next` (the environment's message) and `done`,
and the episode goes on until it is done, `max_turns` replies were made, or it would pass `max_episode_tokens`.
A task whose metadata offers `tools` is rendered with them; the model's reply is the assistant's message and a
`next` the grader marks `nextRole: tool` (the result of the model's tool call) a tool message, so the chat
template shows it the way the model was taught tool results.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from nodus.runtimes.attempt import AttemptClient
from nodus.runtimes.generation import Generator, Messages, Sampling, as_messages, next_message, tools_of


@dataclass
class EvaluationResult:
    verdicts: list[dict[str, Any]] = field(default_factory=list)

    @property
    def scored(self) -> list[dict[str, Any]]:
        return [v for v in self.verdicts if v.get("verdict") != "InfrastructureFailure"]

    @property
    def pass_rate(self) -> float | None:
        scored = self.scored
        return sum(v.get("verdict") == "Correct" for v in scored) / len(scored) if scored else None


def run_episodes(
    generator: Generator,
    tasks: Sequence[dict[str, Any]],
    api: AttemptClient,
    *,
    phase: str,
    sampling: Sampling,
    max_turns: int = 1,
    max_episode_tokens: int | None = None,
    count_tokens: Any = None,
    batch: int = 64,
) -> EvaluationResult:
    """Grade every task once in `phase`; returns the verdicts in task order."""
    result = EvaluationResult()
    for start in range(0, len(tasks), batch):
        chunk = list(tasks[start : start + batch])
        if max_turns <= 1:
            replies = generator.generate(
                [as_messages(t["prompt"]) for t in chunk], sampling, [tools_of(t) for t in chunk]
            )
            items = [{"taskId": t["taskId"], "completion": r} for t, r in zip(chunk, replies, strict=True)]
            result.verdicts.extend(api.grade(items, phase))
        else:
            result.verdicts.extend(
                _multi_turn(generator, chunk, api, phase, sampling, max_turns, max_episode_tokens, count_tokens)
            )
    return result


def _multi_turn(
    generator: Generator,
    tasks: list[dict[str, Any]],
    api: AttemptClient,
    phase: str,
    sampling: Sampling,
    max_turns: int,
    max_episode_tokens: int | None,
    count_tokens: Any,
) -> list[dict[str, Any]]:
    conversations: list[Messages] = [as_messages(t["prompt"]) for t in tasks]
    turns: list[list[str]] = [[] for _ in tasks]
    final: list[dict[str, Any] | None] = [None] * len(tasks)
    open_ = list(range(len(tasks)))
    for turn in range(max_turns):
        replies = generator.generate([conversations[i] for i in open_], sampling, [tools_of(tasks[i]) for i in open_])
        for i, reply in zip(open_, replies, strict=True):
            turns[i].append(reply)
            conversations[i].append({"role": "assistant", "content": reply})
        # Every open episode is graded after each reply: the grader replays the turns and says what comes next.
        verdicts = api.grade([{"taskId": tasks[i]["taskId"], "turns": turns[i]} for i in open_], phase)
        still_open = []
        for i, verdict in zip(open_, verdicts, strict=True):
            final[i] = verdict
            message = next_message(verdict)
            too_long = (
                max_episode_tokens is not None
                and count_tokens is not None
                and count_tokens(conversations[i]) >= max_episode_tokens
            )
            if verdict.get("done", True) or message is None or turn + 1 >= max_turns or too_long:
                continue
            conversations[i].append(message)
            still_open.append(i)
        open_ = still_open
        if not open_:
            break
    return [v for v in final if v is not None]
