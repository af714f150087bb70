"""The task lists `rl.train` is given: checked, made JSON, de-duplicated and split into train and held-out.

Who calls it: `nodus.recipes.rl.train`, before it packages the reward (`nodus.recipes.environment`). A task is
a `(prompt, answer)` pair or a `{"prompt", "answer", "metadata"}` dict, as a module Environment's `tasks(split)`
returns them. The held-out rule is the Environment adapters' own (`nodus.env.splits`): a fifth of the tasks,
and at least 16, always leaving one to train on; a prompt is kept once, so a test prompt never appears in train.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from nodus.env.splits import held_out_positions
from nodus.errors import ConfigError

Task = dict[str, Any]
"""`{"prompt": str | [{"role", "content"}, ...], "answer": <JSON>, "metadata": {...}}`."""


@dataclass(frozen=True)
class Split:
    """The tasks the trainer learns from and the ones it is graded on before and after training."""

    train: list[Task]
    test: list[Task]

    def to_json(self) -> str:
        """tasks.json of the package: one task a line, so a person can read and diff it."""
        parts = []
        for name in ("test", "train"):
            lines = ",\n".join("  " + _dumps(task) for task in getattr(self, name))
            parts.append(f'"{name}": [\n{lines}\n]')
        return "{" + ",\n".join(parts) + "}\n"


def _dumps(value: Any) -> str:
    return json.dumps(value, ensure_ascii=False, sort_keys=True, allow_nan=False, separators=(",", ":"))


def normalise(items: Iterable[Any], what: str = "tasks") -> list[Task]:
    """Every task as a JSON-ready dict, or a one-line error naming the task (`tasks[3]: ...`)."""
    if isinstance(items, str | bytes | Mapping):
        raise ConfigError(f"{what} must be a list of (prompt, answer) pairs or dicts, not a {type(items).__name__}")
    tasks = []
    for index, item in enumerate(items):
        where = f"{what}[{index}]"
        if isinstance(item, Mapping):
            unknown = sorted(set(item) - {"prompt", "answer", "metadata"})
            if "prompt" not in item or "answer" not in item or unknown:
                raise ConfigError(
                    f"{where}: a task dict has 'prompt', 'answer' and optionally 'metadata' (got keys {sorted(item)})"
                )
            prompt, answer, metadata = item["prompt"], item["answer"], item.get("metadata") or {}
        elif isinstance(item, list | tuple) and len(item) == 2:
            (prompt, answer), metadata = item, {}
        else:
            raise ConfigError(
                f"{where}: a task is a (prompt, answer) pair or a {{'prompt', 'answer', 'metadata'}} dict"
            )
        if not isinstance(prompt, str) and not (
            isinstance(prompt, list) and prompt and all(_is_message(message) for message in prompt)
        ):
            raise ConfigError(f"{where}: the prompt must be a string or a list of {{'role', 'content'}} messages")
        if not isinstance(metadata, Mapping) or not all(isinstance(key, str) for key in metadata):
            raise ConfigError(f"{where}: metadata must be a dict with string keys")
        tasks.append(
            {
                "prompt": prompt,
                "answer": _json_value(answer, f"{where}: the answer"),
                "metadata": _json_value(dict(metadata), f"{where}: metadata"),
            }
        )
    return tasks


def _is_message(message: Any) -> bool:
    return (
        isinstance(message, Mapping)
        and isinstance(message.get("role"), str)
        and isinstance(message.get("content"), str)
    )


def _json_value(value: Any, where: str) -> Any:
    """`value` as JSON gives it back (tuples become lists): what the reward receives in the grader."""
    try:
        return json.loads(_dumps(value))
    except (TypeError, ValueError) as exc:
        reason = "a float that is not finite" if isinstance(exc, ValueError) else str(exc)
        raise ConfigError(f"{where} cannot be stored as JSON ({reason})", hint=_JSON_HINT) from None


_JSON_HINT = "answers and metadata go to the grader as JSON: use strings, numbers, bools, lists and dicts"


def prompt_key(prompt: Any) -> str:
    """A prompt's identity for de-duplication (the same canonical text `nodus.env.splits.prompt_key` uses)."""
    return prompt if isinstance(prompt, str) else _dumps(prompt)


def unique(tasks: Iterable[Task]) -> list[Task]:
    """The first task of each prompt, in order (the Environment keeps one task per prompt as well)."""
    seen: set[str] = set()
    kept = []
    for task in tasks:
        key = prompt_key(task["prompt"])
        if key not in seen:
            seen.add(key)
            kept.append(task)
    return kept


def split(tasks: Iterable[Any], test_tasks: Iterable[Any] | None = None) -> Split:
    """Train and held-out tasks: `test_tasks` when given, else a fifth of `tasks` and at least 16."""
    everything = unique(normalise(tasks))
    if test_tasks is not None:
        test = unique(normalise(test_tasks, "test_tasks"))
        held = {prompt_key(task["prompt"]) for task in test}
        train = [task for task in everything if prompt_key(task["prompt"]) not in held]
    else:
        if len(everything) < 2:
            raise ConfigError(
                f"rl.train needs at least 2 different prompts to hold some out; got {len(everything)}",
                hint="pass more tasks (a fifth, and at least 16, are held out), or test_tasks=",
            )
        positions = held_out_positions(len(everything))
        train = [task for index, task in enumerate(everything) if index not in positions]
        test = [task for index, task in enumerate(everything) if index in positions]
    if not test:
        raise ConfigError("test_tasks is empty: the run is graded on held-out tasks before and after training")
    if not train:
        raise ConfigError(
            "no task is left to train on: every prompt of tasks is also in test_tasks",
            hint="a test prompt never appears in train; give tasks prompts that test_tasks does not have",
        )
    return Split(train, test)
