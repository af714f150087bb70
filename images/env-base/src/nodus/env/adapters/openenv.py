"""Adapter for an OpenEnv environment (openenv-core 0.3 `Environment`), driven in process: each task is a seed.

Who uses it: `adapters.adapt`, when `load_environment()` returns an instance of a subclass of OpenEnv's
`Environment` (`openenv.core.env_server.interfaces`). Task i of a split is the episode `reset(seed=i)`
starts; its prompt is that first observation's text. Every model turn is sent as the one text field of the
environment's action class, and grading replays the turns from `reset(seed)` each time (grading keeps no
state between lines). The reward is the one the environment's last observation carries. Seeds 0-799 train
and 800-999 are held out unless the environment sets `train_seeds` and `test_seeds`.

Loading refuses an environment that does not play the same episode for the same seed: the first seed of each
split is reset twice and played one probe turn, and the observations and state must match (OpenEnv's HTTP
server is stateless per call, and grading replays episodes, so a seed must fully decide its episode).
openenv itself is never imported here: the environment object brings its classes with it.
"""

from __future__ import annotations

import inspect
import types
import typing
from collections.abc import Iterable
from typing import Any

from nodus.env import contract
from nodus.env.adapters.base import AdapterError, RawTask, StepResult

DEFAULT_TRAIN_SEEDS = range(800)
DEFAULT_TEST_SEEDS = range(800, 1000)
PROBE_TURN = "hello"
"""The reply the determinism check plays after each reset (any text: it only has to be the same twice)."""
_BASE_FIELDS = {"done", "reward", "metadata"}


def accepts(obj: Any) -> bool:
    return any(
        cls.__name__ == "Environment" and cls.__module__.endswith("env_server.interfaces") for cls in type(obj).__mro__
    )


def action_class(env: Any) -> type:
    """The environment's Action class: the annotation of `step`'s action, else the class's generic argument."""
    step = type(env).step
    try:
        hints = typing.get_type_hints(step)
    except Exception:  # an annotation that does not resolve: fall back to the generic arguments
        hints = {}
    parameters = [p for p in inspect.signature(step).parameters.values() if p.name != "self"]
    if parameters and isinstance(hints.get(parameters[0].name), type):
        found: type = hints[parameters[0].name]
        if hasattr(found, "model_fields") and found.__name__ != "Action":
            return found
    for cls in type(env).__mro__:
        for base in getattr(cls, "__orig_bases__", ()):
            arguments = typing.get_args(base)
            if arguments and isinstance(arguments[0], type) and hasattr(arguments[0], "model_fields"):
                return arguments[0]
    raise AdapterError(
        f"OpenEnv environment {type(env).__name__}: cannot tell its action class; annotate step(self, action: "
        "MyAction) or subclass Environment[MyAction, MyObservation, MyState]"
    )


def text_field(action_cls: type) -> str:
    """The one text field of the action class, where the model's reply goes."""
    fields: dict[str, Any] = dict(action_cls.model_fields)  # type: ignore[attr-defined]
    texts = [name for name, info in fields.items() if name not in _BASE_FIELDS and _is_text(info.annotation)]
    required = [name for name, info in fields.items() if info.is_required() and name not in texts]
    if len(texts) != 1 or required:
        problem = f"{len(texts)} text fields ({', '.join(texts) or 'none'})" if len(texts) != 1 else ""
        if required:
            problem += ("; " if problem else "") + f"required fields that are not text ({', '.join(required)})"
        raise AdapterError(
            f"OpenEnv action class {action_cls.__name__} has {problem}: nodus sends the model's reply as the one "
            "text field of the action"
        )
    return texts[0]


def _is_text(annotation: Any) -> bool:
    if annotation is str:
        return True
    arguments = [a for a in typing.get_args(annotation) if a is not type(None)]
    return typing.get_origin(annotation) in (typing.Union, types.UnionType) and arguments == [str]


def observation_text(observation: Any, *, first: bool) -> str:
    """What the model reads of an observation: its prompt (first), its messages, its one text field, or JSON."""
    dump = getattr(observation, "model_dump", None)
    fields: dict[str, Any] = dump(mode="json") if callable(dump) else {"value": observation}
    fields = {k: v for k, v in fields.items() if k not in _BASE_FIELDS}
    prompt = fields.get("prompt")
    if first and isinstance(prompt, str) and prompt.strip():
        return prompt
    messages = fields.get("messages")
    if isinstance(messages, list) and messages:
        parts = [m.get("content") if isinstance(m, dict) else m for m in messages]
        texts_of_messages = [p for p in parts if isinstance(p, str)]
        if len(texts_of_messages) == len(parts):
            return "\n".join(texts_of_messages)
    texts = [v for k, v in fields.items() if isinstance(v, str) and v.strip() and (first or k != "prompt")]
    if len(texts) == 1:
        return str(texts[0])
    return contract.dumps(fields)


def _seeds(env: Any) -> tuple[list[int], list[int]]:
    train, test = getattr(env, "train_seeds", None), getattr(env, "test_seeds", None)
    name = type(env).__name__
    if (train is None) != (test is None):
        raise AdapterError(f"OpenEnv environment {name} sets only one of train_seeds and test_seeds; set both")
    if train is None:
        return list(DEFAULT_TRAIN_SEEDS), list(DEFAULT_TEST_SEEDS)
    lists = (_seed_list(train, name, "train_seeds"), _seed_list(test, name, "test_seeds"))
    shared = sorted(set(lists[0]) & set(lists[1]))
    if shared:
        raise AdapterError(f"OpenEnv environment {name}: train_seeds and test_seeds share seeds ({shared[:5]})")
    return lists


