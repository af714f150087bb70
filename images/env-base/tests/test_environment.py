"""Loading, adapting and grading: the module and reasoning-gym adapters and the contract's rules."""

from __future__ import annotations

import re
from collections.abc import Callable

import pytest

from nodus.env.adapters import AdapterError
from nodus.env.environment import Environment
from nodus.env.loader import LoadError

Make = Callable[..., Environment]


def test_module_with_splits(make_env: Make, reverse_source: str) -> None:
    env = make_env(reverse_source)
    assert len(env.tasks("train")) == 30 and len(env.tasks("test")) == 10
    task = env.tasks("test")[0]
    assert task.public() == {"taskId": task.task_id, "prompt": "Reverse w030x", "metadata": {"len": 5}}
    good = env.grade_line({"taskId": task.task_id, "completion": "<answer>x030w</answer>"})
    assert (good["verdict"], good["reward"]) == ("Correct", 1.0)
    wrong = env.grade_line({"taskId": task.task_id, "completion": "<answer>nope</answer>"})
    assert (wrong["verdict"], wrong["reward"]) == ("Incorrect", 0.0)
    empty = env.grade_line({"taskId": task.task_id, "completion": ""})
    assert (empty["verdict"], empty["reward"]) == ("InvalidOutput", 0.0)
    assert good["evidence"]["durationMs"] >= 0


def test_pairs_without_splits_hold_out_a_fifth_and_at_least_16(make_env: Make) -> None:
    env = make_env(
        """
        TASKS = [(f"Say {i}", str(i)) for i in range(30)]
        def reward(completion, answer):
            return completion.strip() == answer
        """
    )
    assert len(env.tasks("test")) == 16 and len(env.tasks("train")) == 14
    assert env.info()["adapter"] == "module"


def test_a_test_prompt_never_appears_in_train(make_env: Make) -> None:
    env = make_env(
        """
        def tasks(split):
            shared = [("Same prompt", "a"), ("Other", "b")]
            return shared + [(f"train {i}", "x") for i in range(3)] if split == "train" else shared + shared
        def reward(completion, answer):
            return completion == answer
        """
    )
    train = [t.prompt for t in env.tasks("train")]
    test = [t.prompt for t in env.tasks("test")]
    assert test == ["Same prompt", "Other"]  # a prompt repeated in a split is kept once
    assert not set(train) & set(test)
    assert len(train) == 3


def test_reward_that_raises_or_returns_a_string_is_infrastructure_failure(make_env: Make) -> None:
    env = make_env(
        """
        TASKS = [(f"t{i}", i) for i in range(20)]
        def reward(completion, answer):
            if completion == "boom":
                raise ValueError("grader bug")
            if completion == "yes":
                return "yes"
            return 1.0
        """
    )
    task_id = env.tasks("test")[0].task_id
    boom = env.grade_line({"taskId": task_id, "completion": "boom"})
    assert (boom["verdict"], boom["reward"]) == ("InfrastructureFailure", None)
    # The message names where it was raised: the reward's own file and line.
    assert re.fullmatch(r"ValueError: grader bug in reward \(\w+\.py:\d+\)", boom["evidence"]["message"])
    yes = env.grade_line({"taskId": task_id, "completion": "yes"})
    assert yes["verdict"] == "InfrastructureFailure" and yes["reward"] is None
    assert "return a number, a bool or None" in yes["evidence"]["message"]


def test_per_task_timeout(make_env: Make) -> None:
    env = make_env(
        """
        import time
        TASKS = [(f"t{i}", i) for i in range(20)]
        def reward(completion, answer):
            time.sleep(5)
            return 1
        """
    )
    result = env.grade_line({"taskId": env.tasks("test")[0].task_id, "completion": "x"}, timeout_s=0.2)
    assert result["verdict"] == "InfrastructureFailure"
    assert result["evidence"]["message"] == "reward took longer than 0.2s"


@pytest.mark.parametrize(
    ("line", "message"),
    [
        ({"completion": "x"}, "malformed line"),
        ({"taskId": "nope", "completion": "x"}, "unknown taskId 'nope'"),
        ("a string", "malformed line"),
        ({"taskId": "TASK", "completion": 5}, "'completion' must be a string"),
    ],
)
def test_malformed_lines(make_env: Make, reverse_source: str, line: object, message: str) -> None:
    env = make_env(reverse_source)
    if isinstance(line, dict) and line.get("taskId") == "TASK":
        line = {**line, "taskId": env.tasks("test")[0].task_id}
    result = env.grade_line(line)
    assert result["verdict"] == "InfrastructureFailure"
    assert message in result["evidence"]["message"]


