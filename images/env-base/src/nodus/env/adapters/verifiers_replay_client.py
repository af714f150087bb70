"""Replay through a `verifiers.clients.Client` (verifiers 0.1.11 on; 0.3.1 keeps it in `verifiers.legacy.clients`).

Who uses it: `adapters.verifiers_classic`, when the environment's verifiers package has a `clients` module.
The rollout is `env.rollout(input, client, model, sampling_args)` and returns the state; the replay client's
`get_response` answers every model call itself with a `Response` whose message is the model's i-th turn (its
`<tool_call>` blocks become the message's `ToolCall`s when the task offers tools).
"""

from __future__ import annotations

import importlib
import time
import uuid
from typing import Any

from nodus.env.adapters.base import AdapterError
from nodus.env.adapters.verifiers_replay import Played, Run, pending_after_last_reply
from nodus.env.adapters.verifiers_tool_calls import split_tool_calls

MODEL = "nodus-replay"


class _TurnsExhaustedError(Exception):
    """The rollout asked for a model turn the request does not have yet: the episode goes on."""


class ClientReplay:
    """Replays the model's turns through a subclass of `<root>.clients.Client`."""

    def __init__(self, env: Any, root: str) -> None:
        self._env = env
        self._types = importlib.import_module(f"{root}.types")
        self._client_base = importlib.import_module(f"{root}.clients").Client

    def play(self, row: dict[str, Any], turns: list[str], with_tools: bool, run: Run) -> Played:
        client = _make_replay_client(self._client_base, self._types, turns, with_tools)
        try:
            state = run(self._env.rollout(row, client, MODEL, {}))
        except _TurnsExhaustedError:
            # The environment answered the last turn and waits for the next one: the episode goes on.
            return Played(client.state, pending_after_last_reply(client.last_prompt))
        return Played(state)


def _make_replay_client(base: type, types: Any, turns: list[str], with_tools: bool) -> Any:
    """A verifiers Client whose i-th response is the model's i-th turn; past the last, it stops the rollout."""

    class ReplayClient(base):  # type: ignore[misc]
        def __init__(self) -> None:
            super().__init__(None)
            self.turns = turns
            self.calls = 0
            self.state: Any = None
            self.last_prompt: list[Any] = []

        async def get_response(
            self, prompt: Any, model: str, sampling_args: Any, tools: Any = None, **kwargs: Any
        ) -> Any:
            self.state = kwargs.get("state")
            self.last_prompt = list(prompt)
            if self.calls >= len(self.turns):
                raise _TurnsExhaustedError
            reply = self.turns[self.calls]
            self.calls += 1
            content, calls = split_tool_calls(reply) if with_tools else (reply, [])
            tool_calls = [
                types.ToolCall(id=f"call_{self.calls}_{i}", name=c.name, arguments=c.arguments)
                for i, c in enumerate(calls)
            ]
            message = types.ResponseMessage(
                content=content if tool_calls else reply,
                reasoning_content=None,
                tool_calls=tool_calls or None,
                finish_reason="tool_calls" if tool_calls else "stop",
                is_truncated=False,
            )
            return types.Response(id=uuid.uuid4().hex, created=int(time.time()), model=model, message=message)

        # The abstract hooks of a real client: replaying never reaches them.
        def setup_client(self, config: Any) -> Any:
            return None

        async def to_native_tool(self, tool: Any) -> Any:
            return tool

        async def to_native_prompt(self, messages: Any) -> tuple[Any, dict[str, Any]]:
            return messages, {}

        async def get_native_response(self, *args: Any, **kwargs: Any) -> Any:
            # The replay answers every model call itself (`get_response`); verifiers asking this means a version
            # whose rollout calls the model another way, which grading (no network, no model) cannot serve.
            raise AdapterError(
                "verifiers asked the replay client for a model response by a path nodus does not replay "
                "(get_native_response); this verifiers version is not supported"
            )

        async def raise_from_native_response(self, response: Any) -> None:
            return None

        async def from_native_response(self, response: Any) -> Any:
            return response

        async def close(self) -> None:
            return None

    return ReplayClient()
