"""A project holding one module-shaped Environment, built into its grader image, for the end-to-end training tests.

Who uses it: tests/test_train_multiturn.py, tests/test_train_game.py and tests/test_train_tools.py. Each copies
an Environment module into a fresh project, builds it with nodus-build (no network, the session's base image),
writes its TrainingJob, applies it through the CLI as a user would and reads what crossed the attempt API
(`NODUS_RECORD_WIRE=1` makes the supervisor record every body in `logs/attempt-wire.jsonl`).
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner

from nodus.builder.cli import main as nodus_build
from nodus.cli.main import cli
from nodus.specs.status_names import GradingPhase

ENVIRONMENT = """apiVersion: nodus.dev/v1
kind: Environment
metadata: {{name: {name}}}
spec:
  version: {version}
  package: {{path: ., loader: {loader}}}
  modes: [Train, Evaluate]
  rewardType: Binary
  grading: {{maxParallel: 2, timeout: 30s}}
"""

GradedPairs = dict[str, list[tuple[dict[str, Any], dict[str, Any]]]]


def nodus(*args: str) -> tuple[int, str]:
    """`nodus ARGS...` in this process, as the CLI runs it: (exit code, output)."""
    result = CliRunner().invoke(cli, list(args), catch_exceptions=False)
    return result.exit_code, result.output


def build_module_project(root: Path, module: Path, name: str, base_reference: str, version: str = "1.0.0") -> Path:
    """`root`, made a project whose Environment `name@version` is the module at `module` (loaded by its file's
    name), built by nodus-build against the base image `base_reference` with no network. Fails the test with
    nodus-build's output when the build does not succeed."""
    root.mkdir(parents=True, exist_ok=True)
    shutil.copy(module, root / module.name)
    (root / "environment.yaml").write_text(ENVIRONMENT.format(name=name, version=version, loader=module.stem))
    return build_project(root, base_reference)


def build_project(root: Path, base_reference: str) -> Path:
    """Every Environment of the project at `root` built by nodus-build against the base image `base_reference`
    with no network, into its store and nodus.lock. Fails the test when the build does not succeed."""
    flags = ["--network", "none", "--base", base_reference, "--lock", str(root / "nodus.lock")]
    with pytest.raises(SystemExit) as exited:
        nodus_build([str(root), *flags, "--state-dir", str(root / ".nodus"), "--json"])
    assert exited.value.code == 0, f"nodus-build of {root} exited {exited.value.code}"
    return root


def graded_pairs(root: Path, job: str, project: str = "default") -> GradedPairs:
    """(request item, verdict) of every grading of `job` on the attempt API's wire, by phase (a request without
    a phase is Training, as the attempt API reads it)."""
    wire = root / ".nodus" / "jobs" / project / job / "logs" / "attempt-wire.jsonl"
    pairs: GradedPairs = {}
    for line in wire.read_text().splitlines():
        record = json.loads(line)
        if record["path"].endswith("/gradings"):
            items, verdicts = record["request"]["items"], record["response"]["verdicts"]
            pairs.setdefault(record["request"].get("phase", GradingPhase.TRAINING), []).extend(
                zip(items, verdicts, strict=True)
            )
    return pairs


def training_project(
    root: Path, module: Path, name: str, base_reference: str, job: str, model: tuple[str, str], env: pytest.MonkeyPatch
) -> Path:
    """`build_module_project`, then `job.yaml` (`job` formatted with the model's `revision`), and, through `env`
    (pytest's monkeypatch), the model's Hugging Face cache, the wire recording and `root` as the working folder."""
    build_module_project(root, module, name, base_reference)
    (root / "job.yaml").write_text(job.format(revision=model[1]))
    env.setenv("HF_HUB_CACHE", model[0])
    env.setenv("NODUS_RECORD_WIRE", "1")
    env.chdir(root)
    return root
