"""Adapter for a classic verifiers environment (verifiers 0.1 to 0.3; 0.3 keeps it under `verifiers.legacy`).

Who uses it: `adapters.adapt`, when `load_environment()` returns a `verifiers` Environment (SingleTurnEnv,
MultiTurnEnv, ToolEnv, ...). `dataset` is train and `eval_dataset` held out; with only one of them, every fifth
task (and at least 16) is held out. Every grading runs the environment's own rollout with a client that replays
the model's turns instead of calling a model (a `Replay`: `verifiers_replay_client` where verifiers has
`clients.Client`, 0.1.11 on; `verifiers_replay_openai` for the AsyncOpenAI-shaped client of 0.1.2 to 0.1.10;
another verifiers is refused at load time with its version and the reason), so `env_response`, the
`@vf.stop` conditions, `max_turns` and a ToolEnv's tool calls behave exactly as in verifiers. The rubric
then scores the rollout with its parser: every reward function gets what it asks for by name (prompt, completion,
answer, state, task, info, parser), sync or async, and the weighted sum is the reward. Unlike `Rubric.score_rollout`,
a reward function that raises is not turned into 0: it raises, and the verdict is InfrastructureFailure. A completion
the parser finds no answer in that earned nothing is InvalidOutput.

Environments that cannot be graded offline are refused when they load (the build shows the reason): a
JudgeRubric (scored by another model), tools in a remote sandbox, a browser or an MCP server.
verifiers itself is imported only from the environment's own package, once an environment of it is loaded.
"""

from __future__ import annotations

import asyncio
import contextlib
import copy
import importlib
import importlib.metadata
import importlib.util
import inspect
import json
from typing import Any

from nodus.env.adapters.base import AdapterError, RawTask, StepResult
from nodus.env.adapters.verifiers_replay import Replay
from nodus.env.adapters.verifiers_replay import field_of as _field
from nodus.env.adapters.verifiers_replay import text_of as _text
from nodus.env.adapters.verifiers_replay_client import ClientReplay
from nodus.env.adapters.verifiers_replay_openai import OpenAIReplay, unsupported
from nodus.env.adapters.verifiers_tool_calls import openai_tool_schema
from nodus.env.splits import split_list

REFUSED_ENVIRONMENTS = {
    "SandboxEnv": "its tools run in a remote sandbox",
    "PythonEnv": "its tools run in a remote sandbox",
    "CliAgentEnv": "its agent runs in a remote sandbox",
    "ComposableEnv": "its agent runs in a remote sandbox",
    "HarborEnv": "its agent runs in a remote sandbox",
    "BrowserEnv": "its tools drive a browser",
    "MCPEnv": "its tools run in an MCP server",
    "EnvGroup": "it routes each task to another environment (an EnvGroup); load one environment of it instead",
}
"""verifiers classes (by name, anywhere in the environment's MRO) that need what a grader does not have."""

JUDGE_REASON = (
    "it is scored by another model (a JudgeRubric), and grading has no network and holds no credential for it"
)
METADATA_KEYS = ("task",)
"""The only dataset columns copied into task metadata: `answer` and `info` often hold the ground truth."""


def _class_names(obj: Any) -> list[str]:
    return [cls.__name__ for cls in type(obj).__mro__]


def _verifiers_root(obj: Any) -> str | None:
    """`verifiers.legacy` or `verifiers`: the package the object's Environment class comes from."""
    for cls in type(obj).__mro__:
        module = cls.__module__
        if cls.__name__ == "Environment" and module.startswith("verifiers."):
            return "verifiers.legacy" if module.startswith("verifiers.legacy.") else "verifiers"
    return None


def verifiers_version() -> str:
    try:
        return importlib.metadata.version("verifiers")
    except importlib.metadata.PackageNotFoundError:
        return str(getattr(importlib.import_module("verifiers"), "__version__", "unknown"))


def replay_for(env: Any, root: str) -> Replay:
    """The replay this verifiers offers a seam for: its `clients.Client` (0.1.11 and later), else an
    OpenAI-shaped client (0.1.2 to 0.1.10); anything else is refused here, at load time, with the reason."""
    if importlib.util.find_spec(f"{root}.clients") is not None:
        return ClientReplay(env, root)
    reason = unsupported(env)
    if reason is not None:
        raise AdapterError(f"verifiers {verifiers_version()} is not supported: {reason}")
    return OpenAIReplay(env)


def accepts(obj: Any) -> bool:
    return _verifiers_root(obj) is not None and hasattr(obj, "rubric")


