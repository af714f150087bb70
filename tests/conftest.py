"""Fixtures of the cross-package tests.

Who uses it: the end-to-end training tests (`test_train_grpo.py`, `test_estimate_quickstart.py`), which all
start from the quickstart's Environment built into a grader image and the tiny model in a Hugging Face cache.
"""

from __future__ import annotations

import shutil
from collections.abc import Callable
from pathlib import Path

import pytest

QUICKSTART = Path(__file__).resolve().parents[1] / "examples" / "quickstart"


@pytest.fixture
def built_quickstart(
    tmp_path: Path, base_reference: str, tiny_model: tuple[str, str], monkeypatch: pytest.MonkeyPatch
) -> Callable[[str], Path]:
    """`build(extra_module_text="") -> project`: the quickstart's Environment (its module with the text appended)
    built with nodus-build in a fresh project under tmp_path, which becomes the current folder, with
    HF_HUB_CACHE pointing at the tiny model."""
    from nodus.builder.cli import main as nodus_build

    def build(extra_module_text: str = "") -> Path:
        root = tmp_path / "project"
        root.mkdir()
        for name in ("environment.yaml", "reverse_words.py"):
            shutil.copy(QUICKSTART / name, root / name)
        if extra_module_text:
            with (root / "reverse_words.py").open("a") as module:
                module.write(extra_module_text)
        flags = ["--network", "none", "--base", base_reference, "--lock", str(root / "nodus.lock")]
        with pytest.raises(SystemExit) as exited:
            nodus_build([str(root), *flags, "--state-dir", str(root / ".nodus"), "--json"])
        assert exited.value.code == 0
        monkeypatch.setenv("HF_HUB_CACHE", tiny_model[0])
        monkeypatch.chdir(root)
        return root

    return build
