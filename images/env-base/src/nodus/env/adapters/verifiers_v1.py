"""Adapter for a verifiers 0.4 `verifiers.v1` Taskset: its tasks, scored by `await task.score(trace)`.

Who uses it: `adapters.adapt`, when `load_environment()` returns a Taskset (an instance or its class), or the
package's module itself when it has no `load_environment` and exports one Taskset subclass via `__all__` (how
v1 packages are found by verifiers' own loader). A class is built with its default config. Every fifth task (and
at least 16) is held out. A completion becomes a trace of the task's prompt and one sampled assistant reply;
the task's `@vf.reward` methods score it (weights applied; the trace's reward is their weighted sum) with no
runtime, so a reward that raises is InfrastructureFailure and an empty reply InvalidOutput.

Refused when it loads (the build shows the reason): tasks that need a container, toolsets (tools served by an
MCP server), judges (another model), and rewards that need a runtime (a sandbox). verifiers itself is
imported only once such an object was loaded, from the environment's own dependencies.
"""

from __future__ import annotations

import asyncio
import importlib
import inspect
from types import ModuleType
from typing import Any

from nodus.env.adapters.base import AdapterError, RawTask, StepResult
from nodus.env.splits import split_list


def _is_taskset_class(obj: Any) -> bool:
    return isinstance(obj, type) and any(
        c.__name__ == "Taskset" and c.__module__.startswith("verifiers.v1") for c in obj.__mro__[1:]
    )


def _exported_taskset(module: ModuleType) -> type | None:
    names = getattr(module, "__all__", None) or []
    found = [obj for name in names if _is_taskset_class(obj := getattr(module, name, None))]
    return found[0] if len(found) == 1 else None


def accepts(obj: Any) -> bool:
    if isinstance(obj, ModuleType):
        return _exported_taskset(obj) is not None
    return _is_taskset_class(obj) or _is_taskset_class(type(obj))


def _instance(obj: Any) -> Any:
    cls = _exported_taskset(obj) if isinstance(obj, ModuleType) else obj
    if not isinstance(cls, type):
        return obj
    generic = importlib.import_module("verifiers.v1.utils.generic")
    v1 = importlib.import_module("verifiers.v1")
    config_type = generic.concrete_type(cls, v1.TasksetConfig, origin=v1.Taskset) or v1.TasksetConfig
    return cls(config_type())


def _needs_runtime(function: Any) -> bool:
    parameter = inspect.signature(function).parameters.get("runtime")
    return parameter is not None and parameter.default is inspect.Parameter.empty


def refusal(taskset: Any, task: Any) -> str | None:
    """Why the taskset cannot be graded here, or None (checked on its first task)."""
    if getattr(type(task), "NEEDS_CONTAINER", False) or getattr(task.data, "image", None):
        return "its tasks run in a container (a remote sandbox)"
    if type(taskset).toolsets(taskset.config) or type(task).toolsets(task.config):
        return "its tools run in an MCP server (a Toolset)"
    if list(getattr(task.config, "judges", None) or []):
        return "it is scored by another model (a judge), and grading has no network and holds no credential for it"
    rewards = task.hooks("reward")
    if not rewards:
        return "its task has no @vf.reward method"
    if all(_needs_runtime(f) for f in rewards):
        return "its rewards need a runtime (a sandbox) to score"
    return None


