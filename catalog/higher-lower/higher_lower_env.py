"""nodus/higher-lower 1.0.0: a guessing game over several turns, "higher" or "lower" after each wrong guess.

Who calls it: `nodus-env` (the grader CLI in the Environment image) imports this module through the loader
`higher_lower_env` and, since it has `step` and no `reward`, plays it as a multi-turn environment; the
catalog tests import it directly, and `python -m nodus.runtimes.tiny_model --warmup` reads `gold_turns` to
teach the tiny model the game (a binary search).

Each task is one numbered game: the grader holds a secret whole number from 1 to 15 (`LOW`, `HIGH`); the
model guesses one number a reply, inside `<answer></answer>`, and after a wrong guess the grader answers
`Higher.` or `Lower.` as the next user turn. The game ends on the right guess (1.0), after `MAX_GUESSES`
wrong ones (0.0), or on a reply without a guess (no reward: InvalidOutput). Halving the range each turn
finds any secret in four guesses, so the feedback makes each later guess better than the first, which can
only be right one time in fifteen. The secret is drawn per game from one fixed seed and never appears in a
task line: the prompt names the game's number, as a daily puzzle does, and the metadata holds only the range.

Grading keeps no state between turns: an episode goes on only while every guess was a wrong number, so
`step` needs the last turn and how many turns there were.
"""

from __future__ import annotations

import json
import random
import sys
from typing import Any

from nodus.env.answers import last_answer

SEED = 20_261_214
TRAIN_SIZE = 2000
TEST_SIZE = 200
LOW, HIGH = 1, 15
MAX_GUESSES = 4
FIRST_GAME, LAST_GAME = 1000, 9999
MAX_GUESS_DIGITS = 32
REWARD_TYPE = "Binary"
HIGHER, LOWER = "Higher.", "Lower."

PROMPT = (
    "Game {game}: I picked a whole number from {low} to {high}. Guess it in at most {guesses} tries, one guess"
    " a reply inside <answer></answer>. After a wrong guess I say Higher. or Lower."
)


def load_environment() -> Any:
    """The loader nodus-env calls: this module is the environment."""
    return sys.modules[__name__]


# --- the tasks --------------------------------------------------------------------------------------------


def _generate() -> dict[str, list[dict[str, Any]]]:
    rng = random.Random(SEED)
    games = rng.sample(range(FIRST_GAME, LAST_GAME + 1), TEST_SIZE + TRAIN_SIZE)
    made = [
        {
            "prompt": PROMPT.format(game=game, low=LOW, high=HIGH, guesses=MAX_GUESSES),
            "answer": rng.randint(LOW, HIGH),
            "metadata": {"low": LOW, "high": HIGH, "maxGuesses": MAX_GUESSES},
        }
        for game in games
    ]
    return {"test": made[:TEST_SIZE], "train": made[TEST_SIZE:]}


_CACHE: dict[str, str] = {}


def tasks(split: str) -> list[dict[str, Any]]:
    """The games of `train` (2000) or `test` (200), always the same ones in the same order (fresh copies)."""
    if split not in ("train", "test"):
        raise ValueError(f"split must be 'train' or 'test' (got {split!r})")
    if not _CACHE:
        _CACHE.update({name: json.dumps(items) for name, items in _generate().items()})
    result: list[dict[str, Any]] = json.loads(_CACHE[split])
    return result


# --- grading ----------------------------------------------------------------------------------------------


def guess_of(reply: str) -> int | None:
    """The whole number inside the reply's last <answer>...</answer>, or None when there is none."""
    text = last_answer(reply)
    if text is None:
        return None
    text = text.strip()
    digits = text[1:] if text[:1] in "+-" else text
    if not digits.isdigit() or not digits.isascii() or len(digits) > MAX_GUESS_DIGITS:
        return None
    return int(text)


def step(turns: list[str], answer: int) -> tuple[str | None, float | None]:
    """Replay the model's turns: `Higher.` or `Lower.` (reward 0.0 so far) after a wrong guess with guesses
    left, else the end of the game (None) and its reward: 1.0 right, 0.0 out of guesses, None no guess."""
    guess = guess_of(turns[-1] if turns else "")
    if guess is None:
        return None, None
    if guess == answer:
        return None, 1.0
    if len(turns) >= MAX_GUESSES:
        return None, 0.0
    return (HIGHER if guess < answer else LOWER), 0.0


def gold_completion(answer: int) -> str:
    """A one-turn reply that is Correct for `answer` (nodus-env selfcheck grades it)."""
    return f"<answer>{answer}</answer>"


def gold_turns(task: dict[str, Any]) -> list[str]:
    """The model's turns of a gold game of `task`: a binary search over the range, the middle each time (the
    tiny model's warm-up learns the game from these)."""
    low, high, answer = LOW, HIGH, task["answer"]
    turns = []
    while True:
        guess = (low + high) // 2
        turns.append(gold_completion(guess))
        if guess == answer:
            return turns
        low, high = (guess + 1, high) if guess < answer else (low, guess - 1)