def _rubrics(rubric: Any) -> list[Any]:
    """The rubric and, for a RubricGroup, every rubric inside it (depth first)."""
    inner = getattr(rubric, "rubrics", None)
    if isinstance(inner, list | tuple):
        return [rubric, *(r for child in inner for r in _rubrics(child))]
    return [rubric]


def refusal(env: Any) -> str | None:
    """Why `env` cannot be graded here, or None."""
    names = _class_names(env)
    for name, reason in REFUSED_ENVIRONMENTS.items():
        if name in names:
            return reason
    for rubric in _rubrics(env.rubric):
        if "JudgeRubric" in _class_names(rubric):
            return JUDGE_REASON
    return None


def _weighted_functions(rubric: Any) -> list[tuple[Any, Any, float]]:
    """(rubric, function, weight) of every function that counts towards the reward (metrics weigh 0)."""
    if isinstance(getattr(rubric, "rubrics", None), list | tuple):
        return [item for child in rubric.rubrics for item in _weighted_functions(child)]
    funcs = list(getattr(rubric, "funcs", None) or getattr(rubric, "reward_funcs", None) or [])
    weights = list(getattr(rubric, "weights", None) or getattr(rubric, "reward_weights", None) or [1.0] * len(funcs))
    return [(rubric, f, float(w)) for f, w in zip(funcs, weights, strict=False) if float(w) != 0.0]


def _declared_binary(function: Any) -> bool:
    try:
        annotation = inspect.signature(function).return_annotation
    except (TypeError, ValueError):
        return False
    return annotation in (bool, int, "bool", "int")


def chat_prompt(prompt: Any, where: str) -> str | list[dict[str, Any]]:
    """A dataset row's prompt -> a string or `{role, content}` messages (Arrow adds empty columns to each)."""
    if isinstance(prompt, str):
        return prompt
    if not isinstance(prompt, list) or not prompt:
        raise AdapterError(f"{where}: the prompt must be a string or a non-empty list of messages")
    messages = []
    for message in prompt:
        role = _field(message, "role")
        if not isinstance(role, str):
            raise AdapterError(f"{where}: every prompt message needs a role")
        messages.append({"role": role, "content": _text(_field(message, "content"))})
    return messages


