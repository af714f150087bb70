"""`nodus env test catalog/<name>` passes for every catalog Environment (the issue's acceptance).

Each run lists tasks in separate processes (byte-identical), checks that train and test share no prompt,
grades 20 gold answers per split (Correct), an empty reply (InvalidOutput or Incorrect, never a crash) and
the environment's fixture cases, and grades them again in fresh processes (deterministic).
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from click.testing import CliRunner

from nodus.cli.main import cli

CATALOG = Path(__file__).resolve().parents[1] / "catalog"
# Which folders must be there is checked by catalog/tests/test_catalog_metadata.py.
ENVIRONMENTS = sorted(p.parent.name for p in CATALOG.glob("*/environment.yaml"))


@pytest.mark.slow
@pytest.mark.parametrize("name", ENVIRONMENTS)
def test_nodus_env_test_passes(name: str, monkeypatch: pytest.MonkeyPatch) -> None:
    # No hub here: gsm8k reads the GSM8K-format sample it ships instead of downloading the data set.
    data = CATALOG / "gsm8k" / "data"
    monkeypatch.setenv(
        "NODUS_GSM8K_DATA_FILES", json.dumps({"train": str(data / "train.jsonl"), "test": str(data / "test.jsonl")})
    )
    result = CliRunner().invoke(cli, ["env", "test", str(CATALOG / name), "-o", "json"])
    report = json.loads(result.stdout)
    failed = [c for c in report["checks"] if not c["ok"]]
    assert result.exit_code == 0 and report["ok"], failed
    names = {c["name"] for c in report["checks"]}
    assert {
        "train tasks are byte-identical in two processes",
        "train and test share no prompt",
        "grading is deterministic across two fresh processes",
    } <= names
