"""Verdicts exactly as the seeds say, and stable ids, splits and order."""

from __future__ import annotations

import math

import pytest

from nodus.env import contract, splits


@pytest.mark.parametrize(
    ("value", "verdict", "reward"),
    [
        (1, "Correct", 1.0),
        (1.0, "Correct", 1.0),
        (True, "Correct", 1.0),
        (0.5, "Incorrect", 0.5),
        (0, "Incorrect", 0.0),
        (False, "Incorrect", 0.0),
        (-1, "Incorrect", -1.0),
        (None, "InvalidOutput", 0.0),
        ("yes", "InfrastructureFailure", None),
        ([1], "InfrastructureFailure", None),
        (math.nan, "InfrastructureFailure", None),
        (math.inf, "InfrastructureFailure", None),
    ],
)
def test_classify(value: object, verdict: str, reward: float | None) -> None:
    outcome = contract.classify(value)
    assert (outcome.verdict, outcome.reward) == (verdict, reward)


def test_a_string_reward_says_why() -> None:
    outcome = contract.classify("yes")
    assert outcome.message == "reward returned str 'yes'; return a number, a bool or None"


def test_held_out_is_every_fifth_and_at_least_sixteen() -> None:
    assert splits.held_out_positions(100) == set(range(4, 100, 5))
    small = splits.held_out_positions(40)
    assert len(small) == 16
    assert set(range(4, 40, 5)) <= small
    assert len(splits.held_out_positions(10)) == 9  # always one left to train on
    assert splits.held_out_positions(0) == set()


def test_task_ids_are_stable_and_content_addressed() -> None:
    first = splits.task_id("test", "Reverse abc", {"n": 1})
    assert first == splits.task_id("test", "Reverse abc", {"n": 1})
    assert first != splits.task_id("train", "Reverse abc", {"n": 1})
    assert first != splits.task_id("test", "Reverse abd", {"n": 1})
    assert first.startswith("t") and len(first) == 17


def test_seeded_order_depends_on_every_input() -> None:
    items = list(range(50))
    base = splits.seeded_order(items, "env", "1.0.0", "train", 42)
    assert base == splits.seeded_order(items, "env", "1.0.0", "train", 42)
    assert sorted(base) == items
    for other in (("env", "1.0.0", "train", 43), ("env", "1.0.1", "train", 42), ("env2", "1.0.0", "train", 42)):
        assert splits.seeded_order(items, *other) != base
