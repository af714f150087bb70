"""nodus/arithmetic: generated expressions, their values, and a cheap integer reward."""

from __future__ import annotations

import re
import time

import pytest

FOLDER, MODULE = "arithmetic", "arithmetic_env"


@pytest.fixture(scope="module")
def env(catalog):
    return catalog.load(FOLDER)


def test_splits_and_shapes(env, checks):
    checks.check_shapes(env, {"train": 5000, "test": 500})
    checks.check_repeatable(env)


def test_same_tasks_in_every_process(env, task_dumps, dump):
    first, second = task_dumps
    assert first[MODULE] == second[MODULE] == dump(env)


def test_answers_are_the_values_of_the_expressions(env):
    for split in ("train", "test"):
        for task in env.tasks(split):
            expression = task["prompt"].split("\n\n")[1]
            assert re.fullmatch(r"[\d +\-*()]+", expression)
            assert eval(expression) == task["answer"]  # our own generated text: digits, + - * and parentheses
            assert 2 <= task["metadata"]["operators"] <= 4


def test_no_answer_in_prompt_or_metadata(env):
    for task in env.tasks("test") + env.tasks("train"):
        assert set(task["metadata"]) == {"operators"}
        # Operands have at most two digits and are separated by spaces, so a 3-digit answer in the prompt
        # could only be the answer itself.
        if abs(task["answer"]) >= 100:
            assert str(task["answer"]) not in task["prompt"]


def test_fixture_cases(env, checks):
    checks.check_fixtures(env, FOLDER)


def test_gold_answers_score_one(env, checks):
    checks.check_gold(env, [(f"<answer>{t['answer']}</answer>", t["answer"]) for t in env.tasks("test")[:20]])


def test_junk_never_raises(env, checks):
    checks.check_junk(env, env.tasks("test")[0]["answer"])


@pytest.mark.parametrize(
    ("completion", "expected"),
    [
        ("<answer>-667</answer>", 1.0),
        ("<answer>-667.0</answer>", 1.0),
        ("<answer>+667</answer>", 0.0),
        ("<answer>-667</answer> then <answer>12</answer>", 0.0),
        ("<answer>12</answer> then <answer>-667</answer>", 1.0),
        ("<answer>-66 7</answer>", None),
        ("<answer>-667.5</answer>", None),
        ("<answer>" + "1" * 40 + "</answer>", 0.0),
    ],
)
def test_reward_parsing(env, completion, expected):
    assert env.reward(completion, -667) == expected


def test_reward_is_cheap(env):
    """The reward is benchmarked at thousands of gradings a second; keep it far below a millisecond."""
    completion = "Working: " + "40 - 17 = 23. " * 40 + "<answer>1263</answer>"
    started = time.perf_counter()
    for _ in range(2000):
        env.reward(completion, 1263)
    assert time.perf_counter() - started < 0.5
