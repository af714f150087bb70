"""The verl and OpenEnv examples in the images nodus-build makes: held-out tasks only, no answer, grades offline.

Each example (`examples/environments/verl-dataset/`: a module naming verl's parquet `train_files` / `val_files`
and verl's `compute_score`, with `datasets` as its dependency; `examples/environments/openenv/`: an
openenv-core 0.3 environment played in process) is built with nodus-build in process (the code path of the
`nodus-build` CLI), then `nodus-env tasks` and `nodus-env grade` run in the built image with `--network=none`.
The adapters' other cases (every fifth row held out, a raising reward, SkyRL rows, the determinism check) are
tested in process in `images/env-base/tests/test_verl.py` and `test_openenv_skyrl.py`.

Needs podman and the base image (`base_reference`); installing the package's dependencies into the image
(`datasets` and pyarrow, `openenv-core` and its web stack) is most of each build's time.
"""

from __future__ import annotations

import random
import re
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pyarrow.parquet as pq  # type: ignore[import-untyped]
import pytest

from nodus.testing.in_image import BuiltImage

pytestmark = [pytest.mark.podman, pytest.mark.slow]

EXAMPLES = Path(__file__).resolve().parents[1] / "examples" / "environments"
# What a task line's metadata may carry of a verl row (the adapter's public keys); never the answer.
PUBLIC_METADATA = {"data_source", "ability", "index", "split"}
ADDITION = re.compile(r"What is (\d+) \+ (\d+)\?")


def user_message(prompt: list[dict[str, str]]) -> str:
    (content,) = [m["content"] for m in prompt if m["role"] == "user"]
    return content


def test_the_verl_example_lists_held_out_rows_without_answers_and_grades_offline_in_its_image(
    tmp_path: Path, build_example: Callable[..., dict[str, Any]]
) -> None:
    project = tmp_path / "project"
    row = build_example("verl-dataset", project)
    assert row["splits"] == {"train": 80, "test": 20}
    image = BuiltImage(project, tmp_path, "env-addition-verl-1.0.0")

    lines, listed = image.test_tasks()
    # Only the held-out rows: val_files (data/test.parquet), none of train_files.
    held_out = [
        user_message(r["prompt"])
        for r in pq.read_table(EXAMPLES / "verl-dataset" / "data" / "test.parquet").to_pylist()
    ]
    assert sorted(user_message(task["prompt"]) for task in listed) == sorted(held_out)
    assert {task["metadata"]["split"] for task in listed} == {"test"}
    # Ground truth never leaves the grader: no reward_model, no extra_info answer or question.
    for line, task in zip(lines, listed, strict=True):
        assert set(task) == {"taskId", "prompt", "metadata"}, line
        assert set(task["metadata"]) <= PUBLIC_METADATA, line
        assert not any(word in line for word in ("reward_model", "ground_truth", "answer", "question")), line

    first = listed[0]
    match = ADDITION.search(user_message(first["prompt"]))
    assert match is not None
    total = int(match[1]) + int(match[2])
    replies = [f"{match[1]} plus {match[2]} is {total}.\n#### {total}", f"#### {total + 1}", "I do not know."]
    graded = image.grade([{"taskId": first["taskId"], "completion": reply} for reply in replies])
    assert [line["verdict"] for line in graded] == ["Correct", "Incorrect", "InvalidOutput"], graded
    assert [line["reward"] for line in graded] == [1.0, 0.0, 0.0], graded


def secret(seed: int) -> int:
    """guess_number.py's secret for a seed (its `random.Random(seed).randint(1, 50)`)."""
    return random.Random(seed).randint(1, 50)


def test_the_openenv_example_lists_held_out_seeds_without_secrets_and_plays_offline_in_its_image(
    tmp_path: Path, build_example: Callable[..., dict[str, Any]]
) -> None:
    project = tmp_path / "project"
    row = build_example("openenv", project)
    assert row["splits"] == {"train": 800, "test": 200}
    image = BuiltImage(project, tmp_path, "env-guess-number-1.0.0")

    lines, listed = image.test_tasks()
    # Only the held-out seeds (800-999); a task line carries its seed, never the secret or the state.
    assert sorted(task["metadata"]["seed"] for task in listed) == list(range(800, 1000))
    for line, task in zip(lines, listed, strict=True):
        assert set(task) == {"taskId", "prompt", "metadata"} and set(task["metadata"]) == {"seed"}, line
        assert "secret" not in line and "guesses" not in line, line

    task, seed = listed[0]["taskId"], listed[0]["metadata"]["seed"]
    right = secret(seed)
    wrong = [n for n in range(1, 51) if n != right][:4]
    requests = [
        {"taskId": task, "completion": f"My guess: [{right}]"},
        {"taskId": task, "turns": [f"[{n}]" for n in wrong]},  # four wrong guesses: the episode is over
        {"taskId": task, "completion": "twenty-five"},
        {"taskId": task, "turns": [f"[{wrong[0]}]", f"[{right}]"]},  # replayed from reset(seed), then won
    ]
    graded = image.grade(requests)
    assert [line["verdict"] for line in graded] == ["Correct", "Incorrect", "InvalidOutput", "Correct"], graded
    assert [line.get("done", True) for line in graded] == [True, True, True, True], graded
