"""nodus/gsm8k 1.0.0: grade-school maths word problems from GSM8K, graded on the final number.

Who calls it: `nodus-env` (the grader CLI in the Environment image) imports this module through the
loader `gsm8k_env:load_environment` and uses `tasks(split)` and `reward(completion, answer)`;
the catalog tests import it directly.

Where the data comes from: `datasets.load_dataset("openai/gsm8k", "main")` (train -> train, test -> test).
The image build runs that once with network access, and grading reads the datasets cache offline. When
`NODUS_GSM8K_DATA_FILES` is set to a JSON object such as `{"train": "/d/train.jsonl", "test":
"/d/test.jsonl"}`, the same loader reads those GSM8K-format files instead (no hub needed): the tests
use the small sample this package ships in `data/`.
"""

from __future__ import annotations

import json
import os
import re
import sys
from decimal import Decimal
from typing import Any

import datasets

from nodus.env.answers import last_answer

HUB_DATASET = ("openai/gsm8k", "main")
DATA_FILES_VARIABLE = "NODUS_GSM8K_DATA_FILES"
REWARD_TYPE = "Binary"

INSTRUCTION = "Solve the problem step by step. Then give the final answer, a single number, inside <answer></answer>."
# A number as people write it: optional minus, digits with thousands commas, optional decimals; or `.5`.
NUMBER = re.compile(r"-?(?:\d[\d,]*(?:\.\d+)?|\.\d+)")
FINAL_ANSWER = re.compile(r"####\s*(.+?)\s*$", re.DOTALL)


def load_environment() -> Any:
    """The loader nodus-env calls: this module is the environment."""
    return sys.modules[__name__]


def _data_files() -> dict[str, str] | None:
    raw = os.environ.get(DATA_FILES_VARIABLE)
    if not raw:
        return None
    try:
        files = json.loads(raw)
    except ValueError as exc:
        raise ValueError(f"{DATA_FILES_VARIABLE} must be a JSON object of split -> file: {exc}") from None
    if not isinstance(files, dict) or set(files) != {"train", "test"}:
        raise ValueError(f'{DATA_FILES_VARIABLE} must name exactly the splits "train" and "test" (got {raw!r})')
    return {str(k): str(v) for k, v in files.items()}


def _sample_setting() -> str:
    """`NODUS_GSM8K_DATA_FILES='{"train": ".../data/train.jsonl", "test": ".../data/test.jsonl"}'`."""
    folder = os.path.join(os.path.dirname(os.path.abspath(__file__)), "data")
    files = {split: os.path.join(folder, f"{split}.jsonl") for split in ("train", "test")}
    return f"{DATA_FILES_VARIABLE}='{json.dumps(files)}'"


def _final_number(solution: str) -> str:
    """The number after `####` in a GSM8K solution, without thousands commas: `#### 1,260` -> `1260`."""
    found = FINAL_ANSWER.search(solution)
    if found is None:
        raise ValueError(f"a GSM8K answer must end with '#### <number>' (got ...{solution[-60:]!r})")
    number = found.group(1).replace(",", "")
    Decimal(number)  # raises on a malformed data row, at load time rather than while grading
    return number


def _load() -> dict[str, list[dict[str, Any]]]:
    files = _data_files()
    datasets.disable_progress_bars()  # grader logs are read by people; progress bars only add noise there
    if files:
        rows = datasets.load_dataset("json", data_files=files)
    else:
        try:
            rows = datasets.load_dataset(*HUB_DATASET)
        except ConnectionError as exc:  # offline (HF_HUB_OFFLINE, as grading and `nodus env test` run)
            raise ConnectionError(f"{exc}; to use the sample this package ships, set {_sample_setting()}") from None
    test = [_task(row, i) for i, row in enumerate(rows["test"])]
    # GSM8K's splits do not overlap; a test question repeated in train is dropped from train all the same,
    # because the contract says the splits never share a prompt.
    test_prompts = {task["prompt"] for task in test}
    train = [
        task for task in (_task(row, i) for i, row in enumerate(rows["train"])) if task["prompt"] not in test_prompts
    ]
    return {"train": train, "test": test}


def _task(row: dict[str, Any], index: int) -> dict[str, Any]:
    return {
        "prompt": f"{row['question'].strip()}\n\n{INSTRUCTION}",
        "answer": _final_number(row["answer"]),
        "metadata": {"index": index},
    }


_CACHE: dict[str | None, dict[str, str]] = {}


def tasks(split: str) -> list[dict[str, Any]]:
    """The tasks of `train` or `test` in the dataset's own order (7473 and 1319 on the hub)."""
    if split not in ("train", "test"):
        raise ValueError(f"split must be 'train' or 'test' (got {split!r})")
    key = os.environ.get(DATA_FILES_VARIABLE)
    if key not in _CACHE:
        _CACHE[key] = {name: json.dumps(items) for name, items in _load().items()}
    # Decoded afresh on every call: a caller that edits a task changes only its own copy.
    result: list[dict[str, Any]] = json.loads(_CACHE[key][split])
    return result


def reward(completion: str, answer: str) -> float | None:
    """1.0 when the last number inside the last <answer>...</answer> equals the answer (commas ignored,
    compared as exact decimals, so 18, 18.0 and $18 all match 18), 0.0 for another number, None
    (InvalidOutput) when there is no answer tag or no number inside it."""
    text = last_answer(completion)
    if text is None:
        return None
    numbers = NUMBER.findall(text)
    if not numbers:
        return None
    # Every NUMBER match is a valid decimal once its commas are gone, so Decimal() cannot raise here.
    return 1.0 if Decimal(numbers[-1].replace(",", "")) == Decimal(answer) else 0.0


def gold_completion(answer: str) -> str:
    """A completion that is Correct for `answer` (nodus-env selfcheck grades it)."""
    return f"<answer>{answer}</answer>"
