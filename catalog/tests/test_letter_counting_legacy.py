"""nodus/letter-counting-legacy-eval and -rl: Reasoning Gym's letter_counting with seed 42, the legacy slicing
and the generator's raw-completion scorer. Both profiles come from the one package letter-counting-legacy
(loaders load_eval and load_rl); every test runs once per profile."""

from __future__ import annotations

import pytest

SYSTEM_MESSAGE = "Answer with only the final answer. Do not explain your reasoning or add any other text."
# folder -> its loader (the key of its task lists in task_dumps) and where each split starts in the
# generator's sequence (64 tasks each).
PROFILES = {
    "letter-counting-legacy-eval": ("letter_counting_legacy_env:load_eval", {"train": 64, "test": 0}),
    "letter-counting-legacy-rl": ("letter_counting_legacy_env:load_rl", {"train": 0, "test": 64}),
}


@pytest.fixture(scope="module", params=sorted(PROFILES))
def folder(request):
    return request.param


@pytest.fixture(scope="module")
def env(catalog, folder):
    return catalog.load(folder)


@pytest.fixture(scope="module")
def generator():
    import reasoning_gym

    return reasoning_gym.create_dataset("letter_counting", size=128, seed=42)


def test_splits_and_shapes(env, checks):
    checks.check_shapes(env, {"train": 64, "test": 64})
    checks.check_repeatable(env)


def test_same_tasks_in_every_process(env, folder, task_dumps, dump):
    loader, _ = PROFILES[folder]
    first, second = task_dumps
    assert first[loader] == second[loader] == dump(env)


def test_tasks_follow_the_legacy_slicing_and_prompt_roles(env, folder, generator):
    _, first_index = PROFILES[folder]
    assert env.SYSTEM_MESSAGE == SYSTEM_MESSAGE
    for split, start in first_index.items():
        for offset, task in enumerate(env.tasks(split)):
            entry = generator[start + offset]
            system, user = task["prompt"]
            assert system == {"role": "system", "content": env.SYSTEM_MESSAGE}
            assert user == {"role": "user", "content": entry["question"]}
            assert task["answer"]["answer"] == entry["answer"]
            assert task["metadata"] == {"index": start + offset}


def test_the_profiles_swap_the_same_two_halves(catalog):
    """One profile's test split is the other's train split, task for task."""
    evaluation, rl = catalog.load("letter-counting-legacy-eval"), catalog.load("letter-counting-legacy-rl")
    assert evaluation.tasks("test") == rl.tasks("train")
    assert evaluation.tasks("train") == rl.tasks("test")


def test_raw_completion_scorer(env, generator):
    """The generator's own score_answer on the whole completion, partial credit included."""
    task = env.tasks("test")[0]
    count = task["answer"]["answer"]
    for completion in (count, f" {count}", f"The answer is {count}.", f"<answer>{count}</answer>", "12345"):
        expected = generator.score_answer(completion, task["answer"])
        assert env.reward(completion, task["answer"]) == expected
    assert 0 < env.reward(f"The answer is {count}.", task["answer"]) < 1


def test_fixture_cases(env, folder, checks):
    checks.check_fixtures(env, folder)


def test_gold_answers_score_one(env, checks):
    """The protocol's gold completion is the bare count (the raw scorer gives a tagged one partial credit)."""
    checks.check_gold(env, [(t["answer"]["answer"], t["answer"]) for t in env.tasks("test")[:20]])
    assert all(env.gold_completion(t["answer"]) == t["answer"]["answer"] for t in env.tasks("test")[:20])


def test_junk_never_raises(env, checks):
    checks.check_junk(env, env.tasks("test")[0]["answer"])
