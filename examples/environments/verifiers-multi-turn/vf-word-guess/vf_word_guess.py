"""A classic verifiers (0.3) multi-turn game, wordle-like: guess a secret five-letter word in at most six turns.

Each reply is a guess inside <guess></guess>; the environment answers with one mark per letter (G: right letter,
right place; Y: in the word elsewhere; -: not in it) until the word is guessed (a @vf.stop condition) or six
turns are played. The reward is 1.0 for a solved game (Correct), else the share of green letters in the last
guess; a reply without a guess scores 0 (InvalidOutput, as nodus grades it).
"""


import verifiers as vf
from datasets import Dataset

SYSTEM = (
    "Guess the secret five-letter word. Reply with one guess inside <guess></guess>. After each guess you get one "
    "mark per letter: G (right place), Y (in the word, elsewhere), - (not in the word)."
)
WORDS = [
    "apple", "brave", "crane", "drink", "eagle", "flame", "grape", "house", "ivory", "joker",
    "knife", "lemon", "mango", "night", "ocean", "piano", "queen", "river", "stone", "tiger",
    "umbra", "vivid", "whale", "xenon", "yacht", "zebra", "amber", "blend", "chair", "dwarf",
]


def marks(guess: str, secret: str) -> str:
    return "".join("G" if g == s else ("Y" if g in secret else "-") for g, s in zip(guess, secret, strict=False))


class WordGuessEnv(vf.MultiTurnEnv):
    def __init__(self, **kwargs):
        super().__init__(max_turns=6, **kwargs)

    @vf.stop
    async def solved(self, state) -> bool:
        if not state["trajectory"]:
            return False
        guess = self.parser.parse_answer(state["trajectory"][-1]["completion"])
        return guess is not None and guess.strip().lower() == state["answer"]

    async def env_response(self, messages, state, **kwargs):
        guess = (self.parser.parse_answer(messages) or "").strip().lower()
        if len(guess) != 5 or not guess.isalpha():
            return [vf.UserMessage(content="A guess is five letters inside <guess></guess>.")]
        return [vf.UserMessage(content=f"{guess}: {marks(guess, state['answer'])}")]


def load_environment() -> vf.Environment:
    parser = vf.XMLParser(["guess"], answer_field="guess")

    def solved_or_greens(completion, answer, parser) -> float:
        guess = (parser.parse_answer(completion) or "").strip().lower()
        if guess == answer:
            return 1.0
        return marks(guess, answer).count("G") / 5 if len(guess) == 5 else 0.0

    rows = [{"question": f"Game {i + 1}: make your first guess.", "answer": s} for i, s in enumerate(WORDS)]
    return WordGuessEnv(
        dataset=Dataset.from_list(rows),
        system_prompt=SYSTEM,
        parser=parser,
        rubric=vf.Rubric(funcs=[solved_or_greens], weights=[1.0], parser=parser),
    )
