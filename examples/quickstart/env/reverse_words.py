"""The quickstart Environment: spell a short made-up word backwards inside <answer></answer>.

A module environment (`tasks(split)` + `reward(completion, answer)`), the same shape as the seeds' reverse-words
example. The words are generated from a fixed seed, so the task lists never change: 600 for training and 64
held out, no word in both. Short words of letters a-z keep it learnable by the tiny model that the quickstart
trains (`python -m nodus.runtimes.tiny_model`); a real model gets them right at once.
"""

from __future__ import annotations

import random
import re

ANSWER = re.compile(r"<answer>\s*([A-Za-z]+)\s*</answer>")
PROMPT = "Spell the word backwards inside <answer></answer>.\n\nWord: {word}"
LETTERS = "abcdefghijklmnopqrstuvwxyz"
TRAIN, TEST = 600, 64


def _words() -> list[str]:
    rng = random.Random(20261129)
    seen: set[str] = set()
    words: list[str] = []
    while len(words) < TRAIN + TEST:
        word = "".join(rng.choice(LETTERS) for _ in range(rng.randint(3, 5)))
        if word not in seen and word != word[::-1]:
            seen.add(word)
            words.append(word)
    return words


def tasks(split: str) -> list[dict[str, object]]:
    words = _words()
    chosen = words[:TRAIN] if split == "train" else words[TRAIN:]
    return [
        {"prompt": PROMPT.format(word=word), "answer": word[::-1], "metadata": {"length": len(word)}} for word in chosen
    ]


def reward(completion: str, answer: str) -> float | None:
    found = ANSWER.findall(completion)
    if not found:
        return None  # no answer in the reply: InvalidOutput
    return float(found[-1].lower() == answer)


def gold_completion(answer: str) -> str:
    return f"<answer>{answer}</answer>"
