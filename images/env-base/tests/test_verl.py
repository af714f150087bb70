"""The verl adapter in process: parquet rows written with pyarrow in tmp_path, scored by a module's compute_score.

pyarrow is in the workspace venv (the datasets package brings it to a verl environment's image). SkyRL rows and
OpenEnv environments, whose packages the workspace does not install, are tested in `test_openenv_skyrl.py`.
"""

from __future__ import annotations

import itertools
import json
import textwrap
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from nodus.env import cli, contract
from nodus.env.adapters import AdapterError, verl
from nodus.env.environment import Environment, load_environment
from nodus.env.loader import Settings

_COUNTER = itertools.count()

SCORE = """
import re
ANSWER = re.compile(r"####\\s*(-?\\d+)")
train_files = {train!r}
{val}
def compute_score(data_source, solution_str, ground_truth, extra_info=None):
    if "raise" in solution_str:
        raise RuntimeError("reward exploded")
    found = ANSWER.findall(solution_str)
    if not found:
        return None
    return {{"score": float(found[-1] == ground_truth), "pred": found[-1]}}
"""


def verl_rows(count: int, start: int = 0) -> list[dict[str, Any]]:
    return [
        {
            "data_source": "test/addition",
            "prompt": [
                {"role": "system", "content": "End with #### n."},
                {"role": "user", "content": f"What is {i} + {i + 1}?"},
            ],
            "ability": "math",
            "reward_model": {"style": "rule", "ground_truth": str(2 * i + 1)},
            "extra_info": {"index": i, "split": "x", "answer": f"SECRET-{2 * i + 1}", "solution": "SECRET"},
        }
        for i in range(start, start + count)
    ]


