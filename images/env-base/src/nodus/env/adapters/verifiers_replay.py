"""What every verifiers replay shares: the `Replay` seam, its result, and reading the messages a rollout sent.

Who uses it: `adapters.verifiers_classic` (it holds one `Replay` per environment, chosen by what the installed
verifiers offers) and the replays themselves: `verifiers_replay_client` (a `verifiers.clients.Client`, verifiers
0.1.11 and later) and `verifiers_replay_openai` (an `AsyncOpenAI`-shaped client, verifiers 0.1.2 to 0.1.10).
A replay plays the environment's own rollout with the model's turns as the model's responses; when the rollout
asks for a turn the request does not have yet, the episode goes on and the replay reports what the environment
said after the model's last turn.
"""

from __future__ import annotations

from collections.abc import Callable, Coroutine
from dataclasses import dataclass
from typing import Any, Protocol

Run = Callable[[Coroutine[Any, Any, Any]], Any]
"""Runs a coroutine to its end on the adapter's event loop."""


@dataclass
class Played:
    """A replayed rollout: its state (for the rubric) and, while the episode goes on, (role, text) of the
    environment's messages after the model's last turn."""

    state: Any
    pending: tuple[str, str] | None = None


class Replay(Protocol):
    """Plays one rollout of the environment with `turns` as the model's responses."""

    def play(self, row: dict[str, Any], turns: list[str], with_tools: bool, run: Run) -> Played: ...


def text_of(content: Any) -> str:
    """A message's content as text (a list of parts joins its text parts)."""
    if content is None:
        return ""
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        texts = []
        for part in content:
            text = part.get("text") if isinstance(part, dict) else getattr(part, "text", None)
            if isinstance(text, str):
                texts.append(text)
        return "".join(texts)
    return str(content)


def field_of(message: Any, name: str) -> Any:
    return message.get(name) if isinstance(message, dict) else getattr(message, name, None)


def pending_after_last_reply(messages: list[Any]) -> tuple[str, str]:
    """(role, text) of the messages after the last assistant message: `tool` when all are tool results."""
    after: list[Any] = []
    for message in reversed(messages):
        if field_of(message, "role") == "assistant":
            break
        after.append(message)
    after.reverse()
    roles = {field_of(m, "role") for m in after}
    role = "tool" if roles == {"tool"} else "user"
    return role, "\n\n".join(text_of(field_of(m, "content")) for m in after)
