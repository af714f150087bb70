"""nodus/arithmetic 2.0.0: integer arithmetic expressions such as `(17 + 4) * 3 - 8`.

Who calls it: `nodus-env` (the grader CLI in the Environment image) imports this module through the
loader `arithmetic_env:load_environment` and uses `tasks(split)` and `reward(completion, answer)`;
the catalog tests import it directly.

Tasks are generated from one fixed seed, so every process builds the same lists. The test split is drawn
first, then train, and a prompt is never repeated, so the splits cannot share one. The reward is on the
hot path of grading (thousands of completions a second): it finds the answer tag with two linear scans
and parses the integer with string methods, a few microseconds a completion.
"""

from __future__ import annotations

import random
import sys
from typing import Any

from nodus.env.answers import last_answer
from nodus.env.tasklists import generated_once

SEED = 20_000
TRAIN_SIZE = 5000
TEST_SIZE = 500
MIN_OPERATORS, MAX_OPERATORS = 2, 4
MAX_OPERAND = 50
MAX_ABS_RESULT = 10_000
# An integer answer longer than this cannot match any answer the generator makes (|result| <= 10,000); the
# cap also keeps `int()` away from its 4300-digit ValueError on a pathological completion.
MAX_ANSWER_DIGITS = 32
REWARD_TYPE = "Binary"

PRECEDENCE = {"+": 1, "-": 1, "*": 2}

Expression = int | tuple[str, Any, Any]


def load_environment() -> Any:
    """The loader nodus-env calls: this module is the environment."""
    return sys.modules[__name__]


def _random_expression(rng: random.Random, operators: int) -> Expression:
    """A random binary tree with `operators` inner nodes and integer leaves in 1..MAX_OPERAND."""
    if operators == 0:
        return rng.randint(1, MAX_OPERAND)
    left_count = rng.randint(0, operators - 1)
    operator = rng.choice("+-*")
    return (operator, _random_expression(rng, left_count), _random_expression(rng, operators - 1 - left_count))


def _value(expression: Expression) -> int:
    if isinstance(expression, int):
        return expression
    operator, left, right = expression
    a, b = _value(left), _value(right)
    return a + b if operator == "+" else a - b if operator == "-" else a * b


def _render(expression: Expression) -> str:
    """Infix text with only the parentheses the usual precedence rules need."""
    if isinstance(expression, int):
        return str(expression)
    operator, left, right = expression
    left_text, right_text = _render(left), _render(right)
    if not isinstance(left, int) and PRECEDENCE[left[0]] < PRECEDENCE[operator]:
        left_text = f"({left_text})"
    # After a minus the right operand keeps its parentheses at equal precedence: 10 - (4 - 2) is not 10 - 4 - 2.
    if not isinstance(right, int) and (
        PRECEDENCE[right[0]] < PRECEDENCE[operator]
        or (PRECEDENCE[right[0]] == PRECEDENCE[operator] and operator == "-")
    ):
        right_text = f"({right_text})"
    return f"{left_text} {operator} {right_text}"


def _prompt(text: str) -> str:
    return f"Evaluate this expression:\n\n{text}\n\nGive the result as an integer inside <answer></answer>."


def _generate() -> dict[str, list[dict[str, Any]]]:
    rng = random.Random(SEED)
    seen: set[str] = set()
    made: list[dict[str, Any]] = []
    while len(made) < TEST_SIZE + TRAIN_SIZE:
        operators = rng.randint(MIN_OPERATORS, MAX_OPERATORS)
        expression = _random_expression(rng, operators)
        value = _value(expression)
        text = _render(expression)
        if abs(value) > MAX_ABS_RESULT or text in seen:
            continue
        seen.add(text)
        made.append({"prompt": _prompt(text), "answer": value, "metadata": {"operators": operators}})
    return {"test": made[:TEST_SIZE], "train": made[TEST_SIZE:]}


# The tasks of `train` (5000) or `test` (500), always the same ones in the same order.
tasks = generated_once(_generate)


def _score_integer(text: str, answer: int) -> float | None:
    """`-1,234`, `42` or `42.0` compared with `answer`: 1.0 or 0.0; text that is not an integer -> None."""
    text = text.strip().replace(",", "")
    if text.endswith(".0"):
        text = text[:-2]
    digits = text[1:] if text[:1] in "+-" else text
    if not digits.isdigit() or not digits.isascii():
        return None
    if len(digits) > MAX_ANSWER_DIGITS:
        return 0.0
    return 1.0 if int(text) == answer else 0.0


def reward(completion: str, answer: int) -> float | None:
    """1.0 when the last <answer>...</answer> holds the right integer, 0.0 when it holds another integer,
    None (InvalidOutput) when there is no complete answer tag or it does not hold an integer."""
    text = last_answer(completion)
    return None if text is None else _score_integer(text, answer)


def gold_completion(answer: int) -> str:
    """A completion that is Correct for `answer` (nodus-env selfcheck grades it)."""
    return f"<answer>{answer}</answer>"