class VerifiersClassicAdapter:
    """A verifiers Environment: its datasets are the tasks, its rollout and rubric the grader."""

    kind = "verifiers"

    def __init__(self, env: Any) -> None:
        reason = refusal(env)
        if reason is not None:
            raise AdapterError(f"verifiers environment {type(env).__name__} cannot be graded here: {reason}")
        self.env = env
        root = _verifiers_root(env)
        assert root is not None  # accepts() found it
        self._replay = replay_for(env, root)
        # A SingleTurnEnv of 0.1.x keeps MultiTurnEnv's max_turns (10) and ends after one reply all the same.
        self.multi_turn = "SingleTurnEnv" not in _class_names(env) and getattr(env, "max_turns", 1) != 1
        functions = _weighted_functions(env.rubric)
        if not functions:
            raise AdapterError(
                f"verifiers environment {type(env).__name__}: its rubric has no weighted reward function"
            )
        binary = abs(sum(w for _, _, w in functions) - 1.0) < 1e-9 and all(_declared_binary(f) for _, f, _ in functions)
        self.reward_type = "Binary" if binary else "Continuous"
        self._functions = functions
        self._loop = asyncio.new_event_loop()
        self._cache: dict[str, list[RawTask]] | None = None

    # --- tasks ---------------------------------------------------------------------------------------

    def raw_tasks(self, split: str) -> list[RawTask]:
        if self._cache is None:
            self._cache = self._load()
        return self._cache[split]

    def _dataset(self, name: str) -> Any:
        builder = getattr(self.env, f"build_{name}", None)
        if callable(builder):
            return builder()
        return getattr(self.env, name, None)

    def _load(self) -> dict[str, list[RawTask]]:
        train, test = self._dataset("dataset"), self._dataset("eval_dataset")
        if train is not None and test is not None:
            return {"train": self._rows(train, "dataset"), "test": self._rows(test, "eval_dataset")}
        only, name = (train, "dataset") if train is not None else (test, "eval_dataset")
        if only is None:
            raise AdapterError(f"verifiers environment {type(self.env).__name__} has neither dataset nor eval_dataset")
        held_train, held_test = split_list(self._rows(only, name))
        return {"train": held_train, "test": held_test}

    def _rows(self, dataset: Any, name: str) -> list[RawTask]:
        tasks = []
        for index, row in enumerate(dataset):
            where = f"{name}[{index}]"
            if not isinstance(row, dict) or "prompt" not in row:
                raise AdapterError(f"{where}: a row needs a 'prompt' (verifiers builds it from 'question')")
            metadata: dict[str, Any] = {k: row[k] for k in METADATA_KEYS if isinstance(row.get(k), str)}
            tools = self._tool_schemas(row)
            if tools:
                metadata["tools"] = tools
            # The whole row stays in the grader: it is the rollout's input (answer and info included).
            tasks.append(RawTask(prompt=chat_prompt(row["prompt"], where), answer=dict(row), metadata=metadata))
        return tasks

    def _tool_schemas(self, row: dict[str, Any]) -> list[dict[str, Any]]:
        info = row.get("info")
        if isinstance(info, str):
            try:
                info = json.loads(info)
            except ValueError:
                info = None
        defs = info.get("tool_defs") if isinstance(info, dict) and "tool_defs" in info else None
        if defs is None and isinstance(info, dict) and "oai_tools" in info:
            defs = info.get("oai_tools")  # verifiers before 0.1.11: tools already in OpenAI's form
        if defs is None:
            defs = getattr(self.env, "tool_defs", None) or getattr(self.env, "oai_tools", None) or []
        return [openai_tool_schema(tool) for tool in defs]

    # --- grading -------------------------------------------------------------------------------------

    def reward(self, completion: str, task: RawTask) -> Any:
        return self.step([completion], task).reward

    def step(self, turns: list[str], task: RawTask) -> StepResult:
        with_tools = bool(self._tool_schemas(task.answer))
        row = copy.deepcopy(task.answer)
        played = self._replay.play(row, list(turns) or [""], with_tools, self._loop.run_until_complete)
        if played.pending is not None:
            # The environment answered the last turn and waits for the next one: the episode goes on.
            role, message = played.pending
            return StepResult(message, self._score(played.state), role=role)
        state = played.state
        error = state.get("error")
        if error is not None:
            raise RuntimeError(f"the environment ended the rollout with {type(error).__name__}: {error}")
        return StepResult(None, self._score(state))

    def _score(self, state: Any) -> Any:
        total = 0.0
        for rubric, function, weight in self._functions:
            total += weight * self._call(rubric, function, state)
        parsed = self.env.parser.parse_answer(state.get("completion") or [])
        if not parsed and total == 0.0:
            return None  # the parser found no answer and nothing was earned: InvalidOutput
        return total

    def _call(self, rubric: Any, function: Any, state: Any) -> float:
        is_group = getattr(rubric, "_is_group_func", None)
        group = bool(callable(is_group) and is_group(function))
        if group:
            objects = rubric.group_score_objects([state])
        elif callable(getattr(rubric, "score_objects", None)):
            objects = rubric.score_objects(state)
        else:
            objects = {
                "prompt": state.get("prompt"),
                "completion": state.get("completion"),
                "answer": state.get("answer", ""),
                "state": state,
                "task": state.get("task"),
                "info": state.get("info", {}),
                **getattr(rubric, "class_objects", {"parser": getattr(rubric, "parser", None)}),
            }
        parameters = inspect.signature(function).parameters
        if not any(p.kind == p.VAR_KEYWORD for p in parameters.values()):
            objects = {k: v for k, v in objects.items() if k in parameters}
        value = function(**objects)
        if inspect.isawaitable(value):
            value = self._loop.run_until_complete(_awaited(value))
        if group:
            value = next(iter(value))
        return float(value)

    def extracted(self, completion: str) -> str | None:
        parsed = self.env.parser.parse_answer([{"role": "assistant", "content": completion}])
        return None if parsed is None else str(parsed)

    def gold_completions(self, task: RawTask) -> list[str]:
        answer = str(task.answer.get("answer", ""))
        candidates = []
        parser = self.env.parser
        formatter = getattr(parser, "format", None)
        answer_field = getattr(parser, "answer_field", None)
        if callable(formatter) and isinstance(answer_field, str):
            # A parser that cannot format this answer leaves the plain candidates.
            with contextlib.suppress(Exception):
                candidates.append(str(formatter(**{answer_field: answer})))
        candidates += [answer, f"<answer>{answer}</answer>", f"\\boxed{{{answer}}}"]
        return list(dict.fromkeys(candidates))


async def _awaited(value: Any) -> Any:
    return await value