class VerifiersV1Adapter:
    """A v1 Taskset: its tasks are the tasks, `task.score(trace)` the reward."""

    kind = "verifiers-v1"
    multi_turn = False

    def __init__(self, obj: Any) -> None:
        try:
            self.taskset = _instance(obj)
        except Exception as exc:
            raise AdapterError(f"verifiers Taskset {getattr(obj, '__name__', obj)!r} failed to build: {exc}") from exc
        self._v1 = importlib.import_module("verifiers.v1")
        self._trace = importlib.import_module("verifiers.v1.trace")
        self._graph = importlib.import_module("verifiers.v1.graph")
        self._agent_config = importlib.import_module("verifiers.v1.configs.agent").AgentConfig
        tasks = list(self.taskset)
        if not tasks:
            raise AdapterError(f"verifiers Taskset {type(self.taskset).__name__} has no tasks")
        reason = refusal(self.taskset, tasks[0])
        if reason is not None:
            raise AdapterError(f"verifiers Taskset {type(self.taskset).__name__} cannot be graded here: {reason}")
        rewards = tasks[0].hooks("reward")
        weights = [float(getattr(f, "_vf_weight", 1.0)) for f in rewards]
        binary = abs(sum(weights) - 1.0) < 1e-9 and all(
            inspect.signature(f).return_annotation in (bool, "bool") for f in rewards
        )
        self.reward_type = "Binary" if binary else "Continuous"
        train, test = split_list([self._raw(task) for task in tasks])
        self._splits = {"train": train, "test": test}
        self._loop = asyncio.new_event_loop()

    def _raw(self, task: Any) -> RawTask:
        data = task.data
        where = f"task {data.idx}"
        if data.prompt is None:
            raise AdapterError(f"{where}: it has no prompt (the user opens the conversation), which cannot train here")
        messages: list[dict[str, Any]] = []
        if data.system_prompt:
            messages.append({"role": "system", "content": data.system_prompt})
        if isinstance(data.prompt, str):
            messages.append({"role": "user", "content": data.prompt})
        else:
            for message in data.prompt:
                messages.append({"role": message.role, "content": self._text(message.content)})
        prompt: str | list[dict[str, Any]] = messages
        # Only the task's names reach the trainer: every other data field (the answer among them) stays here.
        metadata = {k: v for k in ("id", "name") if isinstance(v := getattr(data, k, None), str)}
        return RawTask(prompt=prompt, answer=task, metadata=metadata)

    def _text(self, content: Any) -> str:
        return str(self._v1.types.content_text(content)) if not isinstance(content, str) else content

    def raw_tasks(self, split: str) -> list[RawTask]:
        return self._splits[split]

    def reward(self, completion: str, task: RawTask) -> Any:
        if not completion.strip():
            return None  # no reply at all: InvalidOutput
        trace = self._trace_of(task, completion)
        self._loop.run_until_complete(task.answer.score(trace))
        unscored = [name for name, value in trace.rewards.items() if value is None]
        if unscored:
            raise RuntimeError(f"rewards {', '.join(unscored)} were not scored")
        return float(trace.reward)

    def _trace_of(self, task: RawTask, completion: str) -> Any:
        nodes: list[Any] = []
        prompt = task.prompt if isinstance(task.prompt, list) else [{"role": "user", "content": task.prompt}]
        message_types = {"system": self._v1.SystemMessage, "user": self._v1.UserMessage}
        for message in prompt:
            make = message_types.get(message["role"], self._v1.UserMessage)
            nodes.append(
                self._graph.MessageNode(
                    parent=len(nodes) - 1 if nodes else None, message=make(content=message["content"])
                )
            )
        reply = self._v1.AssistantMessage(content=completion)
        nodes.append(self._graph.MessageNode(parent=len(nodes) - 1, message=reply, sampled=True))
        data = task.answer.data
        return self._trace.Trace(
            task=self._trace.TraceTask(type=type(task.answer).__name__, data=data),
            agent=self._trace.AgentInfo(config=self._agent_config()),
            nodes=nodes,
        )

    def step(self, turns: list[str], task: RawTask) -> StepResult:
        return StepResult(None, self.reward(turns[0] if turns else "", task))

    def extracted(self, completion: str) -> str | None:
        return None

    def gold_completions(self, task: RawTask) -> list[str]:
        data = task.answer.data
        found = [getattr(data, k) for k in ("answer", "solution", "target") if getattr(data, k, None) is not None]
        return [str(v) for v in found] + [f"<answer>{v}</answer>" for v in found]
