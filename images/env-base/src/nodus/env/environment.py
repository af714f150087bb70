"""A loaded environment: tasks with ids per split and seed, and grading of one JSON line at a time.

Who uses it: `nodus.env.cli` (tasks, grade, info, selfcheck) and the tests. It applies the contract's
rules on top of any adapter: stable ids, a test prompt never in train, duplicates kept once, seeded
order, verdicts from `contract.classify`, a per-task time limit, and rewards that print cannot break
the JSON-lines protocol (the CLI sends their output to stderr).
"""

from __future__ import annotations

import os
import signal
import time
import traceback
from importlib import metadata as importlib_metadata
from typing import Any

from nodus.env import contract, splits
from nodus.env import evidence as evidence_notes
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
        self._by_id: dict[str, tuple[Task, RawTask]] = {}

    # --- tasks ---------------------------------------------------------------------------------------

    def tasks(self, split: str) -> list[Task]:
        """The split's tasks in the environment's order, with ids; a test prompt never appears in train."""
        if self._tasks is None:
            self._tasks = self._materialise()
        return self._tasks[split]

    def _materialise(self) -> dict[str, list[Task]]:
        out: dict[str, list[Task]] = {}
        # An adapter whose tasks may share a prompt (OpenEnv: one game, a seed per task) says what tells them apart.
        key_of = getattr(self.adapter, "task_key", None) or (lambda raw: splits.prompt_key(raw.prompt))
        test_prompts = {key_of(t) for t in self.adapter.raw_tasks("test")}
        for split in ("test", "train"):
            seen: set[str] = set()
            kept: list[Task] = []
            for index, raw in enumerate(self.adapter.raw_tasks(split)):
                key = key_of(raw)
                if key in seen or (split == "train" and key in test_prompts):
                    continue
                seen.add(key)
                task_id = splits.task_id(split, raw.prompt, raw.metadata)
                kept.append(Task(task_id, split, raw.prompt, raw.answer, dict(raw.metadata), index))
            out[split] = kept
        # Graders look tasks up per line: keep the adapter's view of each one ready.
        self._by_id = {t.task_id: (t, RawTask(t.prompt, t.answer, t.metadata)) for s in SPLITS for t in out[s]}
        return out

    def ordered(self, split: str, seed: int) -> list[Task]:
        return splits.seeded_order(self.tasks(split), self.settings.name, self.settings.version, split, seed)

    def adapter_task(self, task: Task) -> RawTask:
        """The adapter's view of `task` (what reward, step and gold_completions take)."""
        found = self._lookup(task.task_id)
        assert found is not None  # every Task comes from this environment's own lists
        return found[1]

    def _lookup(self, task_id: str) -> tuple[Task, RawTask] | None:
        if self._tasks is None:
            self._tasks = self._materialise()
        return self._by_id.get(task_id)

    def by_index(self, split: str, index: int) -> Task | None:
        """The task at `index` of the list the environment returned for `split` (fixture cases use it)."""
        return next((t for t in self.tasks(split) if t.index == index), None)

    # --- grading -------------------------------------------------------------------------------------

    def grade_line(self, line: Any, timeout_s: float | None = None) -> dict[str, Any]:
        """One `{"taskId", "completion" | "turns"}` request -> one result line (never raises)."""
        started = time.perf_counter()
        evidence_notes.begin()
        task_id = line.get("taskId") if isinstance(line, dict) else None
        found = self._lookup(task_id) if isinstance(task_id, str) else None
        extra: dict[str, Any] = {}
        answer: str | None = None
        if not isinstance(task_id, str):
            outcome = contract.failure('malformed line: expected {"taskId", "completion"}')
        elif found is None:
            outcome = contract.failure(f"unknown taskId {task_id!r}")
        elif isinstance(line.get("turns"), list) and all(isinstance(t, str) for t in line["turns"]):
            outcome, extra = self._step(found[1], line["turns"], timeout_s)
        elif isinstance(completion := line.get("completion"), str):
            raw = found[1]
            outcome = self._guarded(lambda: self.adapter.reward(completion, raw), timeout_s)
            answer = self.adapter.extracted(completion)
        else:
            outcome = contract.failure("malformed line: 'completion' must be a string or 'turns' a list of strings")
        evidence: dict[str, Any] = {
            **evidence_notes.collect(),
            "durationMs": round((time.perf_counter() - started) * 1000, 3),
        }
        if outcome.message:
            evidence["message"] = outcome.message
        if answer is not None:
            evidence["answer"] = answer[:2000]
        if self.isolation != "uid":
            evidence["isolation"] = self.isolation
        return {"taskId": task_id, "verdict": outcome.verdict, "reward": outcome.reward, "evidence": evidence, **extra}

    def _step(self, raw: RawTask, turns: list[str], timeout_s: float | None) -> tuple[Outcome, dict[str, Any]]:
        box: dict[str, Any] = {}

        def run() -> Any:
            result = self.adapter.step(turns, raw)
            box["next"], box["done"] = result.next_message, result.next_message is None
            box["role"] = result.role
            return result.reward

        outcome = self._guarded(run, timeout_s)
        if outcome.verdict == contract.INFRASTRUCTURE_FAILURE:
            return outcome, {"next": None, "done": True}
        extra = {"next": box.get("next"), "done": box.get("done", True)}
        if box.get("role", "user") != "user" and extra["next"] is not None:
            extra["nextRole"] = box["role"]  # only a tool result says so: a line without it is the user's turn
        return outcome, extra

    def _guarded(self, function: Any, timeout_s: float | None) -> Outcome:
        # A per-task alarm for Python code (the host kills graders that hang in C code). The handler is
        # installed once: re-installing it per line cost more than most rewards.
        armed = bool(timeout_s and timeout_s > 0)
        if armed:
            _install_alarm()
            signal.setitimer(signal.ITIMER_REAL, timeout_s)  # type: ignore[arg-type]
        try:
            value = function()
        except GradeTimeoutError:
            return contract.failure(f"reward took longer than {timeout_s:g}s")
        except Exception as exc:
            return contract.failure(f"{type(exc).__name__}: {str(exc)[:300]} {_where(exc)}")
        finally:
            if armed:
                signal.setitimer(signal.ITIMER_REAL, 0)
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


_ALARM = {"installed": False}


def _install_alarm() -> None:
    if not _ALARM["installed"]:

        def expire(signum: int, frame: Any) -> None:
            raise GradeTimeoutError

        signal.signal(signal.SIGALRM, expire)
        _ALARM["installed"] = True


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


def _where(exc: BaseException) -> str:
    """`in reward (reverse_words.py:12)`: the function, file and line the exception was raised at (the
    innermost frame), so a build's self-check failure or a failed grading's evidence points at the line to fix."""
    frames = traceback.extract_tb(exc.__traceback__)
    if not frames:
        return "in the reward"
    return f"in {frames[-1].name} ({os.path.basename(frames[-1].filename)}:{frames[-1].lineno})"
