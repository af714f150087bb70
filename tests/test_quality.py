"""The project's own checks run in the test run: ruff, mypy (strict on specs, builder, reconciler, cli) and
the import-linter layering contract (cli -> reconciler -> builder -> specs; nodus.env standalone)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
BIN = Path(sys.executable).parent
SOURCES = ["specs/src", "builder/src", "reconciler/src", "images/env-base/src", "runtimes/src"]


def _run(*cmd: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(cmd, cwd=REPO, capture_output=True, text=True, timeout=600, check=False)


def test_ruff_lint() -> None:
    result = _run(str(BIN / "ruff"), "check", ".")
    assert result.returncode == 0, result.stdout + result.stderr


def test_ruff_format() -> None:
    result = _run(str(BIN / "ruff"), "format", "--check", ".")
    assert result.returncode == 0, result.stdout + result.stderr


@pytest.mark.slow
def test_mypy() -> None:
    result = _run(str(BIN / "mypy"), *SOURCES)
    assert result.returncode == 0, result.stdout + result.stderr


def test_import_layers() -> None:
    result = _run(str(BIN / "lint-imports"), "--no-cache")
    assert result.returncode == 0, result.stdout + result.stderr
    assert "broken" in result.stdout and "0 broken" in result.stdout
