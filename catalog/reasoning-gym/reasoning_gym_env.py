"""nodus/reasoning-gym 1.0.0: five reviewed Reasoning Gym families, each scored by its own `score_answer`.

Who calls it: `nodus-env` (the grader CLI in the Environment image) imports this module through the
loader `reasoning_gym_env:load_environment` and uses `tasks(split)` and `reward(completion, answer)`;
the catalog tests import it directly.

The families were chosen because their scorers behave (checked by the catalog tests and in the README):
the gold answer scores 1.0, another entry's answer and junk text score below 1.0, and no text makes them
raise. Families that give full credit to wrong answers, raise on junk, have no gold answer or `eval` the
model's text were left out. Each family has its own seed; entry i of a family is held out when
i % 5 == 4 (the nodus reasoning-gym adapter's rule), and the two splits are then shuffled with a fixed
seed so that any prefix mixes the families.
"""

from __future__ import annotations

import json
import random
import sys
from functools import cache
from typing import Any

import reasoning_gym

from nodus.env.answers import last_answer
from nodus.env.tasklists import generated_once

# family -> seed. Changing a seed or a size changes the tasks: publish a new version then.
FAMILIES: dict[str, int] = {
    "family_relationships": 5101,
    "word_sorting": 5102,
    "mini_sudoku": 5103,
    "knights_knaves": 5104,
    "caesar_cipher": 5105,
}
ENTRIES_PER_FAMILY = 500
SHUFFLE_SEED = 5100
REWARD_TYPE = "Continuous"

INSTRUCTION = "Put only your final answer inside <answer></answer>, with no explanation inside the tags."


def load_environment() -> Any:
    """The loader nodus-env calls: this module is the environment."""
    return sys.modules[__name__]


@cache
def _dataset(family: str) -> Any:
    """The family's generator; `reward` needs it for `score_answer` even before `tasks` ran."""
    return reasoning_gym.create_dataset(family, size=ENTRIES_PER_FAMILY, seed=FAMILIES[family])


def _generate() -> dict[str, list[dict[str, Any]]]:
    splits: dict[str, list[dict[str, Any]]] = {"train": [], "test": []}
    for family in FAMILIES:
        dataset = _dataset(family)
        for index in range(ENTRIES_PER_FAMILY):
            # Through JSON once: the answer must be JSON-serialisable, and the scorer then sees exactly the
            # entry a task manifest would hold (tuples become lists).
            entry = json.loads(json.dumps(dataset[index]))
            task = {
                "prompt": f"{entry['question'].rstrip()}\n\n{INSTRUCTION}",
                "answer": {"family": family, "entry": entry},
                "metadata": {"family": family, "index": index},
            }
            splits["test" if index % 5 == 4 else "train"].append(task)
    # A generator can repeat a question; a prompt is kept once per split and never in train when in test.
    test = _unique(splits["test"], exclude=set())
    train = _unique(splits["train"], exclude={task["prompt"] for task in test})
    for number, split in enumerate((train, test)):
        random.Random(SHUFFLE_SEED + number).shuffle(split)
    return {"train": train, "test": test}


def _unique(items: list[dict[str, Any]], exclude: set[str]) -> list[dict[str, Any]]:
    seen = set(exclude)
    kept = []
    for item in items:
        if item["prompt"] not in seen:
            seen.add(item["prompt"])
            kept.append(item)
    return kept


# The tasks of `train` or `test` (sizes in the README), always the same ones in the same order.
tasks = generated_once(_generate)


def extract_answer(completion: str) -> str:
    """What is scored: the last <answer>...</answer>, stripped, or the whole completion without one."""
    tagged = last_answer(completion)
    return completion if tagged is None else tagged.strip()


def reward(completion: str, answer: dict[str, Any]) -> float | None:
    """The family's own `score_answer` on the extracted answer: 1.0 is Correct, partial credit is
    Incorrect with that reward. None (InvalidOutput) when there is nothing to score: an empty or blank
    completion, or empty answer tags. A scorer that raises is not caught: nodus reports an
    InfrastructureFailure, never a made-up 0."""
    extracted = extract_answer(completion)
    if not extracted.strip():
        return None
    return float(_dataset(answer["family"]).score_answer(extracted, entry=answer["entry"]))


def gold_completion(answer: dict[str, Any]) -> str:
    """A completion that is Correct for `answer` (nodus-env selfcheck grades it)."""
    return f"<answer>{answer['entry']['answer']}</answer>"
