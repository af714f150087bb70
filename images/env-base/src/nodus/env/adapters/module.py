"""Adapter for an environment written as a plain module or object: `tasks(split)` + `reward` or `step`.

Who uses it: `adapters.adapt` tries it first. `tasks(split)` returns `(prompt, answer)` pairs or
`{"prompt", "answer", "metadata"}` dicts; a `tasks()` without a split parameter, or a module-level `TASKS`
list, is a list without splits (a fifth, and at least 16, held out). `step(turns, answer)` makes it
multi-turn: it replays the model's turns from the start and returns `(next message or None, reward)`, or
`(next message, reward, "tool")` when the next message is the result of a tool the model's last turn called
(the trainer shows it as a tool message of the chat template; the default role is "user").
"""

from __future__ import annotations

import inspect
from typing import Any

from nodus.env.adapters.base import AdapterError, RawTask, StepResult
from nodus.env.splits import split_list

SPLITS = ("train", "test")
ROLES = ("user", "tool")


def accepts(obj: Any) -> bool:
    has_tasks = callable(getattr(obj, "tasks", None)) or isinstance(getattr(obj, "TASKS", None), list | tuple)
    return has_tasks and (callable(getattr(obj, "reward", None)) or callable(getattr(obj, "step", None)))


def _takes_split(function: Any) -> bool:
    try:
        parameters = inspect.signature(function).parameters.values()
    except (TypeError, ValueError):
        return True
    return any(p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD, p.VAR_POSITIONAL) for p in parameters)


def to_raw_task(item: Any, where: str) -> RawTask:
    """One task as the environment wrote it -> RawTask, or an error naming the task."""
    if isinstance(item, dict):
        if "prompt" not in item or "answer" not in item:
            raise AdapterError(f"{where}: a task dict needs 'prompt' and 'answer' (got keys {sorted(item)})")
        prompt, answer, metadata = item["prompt"], item["answer"], item.get("metadata") or {}
    elif isinstance(item, list | tuple) and len(item) == 2:
        (prompt, answer), metadata = item, {}
    else:
        raise AdapterError(f"{where}: a task is (prompt, answer) or {{'prompt', 'answer', 'metadata'}}")
    if not isinstance(prompt, str) and not (
        isinstance(prompt, list) and all(isinstance(m, dict) and "role" in m and "content" in m for m in prompt)
    ):
        raise AdapterError(f"{where}: the prompt must be a string or a list of {{'role', 'content'}} messages")
    if not isinstance(metadata, dict):
        raise AdapterError(f"{where}: metadata must be a dict")
    return RawTask(prompt=prompt, answer=answer, metadata=metadata)


class ModuleAdapter:
    """An environment that is a module (or object) with tasks and a reward or step function."""

    kind = "module"

    def __init__(self, obj: Any) -> None:
        self.obj = obj
        self.multi_turn = not callable(getattr(obj, "reward", None))
        self.reward_type = str(getattr(obj, "REWARD_TYPE", "Binary"))
        self._cache: dict[str, list[RawTask]] = {}

    def raw_tasks(self, split: str) -> list[RawTask]:
        if split not in self._cache:
            self._cache.update(self._load())
        return self._cache[split]

    def _load(self) -> dict[str, list[RawTask]]:
        tasks = getattr(self.obj, "tasks", None)
        if callable(tasks) and _takes_split(tasks):
            return {s: [to_raw_task(t, f"tasks({s!r})[{i}]") for i, t in enumerate(tasks(s) or [])] for s in SPLITS}
        items = list(tasks() if callable(tasks) else self.obj.TASKS)
        train, test = split_list([to_raw_task(t, f"task {i}") for i, t in enumerate(items)])
        return {"train": train, "test": test}

    def reward(self, completion: str, task: RawTask) -> Any:
        if self.multi_turn:
            return self.step([completion], task).reward
        return self.obj.reward(completion, task.answer)

    def step(self, turns: list[str], task: RawTask) -> StepResult:
        if not self.multi_turn:
            # A single-turn environment ends after the first reply: grade it and stop.
            return StepResult(None, self.obj.reward(turns[0] if turns else "", task.answer))
        result = self.obj.step(list(turns), task.answer)
        if not (isinstance(result, tuple | list) and len(result) in (2, 3)):
            raise TypeError("step(turns, answer) must return (next message or None, reward so far[, role])")
        message, reward, role = (*result, "user") if len(result) == 2 else result
        if message is not None and not isinstance(message, str):
            raise TypeError(f"step returned a next message of type {type(message).__name__}; expected str or None")
        if role not in ROLES:
            raise TypeError(f"step returned the role {role!r}; expected one of {', '.join(ROLES)}")
        return StepResult(message, reward, role)

    def extracted(self, completion: str) -> str | None:
        return None

    def gold_completions(self, task: RawTask) -> list[str]:
        """Completions that should score Correct for a self-check: the environment's own, else the answer."""
        maker = getattr(self.obj, "gold_completion", None)
        if callable(maker):
            return [str(maker(task.answer))]
        return [str(task.answer), f"<answer>{task.answer}</answer>"]
