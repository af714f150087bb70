"""Replay through an `AsyncOpenAI`-shaped client (verifiers 0.1.2 to 0.1.10, before `verifiers.clients`).

Who uses it: `adapters.verifiers_classic`, when the environment's verifiers package has no `clients` module.
Those versions call the model as `client.chat.completions.create(model=, messages=, tools=, ...)` (or
`client.completions.create(model=, prompt=)` for a completion-format environment) and read OpenAI's
`ChatCompletion` / `Completion`; the replay client answers each call with the model's i-th turn in those types (its
`<tool_call>` blocks become the message's `tool_calls` when the task offers tools, as a ToolEnv reads them).
Two rollout shapes exist, told apart by the rollout's parameters:
- 0.1.2 to 0.1.7: `rollout(client, model, prompt, answer, task, info, sampling_args, ...)` -> (completion, state);
- 0.1.8 to 0.1.10: `rollout(input, client, model, sampling_args)` -> state.
0.1.0 and 0.1.1 roll out synchronously with a blocking client: `unsupported` says so at load time.
Past the last turn the client raises `_TurnsExhausted`, a BaseException: these versions wrap every Exception a
model call raises (into `vf.ModelError`, then `state["error"]`, and some keep looping), so only a BaseException
stops the rollout where it stands. The rollout's own state is then out of reach, so the rubric scores the
episode so far from what the environment sent the model: the row's prompt, answer, task and info, and the
messages after the prompt as the completion.
"""

from __future__ import annotations

import asyncio
import copy
import importlib
import inspect
import json
import time
import uuid
from typing import Any

from nodus.env.adapters.verifiers_replay import Played, Run, pending_after_last_reply
from nodus.env.adapters.verifiers_tool_calls import split_tool_calls

MODEL = "nodus-replay"
TUPLE_SHAPE = ("client", "model", "prompt")
"""The first parameters of a 0.1.2-0.1.7 rollout; 0.1.8-0.1.10 begin with `input`."""


class _TurnsExhausted(BaseException):
    """The rollout asked for a model turn the request does not have yet: the episode goes on."""


def unsupported(env: Any) -> str | None:
    """Why this verifiers' rollout cannot be replayed with an OpenAI-shaped client, or None."""
    rollout = getattr(env, "rollout", None)
    if rollout is None:
        return "its environment has no rollout method"
    if not inspect.iscoroutinefunction(rollout):
        return "its rollout is synchronous (verifiers 0.1.0 and 0.1.1), which nodus does not replay"
    names = list(inspect.signature(rollout).parameters)
    if names[:1] == ["input"] or tuple(names[:3]) == TUPLE_SHAPE:
        return None
    return f"its rollout takes ({', '.join(names)}), a shape nodus does not replay"


class OpenAIReplay:
    """Replays the model's turns through `chat.completions.create` / `completions.create`."""

    def __init__(self, env: Any) -> None:
        self._env = env
        self._takes_input = list(inspect.signature(env.rollout).parameters)[:1] == ["input"]

    def play(self, row: dict[str, Any], turns: list[str], with_tools: bool, run: Run) -> Played:
        row = self._with_tools_in_info(row)
        client = _ReplayOpenAI(turns, with_tools)
        try:
            if self._takes_input:
                return Played(run(self._env.rollout(row, client, MODEL, {})))
            completion, state = run(self._tuple_rollout(row, client))
        except _TurnsExhausted:
            return Played(_state_so_far(row, client.last_prompt), client.pending())
        state = state if isinstance(state, dict) else {}
        # 0.1.2-0.1.6 keep the completion apart from the state; the rubric reads it from the state.
        state.update(prompt=row["prompt"], completion=completion)
        for key in ("answer", "task", "info"):
            state.setdefault(key, row.get(key))
        return Played(state)

    def _tuple_rollout(self, row: dict[str, Any], client: Any) -> Any:
        arguments = {
            "client": client,
            "model": MODEL,
            "prompt": row["prompt"],
            "answer": row.get("answer", ""),
            "task": row.get("task") or "default",
            "info": row.get("info") or {},
            "example_id": row.get("example_id", 0),
            "sampling_args": {},
        }
        parameters = inspect.signature(self._env.rollout).parameters
        return self._env.rollout(**{k: v for k, v in arguments.items() if k in parameters})

    def _with_tools_in_info(self, row: dict[str, Any]) -> dict[str, Any]:
        """The row as these versions' `generate` hands it to the rollout: info a dict, with the env's tools."""
        info = row.get("info")
        if isinstance(info, str):
            try:
                info = json.loads(info)
            except ValueError:
                info = {}
        info = dict(info) if isinstance(info, dict) else {}
        tools = getattr(self._env, "oai_tools", None)
        if tools and "oai_tools" not in info:
            info["oai_tools"] = tools
        return {**row, "info": info}


