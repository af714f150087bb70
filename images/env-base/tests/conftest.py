"""Fixtures for the nodus-env tests: small environments written to a temporary folder."""

from __future__ import annotations

import itertools
import textwrap
from collections.abc import Callable
from pathlib import Path

import pytest

from nodus.env.environment import Environment, load_environment
from nodus.env.loader import Settings

_COUNTER = itertools.count()


@pytest.fixture
def make_env(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Callable[..., Environment]:
    """Write `source` as module `name` and load it as an environment."""

    def make(source: str, name: str | None = None, loader: str | None = None) -> Environment:
        number = next(_COUNTER)  # module names are unique per session: sys.modules caches them
        module = name or f"env_under_test_{number}"
        folder = tmp_path / f"pkg{number}"
        folder.mkdir()
        (folder / f"{module}.py").write_text(textwrap.dedent(source))
        settings = Settings(path=(str(folder),), loader=loader or module, name="demo", version="1.0.0")
        monkeypatch.syspath_prepend(str(folder))
        return load_environment(settings)

    return make


REVERSE = """
import re
WORDS = [f"w{i:03d}x" for i in range(40)]
ANSWER = re.compile(r"<answer>\\s*([A-Za-z0-9]+)\\s*</answer>")
def tasks(split):
    words = WORDS[:30] if split == "train" else WORDS[30:]
    return [{"prompt": f"Reverse {w}", "answer": w[::-1], "metadata": {"len": len(w)}} for w in words]
def reward(completion, answer):
    found = ANSWER.findall(completion)
    return None if not found else float(found[-1] == answer)
"""


@pytest.fixture
def reverse_source() -> str:
    return REVERSE
