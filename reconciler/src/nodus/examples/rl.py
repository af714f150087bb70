"""Teach a model to spell words backwards with rl.train: tasks, a reward, one call. A template to copy.

Run it with `python -m nodus.examples.rl` in a nodus project (a folder with nodus.lock, or a git checkout).
`rl.train` packages `reward` with the lines of this file it uses (`import re` and `ANSWER`: not `WORDS`, not
`main`), checks it on this machine, builds it into a grader image, and trains a LoRA adapter with GRPO on
`nodus/grpo-lora`. The trainer never sees the answers: every reply is graded by the platform, and the
comparison before and after training is computed on the same held-out tasks (a fifth of them, at least 16).

To make it yours: replace WORDS and the prompt with your tasks, `reward` with your check, and drop `model=`.
"""

from __future__ import annotations

import re
import sys

from nodus.errors import NodusError
from nodus.recipes import rl

# Short, common words, none the same backwards (a palindrome would be right without learning anything).
WORD_LINES = (
    "cat dog sun map cup hat box fox pen owl bird fish lamp moon tree star",
    "apple bread chair dance eagle field grape house juice knife lemon money night ocean paper queen river",
    "stone table uncle voice water young zebra amber brick cloud dream earth flame ghost honey index jewel kite",
    "lunch maple nurse olive piano quiet robin sugar tiger umbra vivid wheat yeast bloom crane drift ember frost",
    "glove heart ivory joker koala latch mango noble orbit pearl quilt raven scarf toast unity valve waltz yacht",
    "zesty acorn bench candy daisy elbow fable giant hatch igloo jelly karma lilac medal nacho otter plaza",
)
WORDS = [word for line in WORD_LINES for word in line.split()]

ANSWER = re.compile(r"<answer>\s*([A-Za-z]+)\s*</answer>")
tasks = [(f"Spell the word backwards inside <answer></answer>.\n\nWord: {w}", w[::-1]) for w in WORDS]


def reward(completion: str, answer: str) -> float | None:
    found = ANSWER.findall(completion)
    return None if not found else float(found[-1].lower() == answer)  # None: no answer in the reply


def main() -> int:
    try:
        # model=: this machine downloads no weights, so the example trains the tiny model the project builds into
        # the local Hugging Face cache (`python -m nodus.runtimes.tiny_model`). Leave it out for Qwen/Qwen3-0.6B.
        # A model of 140k parameters needs a far higher learning rate than the default 4e-5 (meant for real
        # models), and its replies are a few tokens; drop these three with model= left out.
        run = rl.train(tasks, reward, model=rl.TINY_MODEL, max_cost=2, learning_rate=1e-3, max_tokens=32, steps=60)
        print(f"TrainingJob/{run.name} started; `nodus get tj {run.name}` shows it too")
        run.watch()  # each stage, then the reward, loss and KL of every step
        files = run.outputs.download("./outputs")  # the LoRA adapter and the before-and-after comparison
        print(f"{len(files)} output files in ./outputs")
        failed = run.tasks(phase="Evaluation", outcome="Failed")
        print(f"{len(failed)} held-out tasks still wrong after training")
    except NodusError as exc:
        for line in exc.lines():
            print(f"error: {line}" if not line.startswith("hint:") else line, file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
