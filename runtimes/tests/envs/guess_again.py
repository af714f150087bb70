"""A multi-turn test environment: reverse the word; a wrong reply gets "Try again." up to three replies."""

from __future__ import annotations

import re

ANSWER = re.compile(r"<answer>\s*([a-z]+)\s*</answer>")
WORDS = ["cat", "dog", "sun", "map", "pen", "cup", "box", "hat", "jam", "kit", "log", "mud", "net", "owl", "pig", "rug"]


def tasks(split: str) -> list[dict[str, object]]:
    words = WORDS[:12] if split == "train" else WORDS[12:]
    prompts = [f"Spell the word backwards inside <answer></answer>.\n\nWord: {w}" for w in words]
    return [{"prompt": p, "answer": w[::-1]} for p, w in zip(prompts, words, strict=True)]


def step(turns: list[str], answer: str) -> tuple[str | None, float]:
    found = ANSWER.findall(turns[-1])
    if found and found[-1] == answer:
        return None, 1.0
    return ("Try again." if len(turns) < 3 else None), 0.0
