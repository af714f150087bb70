"""The estimate of a quickstart-sized run is within 25% of what the run costs on this machine.

The acceptance test of the estimator: `nodus apply -f job.yaml --dry-run -o json` prices a GRPO-LoRA run of the
quickstart's size (60 steps of 4 groups of 8 replies, 32 tokens, 64 held-out tasks before and after) from the
managed runtime's measured step times, at a nonzero price for this host; then the same job is applied, and the
cost the executor accounted (the trainer's running time x the price stored with the run) is compared.

Needs podman and the base image (the Environment is built) and the training stack; marked like
tests/test_train_grpo.py, whose project fixture this copies (without the planted task).
"""

from __future__ import annotations

import json
from collections.abc import Callable
from decimal import Decimal
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner

from nodus.cli.main import cli

# exclusive: the measured cost is running time, so it must not share the machine with the rest of the suite.
pytestmark = [pytest.mark.podman, pytest.mark.slow, pytest.mark.exclusive]

PRICE = "3.60"
TOLERANCE = 0.25
JOB = """apiVersion: nodus.dev/v1beta1
kind: TrainingJob
metadata: {{name: priced}}
spec:
  runtime: nodus/grpo-lora
  model: {{uri: "hf://nodus/tiny-qwen3@{revision}"}}
  environment: {{name: reverse-words@1.0.0, trainTasks: 600, heldOutTasks: 64, seed: 0}}
  evaluation: {{baseline: true, final: true}}
  parameters: {{steps: 60, groupsPerStep: 4, groupSize: 8, maxTokens: 32, learningRate: 1.0e-3, saveSteps: 10}}
  maxCostUSD: "1.00"
"""


def nodus(*args: str) -> tuple[int, str]:
    result = CliRunner().invoke(cli, list(args), catch_exceptions=False)
    return result.exit_code, result.output


@pytest.fixture
def project(built_quickstart: Callable[[str], Path], monkeypatch: pytest.MonkeyPatch) -> Path:
    root = built_quickstart("")
    monkeypatch.setenv("NODUS_LOCAL_PRICE_PER_HOUR", PRICE)
    monkeypatch.delenv("NODUS_PRICES", raising=False)
    return root


def test_the_dry_run_estimate_is_within_a_quarter_of_the_measured_cost(
    project: Path, tiny_model: tuple[str, str]
) -> None:
    (project / "job.yaml").write_text(JOB.format(revision=tiny_model[1]))
    code, output = nodus("apply", "-f", "job.yaml", "--dry-run", "-o", "json")
    assert code == 0, output
    dry: dict[str, Any] = json.loads(output)
    estimate = dry["status"]["estimate"]
    assert dry["status"]["blockingReasons"] == [], dry["status"]
    assert estimate["preset"] == "small-lora-cpu" and estimate["unpriced"] == [], estimate
    assert estimate["perHourUSD"] == PRICE
    assert not (project / ".nodus" / "state.db").exists()  # the dry run wrote nothing

    code, output = nodus("apply", str(project), "--yes", "--wait", "--timeout", "10m")
    assert code == 0 and "TrainingJob/priced: Succeeded" in output, output
    code, output = nodus("get", "tj", "priced", "-o", "json")
    status = json.loads(output)["status"]
    assert status["price"]["perHourUSD"] == PRICE, status.get("price")
    measured = Decimal(status["cost"]["totalUSD"])
    estimated = Decimal(estimate["costUSD"])
    error = abs(estimated - measured) / measured
    seconds = float(measured / Decimal(PRICE) * 3600)
    report = f"estimated ${estimated} ({estimate['durationSeconds']} s), measured ${measured} ({seconds:.1f} s)"
    print(report)  # shown with -s: how close it came
    assert error <= Decimal(str(TOLERANCE)), report + "\n" + "\n".join(estimate["basis"])
