"""The legacy letter-counting protocols, shared by nodus/letter-counting-legacy-eval and -rl 1.0.0.

Who calls it: `nodus-env` (the grader CLI in the Environment image) imports this module through the
loader `letter_counting_legacy_env:load_eval` (Environment letter-counting-legacy-eval) or
`letter_counting_legacy_env:load_rl` (letter-counting-legacy-rl) and uses the returned profile's
`tasks(split)`, `reward(completion, answer)`, `gold_completion(answer)` and `REWARD_TYPE`; the catalog
tests load it the same way.

The protocol both profiles share (see the README): Reasoning Gym 0.1.25's `letter_counting` generator
with seed 42 and its default configuration, 128 entries; each prompt is an answer-only system message and
the question as the user message; the generator's own scorer grades the whole raw completion. The profiles
differ only in which 64 entries are each split:

- eval: test = entries 0..63 (the legacy evaluation set); train = entries 64..127, which the legacy
  evaluation never used but which give the Environment a train split as every Environment has;
- rl: train = entries 0..63 (the training data); test = entries 64..127, held out for both the baseline
  and the final evaluation. The protocol's training settings belong to the TrainingJob (see its README).
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from functools import cache
from typing import Any, ClassVar

import reasoning_gym

FAMILY = "letter_counting"
SEED = 42
FIRST_HALF = range(64)
SECOND_HALF = range(64, 128)
SYSTEM_MESSAGE = "Answer with only the final answer. Do not explain your reasoning or add any other text."
REWARD_TYPE = "Continuous"
ASCII_DIGIT = re.compile(r"[0-9]")


@cache
def _dataset() -> Any:
    # One generator for both profiles: they slice the same 128 entries, so a process that loads both
    # (the catalog tests) builds it once.
    return reasoning_gym.create_dataset(FAMILY, size=SECOND_HALF.stop, seed=SEED)


def reward(completion: str, answer: dict[str, Any]) -> float | None:
    """The generator's raw-completion scorer, `score_answer(completion, entry)` on the whole completion:
    1.0 for exactly the count, len(count)/len(completion) when the completion contains it, else 0.0.
    A completion without any digit cannot contain a count (the legacy scorer gives it 0.0): it is
    InvalidOutput (None) here, which nodus also records as a reward of 0."""
    if ASCII_DIGIT.search(completion) is None:
        return None
    return float(_dataset().score_answer(completion, answer))


def gold_completion(answer: dict[str, Any]) -> str:
    """A completion that is Correct for `answer` (nodus-env selfcheck grades it): the bare count."""
    return str(answer["answer"])


@dataclass(frozen=True)
class Profile:
    """One protocol's slicing of the shared generator entries into train and test; what the loaders return."""

    train: range
    test: range
    # Class attributes, so that nodus-env's module adapter reads them from a profile as from a module.
    REWARD_TYPE: ClassVar[str] = REWARD_TYPE
    SYSTEM_MESSAGE: ClassVar[str] = SYSTEM_MESSAGE

    def tasks(self, split: str) -> list[dict[str, Any]]:
        """The split's generator entries in order, as chat prompts; metadata is the entry's index."""
        if split not in ("train", "test"):
            raise ValueError(f"split must be 'train' or 'test' (got {split!r})")
        dataset = _dataset()
        result = []
        for index in self.train if split == "train" else self.test:
            entry = json.loads(json.dumps(dataset[index]))  # JSON-shaped, as a task manifest holds it
            prompt = [{"role": "system", "content": SYSTEM_MESSAGE}, {"role": "user", "content": entry["question"]}]
            result.append({"prompt": prompt, "answer": entry, "metadata": {"index": index}})
        return result

    def reward(self, completion: str, answer: dict[str, Any]) -> float | None:
        """The shared raw-completion scorer (see the module-level `reward`)."""
        return reward(completion, answer)

    def gold_completion(self, answer: dict[str, Any]) -> str:
        """The bare count (see the module-level `gold_completion`)."""
        return gold_completion(answer)


EVAL = Profile(train=SECOND_HALF, test=FIRST_HALF)
RL = Profile(train=FIRST_HALF, test=SECOND_HALF)


def load_eval() -> Profile:
    """The loader of letter-counting-legacy-eval: test = entries 0..63, train = entries 64..127."""
    return EVAL


def load_rl() -> Profile:
    """The loader of letter-counting-legacy-rl: train = entries 0..63, test = entries 64..127."""
    return RL
