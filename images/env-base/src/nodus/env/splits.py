"""Deterministic splits, stable task ids and seeded task order.

Who uses it: the adapters (to hold out tasks of a list that has no splits) and `environment.py` (ids,
de-duplication, seeded order). Everything here is a pure function of the task content, the environment's
name and version, the split and the seed, so two processes on two machines print the same bytes.
"""

from __future__ import annotations

import hashlib
import random
from collections.abc import Sequence
from typing import Any, TypeVar

from nodus.env.contract import dumps

T = TypeVar("T")
MIN_HELD_OUT = 16


def prompt_key(prompt: Any) -> str:
    """The canonical text of a prompt (string or chat messages), for equality across splits."""
    return prompt if isinstance(prompt, str) else dumps(prompt)


def task_id(split: str, prompt: Any, metadata: dict[str, Any]) -> str:
    """`t` + 16 hex digits of sha256(split, prompt, metadata): the same task always has the same id."""
    digest = hashlib.sha256(dumps([split, prompt, metadata]).encode()).hexdigest()
    return "t" + digest[:16]


def held_out_positions(count: int) -> set[int]:
    """Which positions of a list without splits are held out: every fifth, and at least 16.

    Every fifth entry (positions 4, 9, ...) first; when that is fewer than 16, the next positions of the
    other residues (3, 8, ... then 2, 7, ...) until 16 are held out, always leaving one task to train on.
    """
    wanted = min(max(count // 5, MIN_HELD_OUT), max(count - 1, 0))
    chosen: list[int] = []
    for residue in (4, 3, 2, 1, 0):
        for position in range(residue, count, 5):
            if len(chosen) == wanted:
                return set(chosen)
            chosen.append(position)
    return set(chosen)


def split_list(items: Sequence[T]) -> tuple[list[T], list[T]]:
    """(train, test) of a list handed over without splits."""
    held = held_out_positions(len(items))
    return [x for i, x in enumerate(items) if i not in held], [x for i, x in enumerate(items) if i in held]


def seeded_order(items: Sequence[T], name: str, version: str, split: str, seed: int) -> list[T]:
    """The tasks of a split in the order the seed gives; the same inputs always give the same order."""
    shuffled = list(items)
    # random.Random with a str seed hashes it with sha512: stable across processes and platforms.
    random.Random(f"{name}@{version}:{split}:{seed}").shuffle(shuffled)
    return shuffled
