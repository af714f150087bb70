"""A classic verifiers (0.3) single-turn environment: reverse a word, answer inside <answer></answer>.

The dataset is generated here (no download): 64 words to train on, 16 held out as eval_dataset. Scored by its
rubric with its XMLParser: the exact answer weighs 0.8, the answer tag 0.2, so a right answer is 1.0 (Correct), a
wrong one in the tag 0.2 (Incorrect) and a reply without the tag 0 (InvalidOutput, as nodus grades it).
"""

import random

import verifiers as vf
from datasets import Dataset

SYSTEM = "Reverse the word the user gives, letter by letter. Reply with the reversed word inside <answer></answer>."


def _words(count: int, seed: int) -> list[str]:
    rng = random.Random(seed)
    letters = "abcdefghijklmnopqrstuvwxyz"
    return ["".join(rng.choice(letters) for _ in range(rng.randint(4, 8))) for _ in range(count)]


def _rows(words: list[str]) -> Dataset:
    return Dataset.from_list(
        [
            {"question": f"Word: {w}", "answer": w[::-1], "info": {"reversed": w[::-1]}}
            for w in words
        ]
    )


def load_environment() -> vf.Environment:
    parser = vf.XMLParser(["answer"], answer_field="answer")

    def exact_answer(completion, answer, parser) -> float:
        found = parser.parse_answer(completion)
        return 1.0 if found is not None and found.strip().lower() == answer else 0.0

    async def uses_answer_tag(completion, parser) -> float:
        return 1.0 if parser.parse_answer(completion) is not None else 0.0

    rubric = vf.Rubric(funcs=[exact_answer, uses_answer_tag], weights=[0.8, 0.2], parser=parser)
    words = _words(80, seed=14)
    return vf.SingleTurnEnv(
        dataset=_rows(words[:64]),
        eval_dataset=_rows(words[64:]),
        system_prompt=SYSTEM,
        parser=parser,
        rubric=rubric,
    )
