"""Fixtures of the cross-package tests.

Who uses it: the end-to-end training tests (`test_train_grpo.py`, `test_estimate_quickstart.py`), which all
start from the quickstart's Environment built into a grader image and the tiny model in a Hugging Face cache; and
the image-level tests of the ecosystem adapters (`build_example`); the end-to-end apply tests (`test_apply_trainingjob.py`, `test_grading_sandbox.py`), which run the attempt-API
test runtime (`echo_runtime`: the stand-in trainer of `reconciler/tests/executors/runtimes/echo_trainer.py`).
"""

from __future__ import annotations

import json
import shutil
import sys
import textwrap
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

import pytest

REPO = Path(__file__).resolve().parents[1]
QUICKSTART = REPO / "examples" / "quickstart"
EXAMPLES = REPO / "examples" / "environments"
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
def build_example(base_reference: str, capsys: pytest.CaptureFixture[str]) -> Callable[..., dict[str, Any]]:
    """`build(example, project, files={}) -> row`: examples/environments/EXAMPLE copied into PROJECT (its last
    folder name) with FILES added (an environment.yaml, a test-only variant module), then `nodus-build PROJECT
    --json` in process with no network for the build's steps; its one result row, which must say built."""
    from nodus.builder.cli import main as nodus_build

    def build(example: str, project: Path, files: Mapping[str, str] | None = None) -> dict[str, Any]:
        folder = project / Path(example).name
        shutil.copytree(EXAMPLES / example, folder, ignore=shutil.ignore_patterns("__pycache__"))
        for name, text in (files or {}).items():
            (folder / name).write_text(textwrap.dedent(text).lstrip())
        flags = ["--network", "none", "--base", base_reference, "--lock", str(project / "nodus.lock")]
        with pytest.raises(SystemExit) as exited:
            nodus_build([str(project), *flags, "--state-dir", str(project / ".nodus"), "--json"])
        output = json.loads(capsys.readouterr().out)
        assert exited.value.code == 0, output
        (row,) = output["results"]
        assert row["status"] == "built", row
        return dict(row)

    return build


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
        for name in ("environment.yaml", "env/reverse_words.py"):
            (root / name).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy(QUICKSTART / name, root / name)
        if extra_module_text:
            with (root / "env" / "reverse_words.py").open("a") as module:
                module.write(extra_module_text)
        flags = ["--network", "none", "--base", base_reference, "--lock", str(root / "nodus.lock")]
        with pytest.raises(SystemExit) as exited:
            nodus_build([str(root), *flags, "--state-dir", str(root / ".nodus"), "--json"])
        assert exited.value.code == 0
        monkeypatch.setenv("HF_HUB_CACHE", tiny_model[0])
        monkeypatch.chdir(root)
        return root

    return build
