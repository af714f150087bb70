"""What goes into the grading service and what comes out: environments, grading requests and verdicts.

Who uses it: `GradingService` (the job supervisor calls it with `EnvironmentRef`s and requests, and
gets `Verdict`s back), `Grader` (builds verdicts from grader replies and from its own failures).
Field names in JSON follow the Environment contract (camelCase: `taskId`, `outputSha256`).
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Final, Literal

from nodus.errors import ConfigError

CORRECT: Final = "Correct"
INCORRECT: Final = "Incorrect"
INVALID_OUTPUT: Final = "InvalidOutput"
INFRASTRUCTURE_FAILURE: Final = "InfrastructureFailure"
VERDICTS = (CORRECT, INCORRECT, INVALID_OUTPUT, INFRASTRUCTURE_FAILURE)

VerdictName = Literal["Correct", "Incorrect", "InvalidOutput", "InfrastructureFailure"]


@dataclass(frozen=True)
class EnvironmentRef:
    """Which environment to grade with.

    Container mode needs `image` (a local image reference; nothing is ever pulled) and records
    `digest` when given. Process mode needs `paths`: the environment's folders, staged for the grader uid
    and put on `NODUS_ENVIRONMENT_PATH`, with `site_dirs` for its own dependencies (if any).
    """

    name: str
    version: str
    image: str | None = None
    digest: str | None = None
    paths: tuple[Path, ...] = ()
    site_dirs: tuple[Path, ...] = ()
    loader: str | None = None

    def __post_init__(self) -> None:
        if not self.image and not self.paths:
            raise ConfigError(f"environment {self.name}@{self.version}: give an image or the folders of its package")

    @property
    def label(self) -> str:
        return f"{self.name}@{self.version}"

    @property
    def key(self) -> tuple[str, str, str | None, str | None, tuple[str, ...], tuple[str, ...], str | None]:
        """Identity of the graders that can serve this environment (one pool per key and job)."""
        return (
            self.name,
            self.version,
            self.image,
            self.digest,
            tuple(str(p) for p in self.paths),
            tuple(str(p) for p in self.site_dirs),
            self.loader,
        )


@dataclass(frozen=True)
class GradeRequest:
    """One line for `nodus-env grade`: a single-turn completion or the turns of a multi-turn episode."""

    task_id: str
    completion: str | None = None
    turns: tuple[str, ...] | None = None

    def __post_init__(self) -> None:
        if (self.completion is None) == (self.turns is None):
            raise ConfigError(f"task {self.task_id}: give exactly one of 'completion' and 'turns'")

    @classmethod
    def from_json(cls, item: Mapping[str, Any]) -> GradeRequest:
        """`{"taskId", "completion"}` or `{"taskId", "turns": [...]}`, as the attempt API receives them."""
        task_id = item.get("taskId")
        if not isinstance(task_id, str) or not task_id:
            raise ConfigError(f"a grading request needs a string 'taskId', got {item!r:.200}")
        completion = item.get("completion")
        turns = item.get("turns")
        if completion is not None and not isinstance(completion, str):
            raise ConfigError(f"task {task_id}: 'completion' must be a string")
        if turns is not None and not (isinstance(turns, list) and all(isinstance(t, str) for t in turns)):
            raise ConfigError(f"task {task_id}: 'turns' must be a list of strings")
        return cls(task_id, completion, tuple(turns) if turns is not None else None)

    def to_json(self) -> dict[str, Any]:
        if self.turns is not None:
            return {"taskId": self.task_id, "turns": list(self.turns)}
        return {"taskId": self.task_id, "completion": self.completion}


NEXT_ROLES = ("user", "tool")
"""Who may speak a multi-turn line's `next` (`nextRole`; absent means the user)."""


@dataclass(frozen=True)
class Verdict:
    """One graded line, with the evidence the host recorded while the grader produced it.

    `evidence` is `{"process": {...}, "exitCode", "durationMs", "inputSha256", "outputSha256",
    "sandbox": <the grader's own evidence or null>}`; `message` says why for host-made failures.
    """

    task_id: str
    verdict: VerdictName
    reward: float | None
    evidence: dict[str, Any] = field(default_factory=dict)
    next: Any = None
    done: bool | None = None
    next_role: str | None = None
    """Who speaks `next` in the chat: None for the user's turn, "tool" for the result of the model's tool call."""

    def to_json(self) -> dict[str, Any]:
        out: dict[str, Any] = {
            "taskId": self.task_id,
            "verdict": self.verdict,
            "reward": self.reward,
            "evidence": self.evidence,
        }
        if self.done is not None:
            out["next"] = self.next
            out["done"] = self.done
            if self.next_role is not None and self.next is not None:
                out["nextRole"] = self.next_role
        return out


class MalformedReplyError(ValueError):
    """A grader's reply line that breaks the contract; the stream can no longer be trusted."""


def parse_reply(reply: Any, request: GradeRequest) -> tuple[VerdictName, float | None, dict[str, Any] | None]:
    """Check one decoded reply against the request it answers: verdict, reward and the sandbox evidence."""
    if not isinstance(reply, dict):
        raise MalformedReplyError(f"reply is a JSON {type(reply).__name__}, not an object")
    if reply.get("taskId") != request.task_id:
        raise MalformedReplyError(f"reply is for taskId {reply.get('taskId')!r}, expected {request.task_id!r}")
    verdict = reply.get("verdict")
    if verdict not in VERDICTS:
        raise MalformedReplyError(f"unknown verdict {verdict!r}")
    reward = reply.get("reward")
    if reward is not None:
        if isinstance(reward, bool) or not isinstance(reward, int | float) or not math.isfinite(reward):
            raise MalformedReplyError(f"reward {reward!r} is not a finite number")
        reward = float(reward)
    if verdict == INFRASTRUCTURE_FAILURE and reward is not None:
        raise MalformedReplyError("an InfrastructureFailure must carry no reward")
    if verdict != INFRASTRUCTURE_FAILURE and reward is None:
        raise MalformedReplyError(f"a {verdict} verdict needs a reward")
    evidence = reply.get("evidence")
    if evidence is not None and not isinstance(evidence, dict):
        raise MalformedReplyError("evidence must be an object")
    name: VerdictName = verdict
    return name, reward, evidence
