"""An OpenEnv environment played in process by nodus: guess a secret number in at most four replies.

Each seed picks the secret; the model replies `[n]`, the environment answers "higher" or "lower" until the
guess is right (reward 1.0) or four guesses are spent (reward 0.0). A reply without `[n]` ends the episode
with no reward (nodus grades it InvalidOutput). Every episode opens with the same rules, so the seed is
what tells tasks apart.
"""

from __future__ import annotations

import random
import re
from typing import Any

from openenv.core.env_server.interfaces import Environment
from openenv.core.env_server.types import Action, Observation, State

GUESS = re.compile(r"\[\s*(-?\d+)\s*\]")
RULES = "I picked a whole number from 1 to 50. Guess it: reply with your guess in brackets, like [25]."
MAX_GUESSES = 4


class GuessAction(Action):
    message: str


class GuessObservation(Observation):
    prompt: str = ""
    feedback: str = ""


class GuessState(State):
    secret: int = 0
    guesses: int = 0


class GuessNumberEnvironment(Environment[GuessAction, GuessObservation, GuessState]):
    """The secret is `random.Random(seed)`'s: the same seed always plays the same game."""

    REWARD_TYPE = "Binary"

    def __init__(self) -> None:
        super().__init__()
        self._state = GuessState()

    def reset(self, seed: int | None = None, episode_id: str | None = None, **kwargs: Any) -> GuessObservation:
        self._state = GuessState(episode_id=episode_id, secret=random.Random(seed).randint(1, 50))
        return GuessObservation(prompt=RULES, reward=None, done=False)

    def step(self, action: GuessAction, timeout_s: float | None = None, **kwargs: Any) -> GuessObservation:
        self._state.step_count += 1
        found = GUESS.findall(action.message)
        if not found:
            return GuessObservation(feedback="No guess in brackets.", reward=None, done=True)
        guess = int(found[-1])
        self._state.guesses += 1
        if guess == self._state.secret:
            return GuessObservation(feedback="Right!", reward=1.0, done=True)
        spent = self._state.guesses >= MAX_GUESSES
        hint = "higher" if guess < self._state.secret else "lower"
        return GuessObservation(feedback=f"No, {hint}.", reward=0.0, done=spent)

    @property
    def state(self) -> GuessState:
        return self._state

    def gold_completion(self, seed: int) -> str:
        """The winning first reply for a seed: what nodus-env's self-check grades Correct."""
        return f"[{random.Random(seed).randint(1, 50)}]"


def load_environment() -> GuessNumberEnvironment:
    return GuessNumberEnvironment()
