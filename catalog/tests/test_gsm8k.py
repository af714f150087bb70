"""nodus/gsm8k: GSM8K-format data (the shipped sample here), graded on the final number."""

from __future__ import annotations

import json
import re
from decimal import Decimal
from pathlib import Path

import pytest

FOLDER, MODULE = "gsm8k", "gsm8k_env"
DATA = Path(__file__).resolve().parents[1] / FOLDER / "data"
CALCULATION = re.compile(r"<<([^=<>]+)=([^<>]+)>>")


@pytest.fixture(scope="module")
def env(catalog, gsm8k_cache):
    import datasets.config

    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("NODUS_GSM8K_DATA_FILES", json.dumps({s: str(DATA / f"{s}.jsonl") for s in ("train", "test")}))
        patch.setattr(datasets.config, "HF_DATASETS_CACHE", gsm8k_cache)
        patch.setattr(datasets.config, "HF_DATASETS_OFFLINE", True)
        yield catalog.load(FOLDER)


def test_splits_and_shapes(env, checks):
    checks.check_shapes(env, {"train": 40, "test": 20})
    checks.check_repeatable(env)


def test_same_tasks_in_every_process(env, task_dumps, dump):
    first, second = task_dumps
    assert first[MODULE] == second[MODULE] == dump(env)


def test_sample_data_is_gsm8k_format_and_its_arithmetic_is_right():
    """Every line is {question, answer}; every <<expression=result>> holds; #### repeats the stated result."""
    for split in ("train", "test"):
        rows = [json.loads(line) for line in (DATA / f"{split}.jsonl").read_text().splitlines()]
        for row in rows:
            assert set(row) == {"question", "answer"}
            steps = CALCULATION.findall(row["answer"])
            assert steps, row["question"]
            for expression, result in steps:
                assert re.fullmatch(r"[\d.+\-*/() ]+", expression)
                assert Decimal(str(eval(expression))) == Decimal(result), (expression, result)  # our own data
            reasoning, final = (part.strip() for part in row["answer"].rsplit("####", 1))
            # The final answer is stated in the last line of reasoning (usually the last result itself).
            assert re.search(rf"(?<![\d.]){re.escape(final)}(?![\d])", reasoning.splitlines()[-1]), row["answer"]


def test_no_solution_in_prompt_or_metadata(env):
    for split in ("train", "test"):
        for index, task in enumerate(env.tasks(split)):
            assert "####" not in task["prompt"] and "<<" not in task["prompt"]
            assert task["metadata"] == {"index": index}


def test_fixture_cases(env, checks):
    checks.check_fixtures(env, FOLDER)


def test_gold_answers_score_one(env, checks):
    checks.check_gold(env, [(f"<answer>{t['answer']}</answer>", t["answer"]) for t in env.tasks("test")[:20]])


@pytest.mark.parametrize(
    ("completion", "expected"),
    [
        ("<answer>22,610</answer>", 1.0),
        ("<answer>$22610.00</answer>", 1.0),
        ("<answer>The museum collected 22610 dollars.</answer>", 1.0),
        ("<answer>22610 dollars, not 5810</answer>", 0.0),
        ("Total: 22610", None),
        ("<answer>twenty-two thousand</answer>", None),
    ],
)
def test_reward_parsing(env, completion, expected):
    assert env.reward(completion, "22610") == expected


def test_junk_never_raises(env, checks):
    checks.check_junk(env, env.tasks("test")[0]["answer"])


def test_bad_data_files_variable_is_refused(env, monkeypatch):
    monkeypatch.setenv("NODUS_GSM8K_DATA_FILES", '{"train": "only-train.jsonl"}')
    with pytest.raises(ValueError, match="train"):
        env.tasks("train")


def test_without_the_variable_it_loads_the_hub_dataset(env, monkeypatch):
    """What the image build does: openai/gsm8k, config main (faked here: no hub is reachable in tests)."""
    calls = []

    def fake_load_dataset(*args, **kwargs):
        calls.append((args, kwargs))
        row = {"question": "What is 2 + 3?", "answer": "2+3=<<2+3=5>>5\n#### 5"}
        return {"train": [row], "test": [{"question": "What is 4 + 4?", "answer": "#### 8"}]}

    monkeypatch.delenv("NODUS_GSM8K_DATA_FILES")
    monkeypatch.setattr(env.datasets, "load_dataset", fake_load_dataset)
    monkeypatch.setattr(env, "_CACHE", {})
    assert [t["answer"] for t in env.tasks("test")] == ["8"]
    assert calls == [(("openai/gsm8k", "main"), {})]