def _state_so_far(row: dict[str, Any], sent: Any) -> dict[str, Any]:
    prompt = row["prompt"]
    if isinstance(prompt, str):
        completion: Any = sent[len(prompt) :] if isinstance(sent, str) and sent.startswith(prompt) else ""
    else:
        completion = list(sent)[len(prompt) :] if isinstance(sent, list) else []
    return {
        "prompt": prompt,
        "completion": completion,
        "answer": row.get("answer", ""),
        "task": row.get("task") or "default",
        "info": row.get("info") or {},
        "responses": [],
    }


class _Create:
    def __init__(self, respond: Any) -> None:
        self.create = respond


class _Namespace:
    def __init__(self, **fields: Any) -> None:
        self.__dict__.update(fields)


class _ReplayOpenAI:
    """`AsyncOpenAI`'s surface that these verifiers use: its i-th response is the model's i-th turn."""

    base_url = "http://replay.invalid/v1"  # never dialled; some versions log it

    def __init__(self, turns: list[str], with_tools: bool) -> None:
        self.turns = turns
        self.with_tools = with_tools
        self.calls = 0
        self.last_prompt: Any = []
        self.previous_prompt = ""
        self.chat = _Namespace(completions=_Create(self._chat))
        self.completions = _Create(self._completion)

    def _next_turn(self, prompt: Any) -> str:
        if isinstance(self.last_prompt, str) and self.calls:
            self.previous_prompt = self.last_prompt + self.turns[self.calls - 1]
        self.last_prompt = copy.copy(prompt)
        if self.calls >= len(self.turns):
            raise _TurnsExhausted
        self.calls += 1
        return self.turns[self.calls - 1]

    async def _chat(self, *, model: str, messages: Any, **kwargs: Any) -> Any:
        # openai comes with the environment's verifiers, not with nodus-env.
        chat_completion = importlib.import_module("openai.types.chat").ChatCompletion

        await asyncio.sleep(0)
        reply = self._next_turn(list(messages))
        content, calls = split_tool_calls(reply) if self.with_tools else (reply, [])
        tool_calls = [
            {"id": f"call_{self.calls}_{i}", "type": "function", "function": {"name": c.name, "arguments": c.arguments}}
            for i, c in enumerate(calls)
        ]
        message = {"role": "assistant", "content": content if tool_calls else reply, "tool_calls": tool_calls or None}
        choice = {"index": 0, "finish_reason": "tool_calls" if tool_calls else "stop", "message": message}
        return chat_completion.model_validate(
            {
                "id": uuid.uuid4().hex,
                "object": "chat.completion",
                "created": int(time.time()),
                "model": model,
                "choices": [choice],
            }
        )

    async def _completion(self, *, model: str, prompt: str, **kwargs: Any) -> Any:
        completion_type = importlib.import_module("openai.types").Completion

        await asyncio.sleep(0)
        reply = self._next_turn(prompt)
        choice = {"index": 0, "finish_reason": "stop", "text": reply, "logprobs": None}
        return completion_type.model_validate(
            {
                "id": uuid.uuid4().hex,
                "object": "text_completion",
                "created": int(time.time()),
                "model": model,
                "choices": [choice],
            }
        )

    def pending(self) -> tuple[str, str]:
        """(role, text) of what the environment said after the model's last turn."""
        if isinstance(self.last_prompt, str):
            start = len(self.previous_prompt) if self.last_prompt.startswith(self.previous_prompt) else 0
            return "user", self.last_prompt[start:]
        return pending_after_last_reply(self.last_prompt)