def test_multi_turn_step_replays_turns(make_env: Make) -> None:
    env = make_env(
        """
        def tasks(split):
            return [{"prompt": f"Guess my number ({split} {i})", "answer": 3} for i in range(20)]
        def step(turns, answer):
            guess = turns[-1].strip()
            if guess == str(answer):
                return None, 1.0
            if len(turns) >= 3:
                return None, 0.0
            return ("higher" if guess.isdigit() and int(guess) < answer else "lower"), 0.0
        """
    )
    task_id = env.tasks("test")[0].task_id
    first = env.grade_line({"taskId": task_id, "turns": ["1"]})
    assert (first["next"], first["done"], first["verdict"]) == ("higher", False, "Incorrect")
    solved = env.grade_line({"taskId": task_id, "turns": ["1", "3"]})
    assert (solved["next"], solved["done"], solved["verdict"]) == (None, True, "Correct")
    single = env.grade_line({"taskId": task_id, "completion": "3"})
    assert single["verdict"] == "Correct"  # a plain completion is a one-turn episode
    assert env.info()["multiTurn"] is True


def test_a_step_that_says_tool_makes_the_next_message_a_tool_result(make_env: Make) -> None:
    env = make_env(
        """
        def tasks(split):
            return [{"prompt": f"Add 2 and 3 ({split} {i})", "answer": 5, "metadata": {"tools": []}} for i in range(20)]
        def step(turns, answer):
            if "<tool_call>" in turns[-1]:
                return "5", 0.0, "tool"
            if turns[-1] == "ask":
                return "say it again", 0.0, "user"
            return None, float(turns[-1].strip() == str(answer))
        """
    )
    task_id = env.tasks("test")[0].task_id
    called = env.grade_line({"taskId": task_id, "turns": ['<tool_call>{"name": "add"}</tool_call>']})
    assert (called["next"], called["done"], called["nextRole"]) == ("5", False, "tool")
    asked = env.grade_line({"taskId": task_id, "turns": ["ask"]})
    assert asked["next"] == "say it again" and "nextRole" not in asked  # the user's turn says nothing
    answered = env.grade_line({"taskId": task_id, "turns": ["<tool_call>{}</tool_call>", "5"]})
    assert (answered["verdict"], answered["done"]) == ("Correct", True) and "nextRole" not in answered


def test_a_step_with_a_role_outside_the_contract_is_an_infrastructure_failure(make_env: Make) -> None:
    env = make_env(
        """
        def tasks(split):
            return [{"prompt": f"Q {split} {i}", "answer": 1} for i in range(20)]
        def step(turns, answer):
            return "hi", 0.0, "assistant"
        """
    )
    result = env.grade_line({"taskId": env.tasks("test")[0].task_id, "turns": ["x"]})
    assert result["verdict"] == "InfrastructureFailure"
    assert "step returned the role 'assistant'; expected one of user, tool" in result["evidence"]["message"]


def test_reasoning_gym_dataset(make_env: Make) -> None:
    env = make_env(
        """
        import reasoning_gym
        def load_environment():
            return reasoning_gym.create_dataset("basic_arithmetic", size=50, seed=7)
        """
    )
    assert env.info()["adapter"] == "reasoning-gym"
    assert len(env.tasks("test")) == 10 and len(env.tasks("train")) == 40
    task = env.tasks("test")[0]
    assert str(task.answer["answer"]) not in task.public()["metadata"].values()
    right = env.grade_line({"taskId": task.task_id, "completion": f"so <answer>{task.answer['answer']}</answer>"})
    assert right["verdict"] == "Correct"
    assert right["evidence"]["answer"] == str(task.answer["answer"])
    wrong = env.grade_line({"taskId": task.task_id, "completion": "<answer>-123456789</answer>"})
    assert wrong["verdict"] == "Incorrect"


def test_loader_errors_name_the_step(make_env: Make) -> None:
    with pytest.raises(AdapterError, match="not an environment"):
        make_env("X = 1\n")
    with pytest.raises(LoadError, match="has no function 'nope'"):
        make_env(
            "def tasks(split): return []\ndef reward(c, a): return 0\n",
            name="modx_loader_test",
            loader="modx_loader_test:nope",
        )
    with pytest.raises(LoadError, match="failed: RuntimeError: broken"):
        make_env("def load_environment():\n    raise RuntimeError('broken')\n")


def test_bad_task_shapes_are_reported(make_env: Make) -> None:
    env = make_env("def tasks(split): return [42]\ndef reward(c, a): return 0\n")
    with pytest.raises(AdapterError, match=r"tasks\('train'\)\[0\]: a task is \(prompt, answer\)"):
        env.tasks("test")


def test_the_selfcheck_report_carries_the_graders_own_error(make_env: Make) -> None:
    from nodus.env.cli import selfcheck

    env = make_env(
        """
        TASKS = [(f"t{i}", i) for i in range(4)]
        def reward(completion, answer):
            return 1 / 0
        def gold_completion(answer):
            return str(answer)
        """,
        name="raising_reward",
    )
    report = selfcheck(env)
    assert report["ok"] is False
    gold = next(check for check in report["checks"] if check["check"].startswith("gold answers"))
    assert gold["detail"][0]["messages"] == ["ZeroDivisionError: division by zero in reward (raising_reward.py:4)"]
    empty = next(check for check in report["checks"] if check["check"].startswith("empty reply"))
    assert empty["message"] == "ZeroDivisionError: division by zero in reward (raising_reward.py:4)"
