"""nodus/tool-calculator 1.0.0: integer expressions answered with the help of a `calculate` tool.

Who calls it: `nodus-env` (the grader CLI in the Environment image) imports this module through the loader
`tool_calculator_env` and, since it has `step` and no `reward`, plays it as a multi-turn environment; the
catalog tests import it directly, and `python -m nodus.runtimes.tiny_model --warmup` reads `gold_turns` to
teach the tiny model to call the tool.

Each task's metadata offers one tool, `calculate` (an OpenAI-style function schema, `TOOLS`), which the
trainer passes to the model's chat template. The model calls it by writing
`<tool_call>{"name": "calculate", "arguments": {"expression": "..."}}</tool_call>`; `step` runs the call in
this module's own code (a small parser for `+ - *` and parentheses, no `eval`) and returns the result as the
next message with role `tool`. A reply without a call ends the episode and is graded: the integer inside its
last `<answer>...</answer>` against the task's value. A tool call that cannot run (not JSON, another tool,
a bad expression) gets the error as its result, so the model can correct itself; the episode goes on.

Grading keeps no state between turns; an episode goes on only while the model calls the tool, so `step`
needs only the last turn to say what comes next.
"""

from __future__ import annotations

import json
import random
import sys
from typing import Any

from nodus.env.answers import last_answer

SEED = 20_261_201
TRAIN_SIZE = 2000
TEST_SIZE = 200
MIN_OPERAND, MAX_OPERAND = 10, 999
MAX_EXPRESSION_CHARS = 200
MAX_ABS_VALUE = 10**15
MAX_ANSWER_DIGITS = 32
REWARD_TYPE = "Binary"
OPEN_CALL, CLOSE_CALL = "<tool_call>", "</tool_call>"

TOOLS: list[dict[str, Any]] = [
    {
        "type": "function",
        "function": {
            "name": "calculate",
            "description": "Evaluate integers with + - * and parentheses.",
            "parameters": {
                "type": "object",
                "properties": {"expression": {"type": "string"}},
                "required": ["expression"],
            },
        },
    }
]

PROMPT = "Compute {expression} with the calculate tool. Answer inside <answer></answer>."


def load_environment() -> Any:
    """The loader nodus-env calls: this module is the environment."""
    return sys.modules[__name__]


# --- the tool ---------------------------------------------------------------------------------------------


class ToolError(ValueError):
    """A call the tool cannot run; its message goes back to the model as the tool's result."""


def _tokens(expression: str) -> list[str]:
    tokens: list[str] = []
    i = 0
    while i < len(expression):
        char = expression[i]
        if char.isspace():
            i += 1
        elif char in "+-*()":
            tokens.append(char)
            i += 1
        elif char.isascii() and char.isdigit():
            start = i
            while i < len(expression) and expression[i].isascii() and expression[i].isdigit():
                i += 1
            tokens.append(expression[start:i])
        else:
            raise ToolError(f"unexpected character {char!r}")
    return tokens


def calculate(expression: str) -> int:
    """The value of an integer expression (`+ - *`, parentheses, unary minus); ToolError when it has none."""
    if len(expression) > MAX_EXPRESSION_CHARS:
        raise ToolError(f"the expression is longer than {MAX_EXPRESSION_CHARS} characters")
    tokens = _tokens(expression)
    position = 0

    def peek() -> str | None:
        return tokens[position] if position < len(tokens) else None

    def take() -> str:
        nonlocal position
        if position >= len(tokens):
            raise ToolError("the expression ends too early")
        position += 1
        return tokens[position - 1]

    def checked(value: int) -> int:
        if abs(value) > MAX_ABS_VALUE:
            raise ToolError("the value is too large")
        return value

    def atom() -> int:
        token = take()
        if token == "-":
            return -atom()
        if token == "(":
            value = total()
            if take() != ")":
                raise ToolError("a parenthesis is not closed")
            return value
        if token.isdigit():
            return checked(int(token))
        raise ToolError(f"unexpected {token!r}")

    def product() -> int:
        value = atom()
        while peek() == "*":
            take()
            value = checked(value * atom())
        return value

    def total() -> int:
        value = product()
        while peek() in ("+", "-"):
            value = checked(value + product() if take() == "+" else value - product())
        return value

    if not tokens:
        raise ToolError("the expression is empty")
    value = total()
    if position != len(tokens):
        raise ToolError(f"unexpected {tokens[position]!r}")
    return value


