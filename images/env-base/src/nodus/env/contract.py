"""The verdicts and the JSON-line shapes of the Environment contract, shared by every adapter.

Who uses it: `grading.py` turns what a reward function returned (or raised) into a verdict with
`classify`; `cli.py` writes the lines. The rules are the seeds': 1 or True is Correct, lower is Incorrect,
None is InvalidOutput with reward 0, and anything else (an exception, a string, NaN) is
InfrastructureFailure with no reward, so a broken grader never looks like a wrong answer.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass, field
from typing import Any

CORRECT = "Correct"
INCORRECT = "Incorrect"
INVALID_OUTPUT = "InvalidOutput"
INFRASTRUCTURE_FAILURE = "InfrastructureFailure"
VERDICTS = (CORRECT, INCORRECT, INVALID_OUTPUT, INFRASTRUCTURE_FAILURE)


@dataclass(frozen=True)
class Task:
    """One task as the environment gave it; `answer` never leaves the grader."""

    task_id: str
    split: str
    prompt: str | list[dict[str, Any]]
    answer: Any
    metadata: dict[str, Any] = field(default_factory=dict)
    index: int = 0
    """Position in the list the environment returned for its split (fixture cases refer to it)."""

    def public(self) -> dict[str, Any]:
        """What `nodus-env tasks` prints: id, prompt and metadata, never the answer."""
        return {"taskId": self.task_id, "prompt": self.prompt, "metadata": self.metadata}


@dataclass(frozen=True)
class Outcome:
    """A verdict with its reward (None for InfrastructureFailure) and why, when there is something to say."""

    verdict: str
    reward: float | None
    message: str | None = None


def classify(value: Any) -> Outcome:
    """What a reward function returned -> verdict and reward."""
    if value is None:
        return Outcome(INVALID_OUTPUT, 0.0, "no parsable answer")
    if isinstance(value, bool):
        return Outcome(CORRECT if value else INCORRECT, 1.0 if value else 0.0)
    if isinstance(value, int | float) and not isinstance(value, bool):
        number = float(value)
        if math.isnan(number) or math.isinf(number):
            return Outcome(INFRASTRUCTURE_FAILURE, None, f"reward returned {value!r}: not a finite number")
        return Outcome(CORRECT if number >= 1.0 else INCORRECT, number)
    # numpy and other numeric scalars convert; strings, lists and objects do not count as rewards.
    if not isinstance(value, str | bytes) and hasattr(value, "__float__") and hasattr(value, "dtype"):
        return classify(float(value))
    shown = repr(value)
    if len(shown) > 80:
        shown = shown[:77] + "..."
    return Outcome(
        INFRASTRUCTURE_FAILURE,
        None,
        f"reward returned {type(value).__name__} {shown}; return a number, a bool or None",
    )


def failure(message: str) -> Outcome:
    return Outcome(INFRASTRUCTURE_FAILURE, None, message)


def dumps(obj: Any) -> str:
    """One JSON line: compact, UTF-8, keys in a stable order (manifests hash these bytes)."""
    return LINE_ENCODER.encode(obj)


def _default(obj: Any) -> Any:
    if hasattr(obj, "tolist"):  # numpy arrays and scalars in metadata
        return obj.tolist()
    if isinstance(obj, set | frozenset | tuple):
        return sorted(obj, key=repr) if isinstance(obj, set | frozenset) else list(obj)
    return repr(obj)


# Built once: constructing an encoder per line cost a noticeable share of a grading.
LINE_ENCODER = json.JSONEncoder(ensure_ascii=False, separators=(",", ":"), sort_keys=True, default=_default)
