"""nodus/python-functions 1.0.0: write a Python function; hidden calls check it.

Who calls it: `nodus-env` (the grader CLI in the Environment image) imports this module through the
loader `python_functions_env:load_environment` and uses `tasks(split)` and `reward(completion, answer)`;
the catalog tests import it directly. The tasks themselves are in `python_functions_tasks`.

The completion's code never runs in the grader's process: `nodus.env.execute.run_function` runs it in
a fresh interpreter (as another uid inside a grader image, with CPU, memory, output and time limits) and
hands back only the JSON values of the calls. The expected results never leave this process: the
comparison happens here.
"""

from __future__ import annotations

import json
import math
import re
import sys
from typing import Any

import python_functions_tasks

from nodus.env.execute import run_function

REWARD_TYPE = "Binary"
TIMEOUT_S = 5
MEMORY_MB = 256
OUTPUT_LIMIT = 65536

# The last fenced block marked python (or py); a block that never closes (a truncated reply) does not count.
CODE_FENCE = re.compile(r"```[ \t]*(?:python3?|py)[ \t]*\r?\n(.*?)```", re.DOTALL | re.IGNORECASE)


def load_environment() -> Any:
    """The loader nodus-env calls: this module is the environment."""
    return sys.modules[__name__]


def _prompt(task: dict[str, Any]) -> str:
    arguments = ", ".join(repr(a) for a in task["calls"][0])
    example = f"{task['function']}({arguments}) returns {task['expected'][0]!r}"
    return (
        f"Write this Python function:\n\n```python\n{task['signature']}\n```\n\n"
        f"{task['description']}\n\nExample: {example}.\n\n"
        "Reply with the complete function in a ```python code block. Use only the standard library."
    )


def tasks(split: str) -> list[dict[str, Any]]:
    """The tasks of `train` (40) or `test` (16), always the same ones in the same order."""
    if split not in ("train", "test"):
        raise ValueError(f"split must be 'train' or 'test' (got {split!r})")
    source = python_functions_tasks.TRAIN if split == "train" else python_functions_tasks.TEST
    return [
        {
            "prompt": _prompt(task),
            # Deep copies (through JSON, the shape the runner returns too): a caller that edits an answer
            # must not change the task table.
            "answer": json.loads(json.dumps({key: task[key] for key in ("function", "calls", "expected", "solution")})),
            "metadata": {"function": task["function"]},
        }
        for task in source
    ]


def extract_code(completion: str) -> str | None:
    """The code of the last ```python block, or None when there is none."""
    # Scanning only from the last opening fence keeps this linear even on a reply full of fences.
    start = completion.rfind("```")
    while start >= 0:
        found = CODE_FENCE.match(completion, start)
        if found:
            return found.group(1)
        start = completion.rfind("```", 0, start)
    return None


def same_value(got: Any, expected: Any) -> bool:
    """Equality of JSON values that keeps True apart from 1 and lets 2.0 equal 2 (floats within 1e-9)."""
    if isinstance(expected, bool) or isinstance(got, bool):
        return type(got) is type(expected) and got == expected
    if isinstance(expected, int | float) and isinstance(got, int | float):
        if isinstance(expected, int) and isinstance(got, int):
            return got == expected
        return math.isclose(got, expected, rel_tol=1e-9, abs_tol=1e-9)
    if isinstance(expected, list) and isinstance(got, list):
        return len(got) == len(expected) and all(same_value(g, e) for g, e in zip(got, expected, strict=True))
    if isinstance(expected, dict) and isinstance(got, dict):
        return got.keys() == expected.keys() and all(same_value(got[k], expected[k]) for k in expected)
    return type(got) is type(expected) and got == expected


def reward(completion: str, answer: dict[str, Any]) -> float | None:
    """1.0 when the function in the last ```python block returns the expected value for every hidden
    call, 0.0 when any call differs or raises, or the code fails to load, times out or hits a limit;
    None (InvalidOutput) when the completion has no ```python block."""
    code = extract_code(completion)
    if code is None:
        return None
    result = run_function(
        code, answer["function"], answer["calls"], timeout_s=TIMEOUT_S, memory_mb=MEMORY_MB, output_limit=OUTPUT_LIMIT
    )
    expected_count = len(answer["expected"])
    if result.status != "ok" or len(result.values) != expected_count or len(result.errors) != expected_count:
        return 0.0
    passed = all(
        error is None and same_value(value, expected)
        for value, error, expected in zip(result.values, result.errors, answer["expected"], strict=True)
    )
    return 1.0 if passed else 0.0


def gold_completion(answer: dict[str, Any]) -> str:
    """A completion that is Correct for `answer` (nodus-env selfcheck grades it): the reference solution."""
    return f"```python\n{answer['solution']}```"
