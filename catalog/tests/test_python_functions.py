"""nodus/python-functions: hand-written function tasks; completion code runs through nodus.env.execute."""

from __future__ import annotations

import json

import pytest

FOLDER, MODULE = "python-functions", "python_functions_env"


@pytest.fixture(scope="module")
def env(catalog):
    return catalog.load(FOLDER)


def fenced(code: str) -> str:
    return f"Here is the function.\n\n```python\n{code}\n```\n"


def test_splits_and_shapes(env, checks):
    checks.check_shapes(env, {"train": 40, "test": 16})
    checks.check_repeatable(env)


def test_same_tasks_in_every_process(env, task_dumps, dump):
    first, second = task_dumps
    assert first[MODULE] == second[MODULE] == dump(env)


def test_reference_solutions_give_the_expected_results(env):
    """Proves the hand-written expected values right (in process: our own code, not a completion's)."""
    for split in ("train", "test"):
        for task in env.tasks(split):
            answer = task["answer"]
            namespace: dict = {}
            exec(answer["solution"], namespace)
            for call, expected in zip(answer["calls"], answer["expected"], strict=True):
                got = json.loads(json.dumps(namespace[answer["function"]](*call)))
                assert env.same_value(got, expected), (answer["function"], call, got, expected)


def test_no_solution_or_hidden_results_in_prompt_or_metadata(env):
    names = set()
    for split in ("train", "test"):
        for task in env.tasks(split):
            answer = task["answer"]
            names.add(answer["function"])
            assert task["metadata"] == {"function": answer["function"]}
            body = answer["solution"].split("\n", 1)[1]
            assert body.strip() not in task["prompt"]
            # Only the first call is shown, as the example.
            assert f"returns {answer['expected'][0]!r}." in task["prompt"]
    assert len(names) == 56


def test_fixture_cases(env, checks):
    checks.check_fixtures(env, FOLDER)


def test_gold_code_scores_one(env, checks):
    """The reference solution of each test task, run through nodus.env.execute like any completion."""
    checks.check_gold(env, [(fenced(t["answer"]["solution"]), t["answer"]) for t in env.tasks("test")[:20]])


@pytest.mark.parametrize(
    "code",
    [
        "def normalize_whitespace(s):\n    import os\n    os._exit(3)",
        "def normalize_whitespace(s):\n    print('x' * 200000)\n    return ' '.join(s.split())",
        "def normalize_whitespace(s):\n    return ' '.join(s.split()) if s.strip() else None",
        "normalize_whitespace = 42",
        "def something_else(s):\n    return ' '.join(s.split())",
        "raise SystemExit(0)",
    ],
)
def test_failed_runs_are_incorrect_not_invalid(env, code):
    """A crash, an output flood, a wrong value, a missing function: all Incorrect (0.0), never None."""
    answer = env.tasks("test")[0]["answer"]
    assert env.reward(fenced(code), answer) == 0.0


def test_last_python_block_is_graded(env):
    answer = env.tasks("test")[0]["answer"]
    right = "def normalize_whitespace(s):\n    return ' '.join(s.split())"
    wrong = "def normalize_whitespace(s):\n    return s"
    assert env.reward(fenced(wrong) + "Better:\n" + fenced(right), answer) == 1.0
    assert env.reward(fenced(right) + "Or:\n" + fenced(wrong), answer) == 0.0
    assert env.reward(fenced(right) + "```text\nnot code\n```", answer) == 1.0
    assert env.reward("```py\n" + right + "\n```", answer) == 1.0


def test_values_compare_strictly(env):
    assert env.same_value(2.0, 2) and env.same_value([1, [2.5]], [1, [2.5]])
    assert not env.same_value(1, True) and not env.same_value(True, 1)
    assert not env.same_value("1", 1) and not env.same_value([1, 2], [1, 2, 3])
    assert not env.same_value({"a": 1}, {"a": 1, "b": 2}) and not env.same_value(None, 0)


def test_junk_never_raises(env, checks):
    checks.check_junk(env, env.tasks("test")[0]["answer"])


def test_timeout_is_incorrect(env, monkeypatch):
    """An endless loop is stopped at the time limit (1 s here instead of 5, to keep the tests quick)."""
    monkeypatch.setattr(env, "TIMEOUT_S", 1)
    answer = env.tasks("test")[0]["answer"]
    assert env.reward(fenced("def normalize_whitespace(s):\n    while True:\n        pass"), answer) == 0.0
