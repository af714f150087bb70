"""End to end, the catalog by name: a TrainingJob naming `nodus/graph-coloring@1.0.0` (which the project's files do
not define) plans, and `nodus apply --wait` builds the catalog Environment from `catalog/graph-coloring` without
`--build`, runs the attempt-API stand-in trainer graded by it, and `nodus get environments -n nodus` /
`describe` then show it Ready with its splits and a sample task from the frozen manifest.

Needs podman and the base image (the build), so it is marked like the builder's tests."""

from __future__ import annotations

from pathlib import Path

import pytest
from click.testing import CliRunner

from nodus.cli.main import cli

pytestmark = [pytest.mark.podman, pytest.mark.slow]

JOB = """apiVersion: nodus.dev/v1beta1
kind: TrainingJob
metadata: {name: gc-echo}
spec:
  runtime: echo
  environment: {name: nodus/graph-coloring@1.0.0, trainTasks: 8, heldOutTasks: 8, seed: 42}
  evaluation: {minComparisonTasks: 8}
  parameters: {steps: 2}
"""


def nodus(*args: str) -> tuple[int, str]:
    result = CliRunner().invoke(cli, list(args), catch_exceptions=False)
    return result.exit_code, result.output


def test_a_job_naming_a_catalog_environment_builds_it_and_runs(
    tmp_path: Path, base_reference: str, echo_runtime: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    root = tmp_path / "project"
    root.mkdir()
    (root / "nodus.lock").write_text("lockfileVersion: 1\n")
    (root / "runtime.yaml").write_text(echo_runtime)
    (root / "job.yaml").write_text(JOB)
    monkeypatch.chdir(root)
    monkeypatch.delenv("NODUS_CATALOG_DIR", raising=False)

    code, output = nodus("plan", ".")
    assert (
        code == 2 and "+ Environment/nodus/graph-coloring  (managed:catalog/graph-coloring/environment.yaml)" in output
    )

    code, output = nodus("apply", ".", "--yes", "--wait", "--timeout", "3m")
    assert code == 0, output
    assert "building from the catalog" in output and "TrainingJob/gc-echo: Succeeded" in output

    code, output = nodus("get", "environments", "-n", "nodus")
    (row,) = [line for line in output.splitlines() if line.startswith("graph-coloring ")]
    assert row.split() == ["graph-coloring", "1.0.0", "Reasoning", "Train,", "Evaluate", "Ready"]
    code, output = nodus("describe", "environment/graph-coloring", "-n", "nodus")
    assert code == 0 and "train  2000 tasks" in output and "test   200 tasks" in output, output
    assert "Colour the vertices of this undirected graph" in output  # the sample task, without its answer

    code, output = nodus("plan", ".")
    assert code == 0 and "No changes" in output, output
