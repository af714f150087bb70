"""A loaded environment: tasks with ids per split and seed, and grading of one JSON line at a time.

Who uses it: `nodus.env.cli` (tasks, grade, info, selfcheck) and the tests. It applies the contract's
rules on top of any adapter: stable ids, a test prompt never in train, duplicates kept once, seeded
order, verdicts from `contract.classify`, a per-task time limit, and rewards that print cannot break
the JSON-lines protocol (the CLI sends their output to stderr).
"""

from __future__ import annotations

import signal
import time
from collections.abc import Iterator
from contextlib import contextmanager
from importlib import metadata as importlib_metadata
from typing import Any

from nodus.env import contract, splits
from nodus.env.adapters import Adapter, RawTask, adapt
from nodus.env.contract import Outcome, Task
from nodus.env.loader import Settings, load

SPLITS = ("train", "test")


class GradeTimeoutError(Exception):
    """The reward ran past the per-task time limit."""


class Environment:
    """An adapter plus the contract's rules."""

    def __init__(self, adapter: Adapter, settings: Settings, isolation: str = "same-uid") -> None:
        self.adapter = adapter
        self.settings = settings
        self.isolation = isolation
        self._tasks: dict[str, list[Task]] | None = None
        self._by_id: dict[str, Task] = {}

    # --- tasks ---------------------------------------------------------------------------------------

    def tasks(self, split: str) -> list[Task]:
        """The split's tasks in the environment's order, with ids; a test prompt never appears in train."""
        if self._tasks is None:
            self._tasks = self._materialise()
        return self._tasks[split]

    def _materialise(self) -> dict[str, list[Task]]:
        out: dict[str, list[Task]] = {}
        test_prompts = {splits.prompt_key(t.prompt) for t in self.adapter.raw_tasks("test")}
        for split in ("test", "train"):
            seen: set[str] = set()
            kept: list[Task] = []
            for index, raw in enumerate(self.adapter.raw_tasks(split)):
                key = splits.prompt_key(raw.prompt)
                if key in seen or (split == "train" and key in test_prompts):
                    continue
                seen.add(key)
                task_id = splits.task_id(split, raw.prompt, raw.metadata)
                kept.append(Task(task_id, split, raw.prompt, raw.answer, dict(raw.metadata), index))
            out[split] = kept
        self._by_id = {t.task_id: t for split in SPLITS for t in out[split]}
        return out

    def ordered(self, split: str, seed: int) -> list[Task]:
        return splits.seeded_order(self.tasks(split), self.settings.name, self.settings.version, split, seed)

    def find(self, task_id: str) -> Task | None:
        self.tasks("train")
        return self._by_id.get(task_id)

    def by_index(self, split: str, index: int) -> Task | None:
        """The task at `index` of the list the environment returned for `split` (fixture cases use it)."""
        return next((t for t in self.tasks(split) if t.index == index), None)

    # --- grading -------------------------------------------------------------------------------------

    def grade_line(self, line: Any, timeout_s: float | None = None) -> dict[str, Any]:
        """One `{"taskId", "completion" | "turns"}` request -> one result line (never raises)."""
        started = time.perf_counter()
        task_id = line.get("taskId") if isinstance(line, dict) else None
        extra: dict[str, Any] = {}
        if not isinstance(task_id, str):
            outcome = contract.failure('malformed line: expected {"taskId", "completion"}')
        elif (task := self.find(task_id)) is None:
            outcome = contract.failure(f"unknown taskId {task_id!r}")
        elif isinstance(line.get("turns"), list) and all(isinstance(t, str) for t in line["turns"]):
            outcome, extra = self._step(task, line["turns"], timeout_s)
        elif isinstance(line.get("completion"), str):
            outcome = self._reward(task, line["completion"], timeout_s)
            answer = self.adapter.extracted(line["completion"])
            if answer is not None:
                extra["_answer"] = answer
        else:
            outcome = contract.failure("malformed line: 'completion' must be a string or 'turns' a list of strings")
        evidence: dict[str, Any] = {"durationMs": round((time.perf_counter() - started) * 1000, 3)}
        if outcome.message:
            evidence["message"] = outcome.message
        if "_answer" in extra:
            evidence["answer"] = extra.pop("_answer")[:2000]
        if self.isolation != "uid":
            evidence["isolation"] = self.isolation
        result = {"taskId": task_id, "verdict": outcome.verdict, "reward": outcome.reward, "evidence": evidence}
        return {**result, **extra}

    def _reward(self, task: Task, completion: str, timeout_s: float | None) -> Outcome:
        raw = RawTask(task.prompt, task.answer, task.metadata)
        return self._guarded(lambda: self.adapter.reward(completion, raw), timeout_s)

    def _step(self, task: Task, turns: list[str], timeout_s: float | None) -> tuple[Outcome, dict[str, Any]]:
        raw = RawTask(task.prompt, task.answer, task.metadata)
        box: dict[str, Any] = {}

        def run() -> Any:
            result = self.adapter.step(turns, raw)
            box["next"], box["done"] = result.next_message, result.next_message is None
            return result.reward

        outcome = self._guarded(run, timeout_s)
        if outcome.verdict == contract.INFRASTRUCTURE_FAILURE:
            return outcome, {"next": None, "done": True}
        return outcome, {"next": box.get("next"), "done": box.get("done", True)}

    def _guarded(self, function: Any, timeout_s: float | None) -> Outcome:
        try:
            with _time_limit(timeout_s):
                value = function()
        except GradeTimeoutError:
            return contract.failure(f"reward took longer than {timeout_s:g}s")
        except Exception as exc:
            return contract.failure(f"reward raised {type(exc).__name__}: {str(exc)[:300]}")
        return contract.classify(value)

    # --- description -----------------------------------------------------------------------------------

    def info(self) -> dict[str, Any]:
        return {
            "name": self.settings.name,
            "version": self.settings.version,
            "loader": self.settings.loader,
            "adapter": self.adapter.kind,
            "multiTurn": self.adapter.multi_turn,
            "rewardType": self.adapter.reward_type,
            "splits": {split: len(self.tasks(split)) for split in SPLITS},
            "packages": _packages(),
        }


@contextmanager
def _time_limit(seconds: float | None) -> Iterator[None]:
    """SIGALRM-based limit for Python code (the host kills graders that hang in C code)."""
    if not seconds or seconds <= 0:
        yield
        return

    def expire(signum: int, frame: Any) -> None:
        raise GradeTimeoutError

    previous = signal.signal(signal.SIGALRM, expire)
    signal.setitimer(signal.ITIMER_REAL, seconds)
    try:
        yield
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, previous)


def _packages() -> dict[str, str]:
    found: dict[str, str] = {}
    for dist in importlib_metadata.distributions():
        name = dist.metadata["Name"]
        if name:
            found[name.lower()] = dist.version
    return dict(sorted(found.items()))


def load_environment(settings: Settings | None = None, isolation: str = "same-uid") -> Environment:
    """Load the environment the NODUS_* variables name (or `settings`) and wrap it."""
    settings = settings or Settings.from_env()
    return Environment(adapt(load(settings)), settings, isolation)
