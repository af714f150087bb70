"""Fixtures of the cross-package tests.

Who uses it: the end-to-end training tests (`test_train_grpo.py`, `test_estimate_quickstart.py`), which all
start from the quickstart's Environment built into a grader image and the tiny model in a Hugging Face cache; and
the end-to-end apply tests (`test_apply_trainingjob.py`, `test_grading_sandbox.py`), which run the attempt-API
test runtime (`echo_runtime`: the stand-in trainer of `reconciler/tests/executors/runtimes/echo_trainer.py`).
"""

from __future__ import annotations

import shutil
import sys
from collections.abc import Callable
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
QUICKSTART = REPO / "examples" / "quickstart"
ECHO_TRAINER = REPO / "reconciler" / "tests" / "executors" / "runtimes" / "echo_trainer.py"
ECHO_RUNTIME = """apiVersion: nodus.dev/v1beta1
kind: TrainingRuntime
metadata: {{name: echo}}
spec:
  command: [{python}, {trainer}]
  tasks: [GRPO]
  environmentTasks: AttemptAPI
  outputs: [{{name: outputs, path: /nodus/outputs}}]
  parameterSchema:
    type: object
    additionalProperties: false
    properties:
      steps: {{type: integer, minimum: 1}}
      sleepS: {{type: number}}
      batch: {{type: integer}}
      evaluate: {{type: boolean}}
  defaults: {{steps: 3, sleepS: 0.05, batch: 4}}
"""


@pytest.fixture
def echo_runtime() -> str:
    """The TrainingRuntime `echo` (YAML): the stand-in trainer, run by this interpreter, talking to the attempt API."""
    return ECHO_RUNTIME.format(python=sys.executable, trainer=ECHO_TRAINER)


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
