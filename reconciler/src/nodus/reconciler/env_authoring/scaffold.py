"""`nodus env init NAME`: a new Environment package that passes `nodus env test` as it stands.

Who uses it: nodus.cli.env. The scaffold is the seeds' own example (spell a word backwards inside
`<answer></answer>`): tasks(split), reward(completion, answer), a README, fixture cases and a pyproject, so
people replace the word list and the reward with their own. Writing is all or nothing: an existing file
aborts the whole write set, and an identical rerun changes nothing.

The package (the module and its pyproject) lives in a folder of its own, `env/` (`package.path: env`): the folder
`nodus env init` makes is where people then run things, and the logs, `nodus cp` copies, saved dry runs and the
`.nodus/` state made there must not change the package's digest nor go into its image. The spec, the fixture
cases (read beside it) and the README stay at the top, with a .gitignore for what runs leave.
"""

from __future__ import annotations

import json
from pathlib import Path

from nodus.errors import ConfigError
from nodus.specs.types import is_dns_label

MODULE = '''"""{name}: an Environment for nodus. Replace WORDS, the prompt and `reward` with your own task.

nodus calls `tasks(split)` for the train and test lists and `reward(completion, answer)` for each reply.
Only `reward` sees the answer; the trainer and the model see the prompt and the metadata.
"""

import re

ANSWER = re.compile(r"<answer>\\s*([A-Za-z]+)\\s*</answer>")
WORDS = [
    "valley", "apple", "stone", "river", "cloud", "forest", "bridge", "candle", "garden", "window",
    "silver", "thunder", "pocket", "marble", "lantern", "harbor", "meadow", "shadow", "whisper", "orange",
    "planet", "rocket", "summer", "winter", "castle", "mirror", "ladder", "copper", "butter", "finger",
    "jungle", "kitten", "lemon", "magnet", "needle", "oyster", "pepper", "quiver", "rabbit", "saddle",
]
REWARD_TYPE = "Binary"


def tasks(split):
    """The train split is every word but each fifth; the test split is each fifth word."""
    chosen = [w for i, w in enumerate(WORDS) if (i % 5 == 4) == (split == "test")]
    return [
        {{"prompt": f"Spell the word backwards inside <answer></answer>.\\n\\nWord: {{w}}", "answer": w[::-1],
          "metadata": {{"length": len(w)}}}}
        for w in chosen
    ]


def reward(completion, answer):
    """1.0 for the right word, 0.0 for a wrong one, None (InvalidOutput) when there is no <answer> tag."""
    found = ANSWER.findall(completion)
    if not found:
        return None
    return 1.0 if found[-1].lower() == answer else 0.0
'''

SPEC = """# The Environment {name}: `nodus env test {folder}` checks it, `nodus-build` turns it into an image.
apiVersion: nodus.dev/v1
kind: Environment
metadata:
  name: {name}
spec:
  version: 0.1.0
  package:
    path: {package}   # the package alone: what runs leave in this folder is not part of it
    loader: {module}
  category: Custom
  modes: [Train, Evaluate]
  rewardType: Binary
  grading: {{maxParallel: 4, timeout: 30s}}
  description: Spell a word backwards inside <answer></answer>.
  license: Apache-2.0
"""

README = """# {name}

Spell a word backwards inside `<answer></answer>` (the scaffold of `nodus env init`: replace the task).

- Licence: Apache-2.0
- Splits: train 32 tasks, test 8 tasks (every fifth word is held out)
- Sample task: `Spell the word backwards inside <answer></answer>.\\n\\nWord: valley` -> `<answer>yellav</answer>`
- Grading: the last `<answer>` tag must hold the reversed word: 1.0 Correct, 0.0 Incorrect, no tag InvalidOutput.
- Fixture cases (`fixtures.jsonl`): a full-reward, a zero-reward and a malformed reply.

```console
$ nodus env test {folder}
$ nodus env describe {folder}
```
"""

PACKAGE_FOLDER = "env"
"""Where the package goes, under the folder `init` writes."""

GITIGNORE = """# What nodus and runs leave here: state, logs, copies of outputs, saved dry runs.
.nodus/
*.log
outputs/
dry*.yaml
dry*.json
"""

PYPROJECT = """[project]
name = "{name}"
version = "0.1.0"
description = "A nodus Environment: spell a word backwards."
requires-python = ">=3.11"
dependencies = []

[build-system]
requires = ["hatchling>=1.25"]
build-backend = "hatchling.build"

[tool.hatch.build.targets.wheel]
include = ["{module}.py"]
"""

# Test task 0 is the fifth word, "cloud"; keep these in step with WORDS in MODULE.
FIXTURE_CASES = [
    {
        "case": "full-reward",
        "split": "test",
        "index": 0,
        "completion": "<answer>duolc</answer>",
        "verdict": "Correct",
        "reward": 1.0,
    },
    {
        "case": "zero-reward",
        "split": "test",
        "index": 0,
        "completion": "<answer>cloud</answer>",
        "verdict": "Incorrect",
        "reward": 0.0,
    },
    {
        "case": "malformed",
        "split": "test",
        "index": 0,
        "completion": "duolc",
        "verdict": "InvalidOutput",
        "reward": 0.0,
    },
]


def scaffold(name: str, folder: Path) -> list[Path]:
    """Write the package for `name` into `folder`; refuse (writing nothing) if a file would change."""
    if not is_dns_label(name):
        raise ConfigError(f"{name!r}: an Environment name is a DNS label (lowercase letters, digits, '-')")
    module = name.replace("-", "_") + "_env"
    package = folder / PACKAGE_FOLDER
    files = {
        folder / "environment.yaml": SPEC.format(name=name, module=module, folder=folder, package=PACKAGE_FOLDER),
        package / f"{module}.py": MODULE.format(name=name),
        folder / "README.md": README.format(name=name, folder=folder),
        package / "pyproject.toml": PYPROJECT.format(name=name, module=module),
        folder / "fixtures.jsonl": "".join(json.dumps(c) + "\n" for c in FIXTURE_CASES),
        folder / ".gitignore": GITIGNORE,
    }
    conflicts = [p for p, text in files.items() if p.exists() and p.read_text() != text]
    if conflicts:
        raise ConfigError(
            f"{conflicts[0]} exists and differs from the scaffold; nothing was written",
            hint="choose another folder with --dir, or remove the files",
        )
    written = []
    for path, text in files.items():
        path.parent.mkdir(parents=True, exist_ok=True)
        if not path.exists():
            path.write_text(text)
            written.append(path)
    return written