def _seed_list(value: Any, name: str, field: str) -> list[int]:
    if not isinstance(value, Iterable) or isinstance(value, str | bytes):
        raise AdapterError(f"OpenEnv environment {name}: {field} must be a list or range of ints")
    seeds = list(value)
    if not seeds or not all(isinstance(s, int) and not isinstance(s, bool) and s >= 0 for s in seeds):
        raise AdapterError(f"OpenEnv environment {name}: {field} must be a non-empty list of ints >= 0")
    return seeds


class OpenEnvAdapter:
    """Seeds of an OpenEnv environment as tasks; a task's answer is its seed (the episode stays in the grader)."""

    kind = "openenv"
    multi_turn = True
    gold_optional = True
    """A seed has no answer key: the self-check grades gold replies only where `gold_completion(seed)` exists."""

    def __init__(self, env: Any) -> None:
        self.env = env
        self.reward_type = str(getattr(env, "REWARD_TYPE", "Continuous"))
        self.action_cls = action_class(env)
        self.field = text_field(self.action_cls)
        if "seed" not in inspect.signature(env.reset).parameters and not any(
            p.kind is p.VAR_KEYWORD for p in inspect.signature(env.reset).parameters.values()
        ):
            raise AdapterError(
                f"OpenEnv environment {type(env).__name__}: reset() takes no seed, so a task cannot choose its episode"
            )
        self._cache: dict[str, list[RawTask]] | None = None

    def raw_tasks(self, split: str) -> list[RawTask]:
        if self._cache is None:
            train, test = _seeds(self.env)
            for seeds in (train, test):
                self._check_deterministic(seeds[0])
            self._cache = {"train": [self._task(s) for s in train], "test": [self._task(s) for s in test]}
        return self._cache[split]

    def _task(self, seed: int) -> RawTask:
        observation = self._reset(seed)
        # The seed tells tasks with the same opening apart (a game's rules are often its whole first prompt).
        return RawTask(prompt=observation_text(observation, first=True), answer=seed, metadata={"seed": seed})

    def task_key(self, task: RawTask) -> str:
        """What makes two tasks the same: their seed (many games open every episode with the same rules)."""
        return f"seed:{task.answer}"

    def _reset(self, seed: int) -> Any:
        try:
            return self.env.reset(seed=seed)
        except Exception as exc:
            raise AdapterError(
                f"OpenEnv environment {type(self.env).__name__}: reset(seed={seed}) raised {type(exc).__name__}: {exc}"
            ) from exc

    def _episode(self, seed: int) -> list[str]:
        """What one probe episode of `seed` shows: observations, rewards, done flags and state, as JSON."""
        seen = [self._snapshot(self._reset(seed), first=True)]
        try:
            seen.append(self._snapshot(self.env.step(self._action(PROBE_TURN)), first=False))
        except Exception as exc:
            raise AdapterError(
                f"OpenEnv environment {type(self.env).__name__}: step({self.action_cls.__name__}({self.field}="
                f"{PROBE_TURN!r})) after reset(seed={seed}) raised {type(exc).__name__}: {exc}"
            ) from exc
        return seen

    def _snapshot(self, observation: Any, *, first: bool) -> str:
        state = getattr(self.env, "state", None)
        dump = getattr(state, "model_dump", None)
        # episode_id is a fresh uuid per reset by OpenEnv's convention, not part of the episode.
        state_fields = dump(mode="json", exclude={"episode_id"}) if callable(dump) else None
        shown = [observation_text(observation, first=first), getattr(observation, "reward", None)]
        return contract.dumps([*shown, bool(getattr(observation, "done", False)), state_fields])

    def _check_deterministic(self, seed: int) -> None:
        once, twice = self._episode(seed), self._episode(seed)
        for step, (a, b) in enumerate(zip(once, twice, strict=True)):
            if a != b:
                when = f"reset(seed={seed})" if step == 0 else f"the first step after reset(seed={seed})"
                raise AdapterError(
                    f"OpenEnv environment {type(self.env).__name__} does not play the same episode for the same seed: "
                    f"{when} gave {a[:120]} then {b[:120]}"
                )

    def _action(self, text: str) -> Any:
        return self.action_cls(**{self.field: text})

    def reward(self, completion: str, task: RawTask) -> Any:
        return self.step([completion], task).reward

    def step(self, turns: list[str], task: RawTask) -> StepResult:
        if not turns:
            raise ValueError("no model turn to play")
        self.env.reset(seed=task.answer)
        observation: Any = None
        for turn in turns:
            observation = self.env.step(self._action(turn))
            if getattr(observation, "done", False):
                return StepResult(None, getattr(observation, "reward", None))
        return StepResult(observation_text(observation, first=False), getattr(observation, "reward", None))

    def extracted(self, completion: str) -> str | None:
        return None

    def gold_completions(self, task: RawTask) -> list[str]:
        """The environment's own winning reply for a seed (`gold_completion(seed)`), when it has one."""
        maker = getattr(self.env, "gold_completion", None)
        return [str(maker(task.answer))] if callable(maker) else []
