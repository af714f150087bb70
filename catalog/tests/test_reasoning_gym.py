"""nodus/reasoning-gym: five reviewed families, each scored by its own score_answer."""

from __future__ import annotations

import collections

import pytest

FOLDER, MODULE = "reasoning-gym", "reasoning_gym_env"
# Families whose gold answer is long enough that finding it in the prompt would be a real leak (word_sorting
# may be asked to sort words that are already sorted; a family relation such as "son" hides in "Jason").
LEAK_CHECKED = ("mini_sudoku", "knights_knaves", "caesar_cipher")


@pytest.fixture(scope="module")
def env(catalog):
    return catalog.load(FOLDER)


def test_splits_and_shapes(env, checks):
    checks.check_shapes(env, {"train": 1989, "test": 500})
    checks.check_repeatable(env)


def test_same_tasks_in_every_process(env, task_dumps, dump):
    first, second = task_dumps
    assert first[MODULE] == second[MODULE] == dump(env)


def test_every_fifth_entry_is_held_out_and_families_are_mixed(env):
    test, train = env.tasks("test"), env.tasks("train")
    assert all(t["metadata"]["index"] % 5 == 4 for t in test)
    assert all(t["metadata"]["index"] % 5 != 4 for t in train)
    assert collections.Counter(t["metadata"]["family"] for t in test) == dict.fromkeys(env.FAMILIES, 100)
    assert len({t["metadata"]["family"] for t in test[:20]}) == len(env.FAMILIES)


def test_no_answer_in_prompt_or_metadata(env):
    for task in env.tasks("test") + env.tasks("train"):
        assert set(task["metadata"]) == {"family", "index"}
        assert task["metadata"]["family"] == task["answer"]["family"]
        if task["metadata"]["family"] in LEAK_CHECKED:
            assert task["answer"]["entry"]["answer"] not in task["prompt"]


def test_fixture_cases(env, checks):
    checks.check_fixtures(env, FOLDER)


def test_gold_answers_score_one(env, checks):
    golds = [(f"<answer>{t['answer']['entry']['answer']}</answer>", t["answer"]) for t in env.tasks("test")[:20]]
    checks.check_gold(env, golds)


def test_scorers_give_wrong_answers_less_than_one(env):
    """The review behind the family list: per family, another entry's different answer and junk score
    below 1.0 on every held-out task (the families left out fail this or have no gold answer)."""
    by_family = collections.defaultdict(list)
    for task in env.tasks("test"):
        by_family[task["answer"]["family"]].append(task)
    for family, tasks in by_family.items():
        for i, task in enumerate(tasks):
            other = tasks[(i + 1) % len(tasks)]["answer"]["entry"]["answer"]
            if other != task["answer"]["entry"]["answer"]:
                assert env.reward(f"<answer>{other}</answer>", task["answer"]) < 1.0, family
            for junk in ("I don't know", "<answer>yes</answer>", "0", "<answer>[]</answer>"):
                assert env.reward(junk, task["answer"]) < 1.0, (family, junk)


def test_partial_credit_is_incorrect_with_its_reward(env, checks):
    sudoku = next(t for t in env.tasks("test") if t["metadata"]["family"] == "mini_sudoku")
    rows = sudoku["answer"]["entry"]["answer"].split("\n")
    # Swap two cells of the first row: 14 of 16 cells stay right.
    first = rows[0].split()
    first[0], first[1] = first[1], first[0]
    broken = "\n".join([" ".join(first), *rows[1:]])
    verdict, reward = checks.verdict(env, f"<answer>{broken}</answer>", sudoku["answer"])
    # mini_sudoku's scorer: the share of right cells, times 0.9 for an answer that is not the exact grid.
    assert verdict == "Incorrect" and reward == pytest.approx(14 / 16 * 0.9)


def test_whole_completion_is_scored_without_a_tag(env):
    task = next(t for t in env.tasks("test") if t["metadata"]["family"] == "family_relationships")
    assert env.extract_answer(task["answer"]["entry"]["answer"]) == task["answer"]["entry"]["answer"]
    assert env.reward(task["answer"]["entry"]["answer"], task["answer"]) == 1.0


def test_junk_never_raises(env, checks):
    for family in env.FAMILIES:
        task = next(t for t in env.tasks("test") if t["metadata"]["family"] == family)
        checks.check_junk(env, task["answer"])