def tool_calls(turn: str) -> list[str]:
    """The text inside each complete `<tool_call>...</tool_call>` of `turn`, in order (linear scans)."""
    calls = []
    start = turn.find(OPEN_CALL)
    while start != -1:
        end = turn.find(CLOSE_CALL, start + len(OPEN_CALL))
        if end == -1:
            break
        calls.append(turn[start + len(OPEN_CALL) : end])
        start = turn.find(OPEN_CALL, end + len(CLOSE_CALL))
    return calls


def run_call(text: str) -> str:
    """Run one call's JSON; the result, or `error: ...` for a call that cannot run."""
    try:
        call = json.loads(text)
    except ValueError:
        return 'error: a tool call is {"name": ..., "arguments": {...}} in JSON'
    if not isinstance(call, dict) or not isinstance(call.get("arguments"), dict):
        return 'error: a tool call is {"name": ..., "arguments": {...}} in JSON'
    if call.get("name") != "calculate":
        return f"error: there is no tool {call.get('name')!r}; the tool is calculate"
    expression = call["arguments"].get("expression")
    if not isinstance(expression, str):
        return "error: calculate takes one argument, expression (a string)"
    try:
        return str(calculate(expression))
    except ToolError as exc:
        return f"error: {exc}"


# --- the tasks --------------------------------------------------------------------------------------------


def _expression(rng: random.Random) -> str:
    a, b, c = (rng.randint(MIN_OPERAND, MAX_OPERAND) for _ in range(3))
    first, second = rng.choice("+-*"), rng.choice("+-*")
    return f"{a} {first} {b} {second} {c}"


def _generate() -> dict[str, list[dict[str, Any]]]:
    rng = random.Random(SEED)
    seen: set[str] = set()
    made: list[dict[str, Any]] = []
    while len(made) < TEST_SIZE + TRAIN_SIZE:
        expression = _expression(rng)
        if expression in seen:
            continue
        seen.add(expression)
        made.append(
            {
                "prompt": PROMPT.format(expression=expression),
                "answer": calculate(expression),
                "metadata": {"tools": TOOLS},
            }
        )
    return {"test": made[:TEST_SIZE], "train": made[TEST_SIZE:]}


_CACHE: dict[str, str] = {}


def tasks(split: str) -> list[dict[str, Any]]:
    """The tasks of `train` (2000) or `test` (200), always the same ones in the same order (fresh copies)."""
    if split not in ("train", "test"):
        raise ValueError(f"split must be 'train' or 'test' (got {split!r})")
    if not _CACHE:
        _CACHE.update({name: json.dumps(items) for name, items in _generate().items()})
    result: list[dict[str, Any]] = json.loads(_CACHE[split])
    return result


# --- grading ----------------------------------------------------------------------------------------------


def score(reply: str, answer: int) -> float | None:
    """1.0 for the right integer in the last <answer>...</answer>, 0.0 for another, None without one."""
    text = last_answer(reply)
    if text is None:
        return None
    text = text.strip().replace(",", "")
    digits = text[1:] if text[:1] in "+-" else text
    if not digits.isdigit() or not digits.isascii():
        return None
    if len(digits) > MAX_ANSWER_DIGITS:
        return 0.0
    return 1.0 if int(text) == answer else 0.0


def step(turns: list[str], answer: int) -> tuple[str | None, float | None, str] | tuple[None, float | None]:
    """Replay the model's turns: the last one's tool results (role tool) while it calls a tool, else the end
    of the episode (None) and its reward."""
    last = turns[-1] if turns else ""
    calls = tool_calls(last)
    if calls:
        return "\n".join(run_call(call) for call in calls), 0.0, "tool"
    return None, score(last, answer)


def gold_completion(answer: int) -> str:
    """A one-turn reply that is Correct for `answer` (nodus-env selfcheck grades it)."""
    return f"<answer>{answer}</answer>"


def gold_turns(task: dict[str, Any]) -> list[str]:
    """The model's turns of a gold episode of `task`: call the tool on the task's expression, then answer with
    its result (the tiny model's warm-up learns tool calling from these)."""
    expression = task["prompt"].removeprefix("Compute ").split(" with the calculate tool.", 1)[0]
    call = {"name": "calculate", "arguments": {"expression": expression}}
    return [f"{OPEN_CALL}{json.dumps(call)}{CLOSE_CALL}", gold_completion(task["answer"])]
