"""`nodus plan`, `apply`, `get` and `delete` through the CLI against each store backend (`--state URL`)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from click.testing import CliRunner

from nodus.cli.main import cli

SPECS = """apiVersion: nodus.dev/v1beta1
kind: TrainingRuntime
metadata: {name: echo}
spec:
  command: [python, trainer.py]
  tasks: [GRPO]
  environmentTasks: AttemptAPI
---
apiVersion: nodus.dev/v1
kind: Volume
metadata: {name: scratch}
spec: {}
"""


def nodus(*args: str) -> tuple[int, str]:
    result = CliRunner().invoke(cli, list(args), catch_exceptions=False)
    return result.exit_code, result.output


def test_plan_apply_get_delete(store_url: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    project = tmp_path / "project"
    project.mkdir()
    (project / "nodus.lock").write_text("lockfileVersion: 1\n")
    (project / "specs.yaml").write_text(SPECS)
    monkeypatch.chdir(project)
    state = ["--state", store_url]
    code, output = nodus("plan", str(project), *state)
    assert code == 2 and "Plan: 2 to add" in output, output
    code, output = nodus("apply", str(project), "--yes", *state)
    assert code == 0, output
    code, output = nodus("plan", str(project), *state)
    assert code == 0 and "No changes" in output
    code, output = nodus("get", "volume", "scratch", "-o", "json", *state)
    assert json.loads(output)["status"]["phase"] == "Ready"
    code, output = nodus("get", "trainingruntimes", *state)
    assert code == 0 and "echo" in output and "Ready" in output
    code, output = nodus("delete", "vol/scratch", *state)
    assert code == 0
    code, output = nodus("plan", str(project), *state)
    assert code == 2 and "+ Volume/scratch" in output
