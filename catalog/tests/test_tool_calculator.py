"""nodus/tool-calculator: the tools in each task's metadata, the calculate tool run inside the grader as the
next turn (role tool), episodes graded on the reply without a call, and no answer in a task line.

The environment is loaded the way the grader loads it (nodus-env's `load_environment` with the catalog
folder's loader), so `step` is played by the module adapter and every line is what `nodus-env grade` writes.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from nodus.env.environment import Environment, load_environment
from nodus.env.loader import Settings

FOLDER = Path(__file__).resolve().parents[1] / "tool-calculator"


@pytest.fixture(scope="module")
def env() -> Environment:
    import sys

    sys.path.insert(0, str(FOLDER))
    try:
        settings = Settings(path=(str(FOLDER),), loader="tool_calculator_env", name="tool-calculator", version="1.0.0")
        return load_environment(settings)
    finally:
        sys.path.remove(str(FOLDER))


def _module(env: Environment) -> Any:
    return env.adapter.obj  # type: ignore[attr-defined]


def test_splits_tools_and_no_answer_in_a_task_line(env: Environment) -> None:
    assert env.info()["multiTurn"] is True and env.info()["adapter"] == "module"
    assert len(env.tasks("train")) == 2000 and len(env.tasks("test")) == 200
    train = {t.public()["prompt"] for t in env.tasks("train")}
    assert not train & {t.public()["prompt"] for t in env.tasks("test")}
    for task in env.tasks("test"):
        line = task.public()
        assert set(line) == {"taskId", "prompt", "metadata"}
        assert line["metadata"] == {"tools": _module(env).TOOLS}
        assert str(task.answer) not in json.dumps(line["metadata"])


def test_a_tool_call_gets_its_result_as_a_tool_turn_and_the_answer_ends_the_episode(env: Environment) -> None:
    task = env.tasks("test")[0]
    raw = env.adapter_task(task)
    call, answer = _module(env).gold_turns({"prompt": raw.prompt, "answer": raw.answer})
    first = env.grade_line({"taskId": task.task_id, "turns": [call]})
    assert (first["next"], first["nextRole"], first["done"]) == (str(raw.answer), "tool", False)
    done = env.grade_line({"taskId": task.task_id, "turns": [call, answer]})
    assert (done["verdict"], done["reward"], done["done"], done["next"]) == ("Correct", 1.0, True, None)
    wrong = env.grade_line({"taskId": task.task_id, "turns": [call, f"<answer>{raw.answer + 1}</answer>"]})
    assert wrong["verdict"] == "Incorrect"
    malformed = env.grade_line({"taskId": task.task_id, "turns": [call, "I do not know."]})
    assert malformed["verdict"] == "InvalidOutput"


@pytest.mark.parametrize(
    ("call", "result"),
    [
        ('{"name": "calculate", "arguments": {"expression": "(2 + 3) * -4"}}', "-20"),
        ("not json", 'error: a tool call is {"name": ..., "arguments": {...}} in JSON'),
        ('{"name": "search", "arguments": {}}', "error: there is no tool 'search'; the tool is calculate"),
        ('{"name": "calculate", "arguments": {"expression": 7}}', "error: calculate takes one argument"),
        ('{"name": "calculate", "arguments": {"expression": "2 ** 3"}}', "error: unexpected '*'"),
        ('{"name": "calculate", "arguments": {"expression": "__import__(\'os\')"}}', "error: unexpected character"),
        ('{"name": "calculate", "arguments": {"expression": "(1 + 2"}}', "error: the expression ends too early"),
        ('{"name": "calculate", "arguments": {"expression": "9999999 * 9999999 * 9999999"}}', "error: the value is"),
    ],
)
def test_a_call_that_cannot_run_gets_the_error_back_as_its_result(env: Environment, call: str, result: str) -> None:
    task = env.tasks("test")[0]
    line = env.grade_line({"taskId": task.task_id, "turns": [f"<tool_call>{call}</tool_call>"]})
    assert line["nextRole"] == "tool" and line["done"] is False and line["next"].startswith(result), line


def test_fixture_cases_give_their_verdicts(env: Environment) -> None:
    cases = [json.loads(line) for line in (FOLDER / "fixtures.jsonl").read_text().splitlines() if line.strip()]
    assert {case["case"] for case in cases} == {"full-reward", "zero-reward", "malformed"}
    for case in cases:
        task = env.by_index(case["split"], case["index"])
        assert task is not None
        line = env.grade_line({"taskId": task.task_id, "completion": case["completion"]})
        assert (line["verdict"], line["reward"]) == (case["verdict"], case["reward"]), case


def test_junk_replies_are_never_correct_and_never_raise(env: Environment) -> None:
    task = env.tasks("test")[0]
    junk = [
        "",
        "<tool_call>",
        "</tool_call><tool_call>",
        "<tool_call>" * 20000,
        "x" * 200_000,
        "<answer>1e309</answer>",
    ]
    for reply in junk:
        line = env.grade_line({"taskId": task.task_id, "turns": [reply]})
        assert line["verdict"] in ("Incorrect", "InvalidOutput"), (reply[:40], line)


def test_a_raising_step_is_an_infrastructure_failure(env: Environment, monkeypatch: pytest.MonkeyPatch) -> None:
    def broken(reply: str, answer: int) -> float:
        raise RuntimeError("the scorer broke")

    monkeypatch.setattr(_module(env), "score", broken)
    task = env.tasks("test")[0]
    line = env.grade_line({"taskId": task.task_id, "turns": ["<answer>1</answer>"]})
    assert line["verdict"] == "InfrastructureFailure" and line["reward"] is None


def test_the_gold_episode_of_every_train_task_is_correct(env: Environment) -> None:
    module = _module(env)
    for task in module.tasks("train")[:200]:
        call, answer = module.gold_turns(task)
        assert module.step([call], task["answer"]) == (str(task["answer"]), 0.0, "tool")
        assert module.step([call, answer], task["answer"]) == (None, 1.0)
