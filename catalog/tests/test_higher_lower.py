"""nodus/higher-lower: games played turn by turn (Higher./Lower. as the user's next turn), the gold binary
search winning every game, later guesses doing better than the first, and no secret in a task line.

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

FOLDER = Path(__file__).resolve().parents[1] / "higher-lower"


@pytest.fixture(scope="module")
def env() -> Environment:
    import sys

    sys.path.insert(0, str(FOLDER))
    try:
        settings = Settings(path=(str(FOLDER),), loader="higher_lower_env", name="higher-lower", version="1.0.0")
        return load_environment(settings)
    finally:
        sys.path.remove(str(FOLDER))


def _module(env: Environment) -> Any:
    return env.adapter.obj  # type: ignore[attr-defined]


def _line(env: Environment, split: str, index: int, turns: list[str]) -> dict[str, Any]:
    task = env.by_index(split, index)
    assert task is not None
    return env.grade_line({"taskId": task.task_id, "turns": turns})


def test_splits_and_no_secret_in_a_task_line(env: Environment) -> None:
    assert env.info()["multiTurn"] is True and env.info()["adapter"] == "module"
    assert len(env.tasks("train")) == 2000 and len(env.tasks("test")) == 200
    train = {t.public()["prompt"] for t in env.tasks("train")}
    assert not train & {t.public()["prompt"] for t in env.tasks("test")}
    secrets = set()
    for task in env.tasks("test"):
        line = task.public()
        assert set(line) == {"taskId", "prompt", "metadata"}
        assert line["metadata"] == {"low": 1, "high": 15, "maxGuesses": 4}
        secrets.add(env.adapter_task(task).answer)
    assert secrets == set(range(1, 16)), "every secret of the range occurs"


def test_a_wrong_guess_gets_higher_or_lower_and_the_secret_ends_the_game(env: Environment) -> None:
    secret = env.adapter_task(env.by_index("test", 0)).answer  # type: ignore[arg-type]
    assert secret == 3  # the README's sample game
    first = _line(env, "test", 0, ["<answer>8</answer>"])
    assert (first["next"], first["done"], first["verdict"]) == ("Lower.", False, "Incorrect")
    assert "nextRole" not in first  # the user's turn, not a tool's result
    second = _line(env, "test", 0, ["<answer>8</answer>", "<answer>2</answer>"])
    assert (second["next"], second["done"]) == ("Higher.", False)
    won = _line(env, "test", 0, ["<answer>8</answer>", "<answer>2</answer>", "I think <answer>3</answer>"])
    assert (won["verdict"], won["reward"], won["done"], won["next"]) == ("Correct", 1.0, True, None)


def test_the_fourth_wrong_guess_ends_the_game_incorrect(env: Environment) -> None:
    wrong = ["<answer>8</answer>", "<answer>4</answer>", "<answer>1</answer>", "<answer>2</answer>"]
    for count in range(1, 4):
        assert _line(env, "test", 0, wrong[:count])["done"] is False
    last = _line(env, "test", 0, wrong)
    assert (last["verdict"], last["reward"], last["done"], last["next"]) == ("Incorrect", 0.0, True, None)


def test_a_reply_without_a_guess_ends_the_game_invalid(env: Environment) -> None:
    line = _line(env, "test", 0, ["<answer>8</answer>", "lower, so maybe four"])
    assert (line["verdict"], line["done"], line["next"]) == ("InvalidOutput", True, None)


def test_fixture_cases_give_their_verdicts(env: Environment) -> None:
    cases = [json.loads(line) for line in (FOLDER / "fixtures.jsonl").read_text().splitlines() if line.strip()]
    assert {case["case"] for case in cases} == {"full-reward", "zero-reward", "malformed"}
    for case in cases:
        task = env.by_index(case["split"], case["index"])
        assert task is not None
        line = env.grade_line({"taskId": task.task_id, "completion": case["completion"]})
        assert (line["verdict"], line["reward"]) == (case["verdict"], case["reward"]), case


def test_junk_replies_are_never_correct_and_never_raise(env: Environment) -> None:
    junk = ["", "<answer>", "<answer></answer>", "<answer>" * 20000, "x" * 200_000, "<answer>1e309</answer>"]
    junk += ["<answer>" + "9" * 5000 + "</answer>", "<answer>٣</answer>", "<answer>3.0</answer>"]
    for reply in junk:
        line = _line(env, "test", 0, [reply])
        assert line["verdict"] in ("Incorrect", "InvalidOutput"), (reply[:40], line)


def test_a_raising_step_is_an_infrastructure_failure(env: Environment, monkeypatch: pytest.MonkeyPatch) -> None:
    def broken(reply: str) -> int:
        raise RuntimeError("the parser broke")

    monkeypatch.setattr(_module(env), "guess_of", broken)
    line = _line(env, "test", 0, ["<answer>3</answer>"])
    assert line["verdict"] == "InfrastructureFailure" and line["reward"] is None


def test_the_gold_game_wins_and_later_guesses_do_better_than_the_first(env: Environment) -> None:
    module = _module(env)
    won_by_turn = [0] * module.MAX_GUESSES
    for task in module.tasks("train"):
        turns = module.gold_turns(task)
        assert 1 <= len(turns) <= module.MAX_GUESSES
        for count in range(1, len(turns)):
            assert module.step(turns[:count], task["answer"])[0] in ("Higher.", "Lower.")
        assert module.step(turns, task["answer"]) == (None, 1.0)
        won_by_turn[len(turns) - 1] += 1
    # The first guess can only be right for one secret in fifteen; the feedback finds the others later.
    assert won_by_turn[0] < won_by_turn[1] < won_by_turn[2] < won_by_turn[3], won_by_turn


def test_shapes_and_fresh_copies(catalog: Any, checks: Any) -> None:
    module = catalog.load("higher-lower")
    checks.check_shapes(module, {"train": 2000, "test": 200})
    checks.check_repeatable(module)


def test_same_games_in_every_process(
    catalog: Any, task_dumps: tuple[dict[str, str], dict[str, str]], dump: Any
) -> None:
    first, second = task_dumps
    assert first["higher_lower_env"] == second["higher_lower_env"] == dump(catalog.load("higher-lower"))