@pytest.fixture
def make_verl(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Callable[..., Environment]:
    def make(source: str, files: dict[str, list[dict[str, Any]]]) -> Environment:
        number = next(_COUNTER)
        folder = tmp_path / f"verl{number}"
        (folder / "data").mkdir(parents=True)
        for name, rows in files.items():
            pq.write_table(pa.Table.from_pylist(rows), folder / name)
        module = f"verl_under_test_{number}"
        (folder / f"{module}.py").write_text(textwrap.dedent(source))
        monkeypatch.syspath_prepend(str(folder))
        return load_environment(Settings(path=(str(folder),), loader=module, name="verl", version="1.0.0"))

    return make


def grade(env: Environment, task: contract.Task, completion: str) -> dict[str, Any]:
    return env.grade_line({"taskId": task.task_id, "completion": completion})


def test_val_files_are_the_test_split_and_grades_follow_compute_score(make_verl: Callable[..., Environment]) -> None:
    source = SCORE.format(train="data/train.parquet", val='val_files = ["data/val.parquet"]')
    env = make_verl(source, {"data/train.parquet": verl_rows(10), "data/val.parquet": verl_rows(4, start=100)})
    assert env.adapter.kind == "verl"
    test = env.tasks("test")
    assert [t.prompt[1]["content"] for t in test] == [f"What is {i} + {i + 1}?" for i in range(100, 104)]
    assert len(env.tasks("train")) == 10
    task = test[0]  # 100 + 101
    assert grade(env, task, "so #### 201")["verdict"] == contract.CORRECT
    assert grade(env, task, "#### 7")["verdict"] == contract.INCORRECT
    malformed = grade(env, task, "two hundred and one")
    assert (malformed["verdict"], malformed["reward"]) == (contract.INVALID_OUTPUT, 0.0)
    broken = grade(env, task, "raise")
    assert broken["verdict"] == contract.INFRASTRUCTURE_FAILURE and broken["reward"] is None
    assert "reward exploded" in broken["evidence"]["message"]


def test_no_task_line_carries_the_ground_truth_or_extra_info_answers(make_verl: Callable[..., Environment]) -> None:
    env = make_verl(SCORE.format(train="data/train.parquet", val=""), {"data/train.parquet": verl_rows(10)})
    lines = [contract.dumps(t.public()) for split in ("train", "test") for t in env.ordered(split, 0)]
    assert lines
    for line in lines:
        parsed = json.loads(line)
        assert set(parsed) == {"taskId", "prompt", "metadata"}
        assert set(parsed["metadata"]) <= {"data_source", "ability", "index", "split"}
        assert "SECRET" not in line and "ground_truth" not in line and "reward_model" not in line


def test_without_val_files_every_fifth_row_is_held_out(make_verl: Callable[..., Environment]) -> None:
    env = make_verl(SCORE.format(train="data/train.parquet", val=""), {"data/train.parquet": verl_rows(20)})
    assert sorted(t.metadata["index"] for t in env.tasks("test")) == [4, 9, 14, 19]
    assert len(env.tasks("train")) == 16


def test_selfcheck_grades_the_ground_truth_correct(make_verl: Callable[..., Environment]) -> None:
    env = make_verl(SCORE.format(train="data/train.parquet", val=""), {"data/train.parquet": verl_rows(10)})
    report = cli.selfcheck(env)
    assert report["ok"], report["checks"]


def test_a_float_score_works_and_a_dict_without_score_is_an_infrastructure_failure(
    make_verl: Callable[..., Environment],
) -> None:
    source = """
    train_files = "data/train.parquet"
    def compute_score(data_source, solution_str, ground_truth, extra_info=None):
        if solution_str == "dict":
            return {"acc": 1.0}
        return 1.0 if solution_str.strip() == ground_truth else 0.0
    """
    env = make_verl(source, {"data/train.parquet": verl_rows(5)})
    task = env.tasks("test")[0]  # row 4: 4 + 5
    assert grade(env, task, "9")["verdict"] == contract.CORRECT
    assert grade(env, task, "8")["verdict"] == contract.INCORRECT
    failed = grade(env, task, "dict")
    assert failed["verdict"] == contract.INFRASTRUCTURE_FAILURE and "without 'score'" in failed["evidence"]["message"]


def test_a_prompt_of_more_than_a_system_and_one_user_message_is_refused(
    make_verl: Callable[..., Environment],
) -> None:
    rows = verl_rows(3)
    rows[1]["prompt"] = [*rows[1]["prompt"], {"role": "assistant", "content": "3"}]
    with pytest.raises(
        AdapterError, match=r"train.parquet row 1: prompt must be at most a system message and one user"
    ):
        make_verl(SCORE.format(train="data/train.parquet", val=""), {"data/train.parquet": rows}).tasks("train")


def test_rows_without_compute_score_or_env_class_are_refused(make_verl: Callable[..., Environment]) -> None:
    with pytest.raises(AdapterError, match=r"row 0: no env_class, and the module has no compute_score"):
        make_verl('train_files = "data/train.parquet"\n', {"data/train.parquet": verl_rows(3)}).tasks("train")


def test_a_missing_local_file_names_it(make_verl: Callable[..., Environment]) -> None:
    with pytest.raises(AdapterError, match=r"cannot read .*missing.parquet"):
        make_verl(SCORE.format(train="data/missing.parquet", val=""), {}).tasks("train")


def test_hf_paths_are_downloaded_with_huggingface_hub(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    asked: list[tuple[Any, ...]] = []

    def download(repo_id: str, filename: str, *, repo_type: str, revision: str | None) -> str:
        asked.append((repo_id, filename, repo_type, revision))
        return str(tmp_path / "cached.parquet")

    import huggingface_hub

    monkeypatch.setattr(huggingface_hub, "hf_hub_download", download)
    path = verl.local_path("hf://datasets/Org/Math@v1.0/data/train-00000.parquet", None)
    assert path == str(tmp_path / "cached.parquet")
    assert asked == [("Org/Math", "data/train-00000.parquet", "dataset", "v1.0")]
    with pytest.raises(AdapterError, match="expected hf://datasets/owner/name"):
        verl.local_path("hf://datasets/Org", None)
    with pytest.raises(AdapterError, match="only hf://datasets/"):
        verl.local_path("hf://models/Org/x/y.parquet", None)


def test_an_hf_file_not_fetched_at_build_time_fails_offline(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    # Grading has no network: with an empty HF_HOME and offline mode, the file is named and the load fails.
    monkeypatch.setenv("HF_HOME", str(tmp_path / "hf"))
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    import huggingface_hub.constants

    monkeypatch.setattr(huggingface_hub.constants, "HF_HUB_OFFLINE", True)
    monkeypatch.setattr(huggingface_hub.constants, "HF_HUB_CACHE", str(tmp_path / "hf" / "hub"))
    with pytest.raises(AdapterError, match=r"hf://datasets/Org/Math/train.parquet: cannot fetch it"):
        verl.local_path("hf://datasets/Org/Math/train.parquet", None)
