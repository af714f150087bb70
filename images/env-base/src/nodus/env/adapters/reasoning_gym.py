"""Adapter for a reasoning-gym dataset: its entries are the tasks, its own `score_answer` the reward.

Who uses it: `adapters.adapt`, when `load_environment()` returns a reasoning_gym ProceduralDataset (or
anything shaped like one: indexable, sized, with `score_answer`). Every fifth entry is held out; the
model's last `<answer>...</answer>` is its answer, or the whole completion without one; partial credit
is the reward and only a full score is Correct. reasoning_gym itself is never imported here: the dataset
object brings what it needs.
"""

from __future__ import annotations

from typing import Any

from nodus.env.adapters.base import RawTask, StepResult
from nodus.env.answers import last_answer


def accepts(obj: Any) -> bool:
    return callable(getattr(obj, "score_answer", None)) and hasattr(obj, "__getitem__") and hasattr(obj, "__len__")


def extract_answer(completion: str) -> str:
    """The last `<answer>...</answer>` of a completion, or the whole completion without one."""
    found = last_answer(completion)
    return found.strip() if found is not None else completion


class ReasoningGymAdapter:
    """Entries of a procedural dataset; entry i is in test when i % 5 == 4."""

    kind = "reasoning-gym"
    reward_type = "Continuous"
    multi_turn = False

    def __init__(self, dataset: Any) -> None:
        self.dataset = dataset
        self._cache: dict[str, list[RawTask]] | None = None

    def raw_tasks(self, split: str) -> list[RawTask]:
        if self._cache is None:
            cache: dict[str, list[RawTask]] = {"train": [], "test": []}
            for index in range(len(self.dataset)):
                entry = self.dataset[index]
                # Only where the task came from goes into metadata: entry metadata often holds the solution.
                source = entry.get("metadata", {}) if isinstance(entry, dict) else {}
                metadata = {k: source[k] for k in ("source_dataset", "source_index") if k in source}
                task = RawTask(prompt=str(entry["question"]), answer=entry, metadata=metadata)
                cache["test" if index % 5 == 4 else "train"].append(task)
            self._cache = cache
        return self._cache[split]

    def reward(self, completion: str, task: RawTask) -> Any:
        return self.dataset.score_answer(extract_answer(completion), entry=task.answer)

    def step(self, turns: list[str], task: RawTask) -> StepResult:
        return StepResult(None, self.reward(turns[0] if turns else "", task))

    def extracted(self, completion: str) -> str | None:
        return extract_answer(completion)

    def gold_completions(self, task: RawTask) -> list[str]:
        return [f"<answer>{task.answer.get('answer')}</answer>"]
