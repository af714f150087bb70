"""The seam every adapter implements: raw tasks per split, and a reward (or multi-turn step) per task.

Who uses it: `nodus.env.environment` calls `adapt()` from `adapters/__init__.py` and then only talks to
this interface, so verifiers, OpenEnv and verl/SkyRL become one module each without touching the rest.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Protocol


@dataclass(frozen=True)
class RawTask:
    """A task as an adapter produced it, before ids and seeds."""

    prompt: str | list[dict[str, Any]]
    answer: Any
    metadata: dict[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class StepResult:
    """One multi-turn step: the environment's next message (None once the episode ended) and the reward so far."""

    next_message: str | None
    reward: Any
    role: str = "user"
    """Who speaks `next_message` in the chat: `user` (the environment's feedback) or `tool` (the result of the
    tool call the model's last turn made; the trainer renders it as a tool message of the chat template)."""


class Adapter(Protocol):
    """What the grader needs from an environment, whatever library it was written with."""

    kind: str
    """The adapter's name, reported by `nodus-env info` (module, reasoning-gym, ...)."""
    reward_type: str
    """Binary or Continuous."""
    multi_turn: bool

    def raw_tasks(self, split: str) -> list[RawTask]:
        """The tasks of `train` or `test`, in the environment's own order, answers included."""
        ...

    def reward(self, completion: str, task: RawTask) -> Any:
        """Score one completion; may return anything: `contract.classify` judges the value."""
        ...

    def step(self, turns: list[str], task: RawTask) -> StepResult:
        """Replay `turns` (every model turn so far) and return the next message and the reward so far."""
        ...

    def extracted(self, completion: str) -> str | None:
        """The part of the completion that was scored, for evidence (None when the whole was)."""
        ...

    def gold_completions(self, task: RawTask) -> list[str]:
        """Completions that should be Correct for `task` (the self-check grades them)."""
        ...


class AdapterError(Exception):
    """The loaded object cannot be used as an environment; the message says what was expected."""
