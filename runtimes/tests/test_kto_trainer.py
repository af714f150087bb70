"""The `nodus/kto` trainer as a process (`data_runs.run_runtime`): KTO, full fine-tuning, on thumbs-up and
thumbs-down labels read from CSV (`up`/`down`) raises the policy's preference accuracy on held-out prompts (each
held-out prompt's desirable completion against its undesirable one). Slow: the tiny model is built once per
session, the run takes seconds."""

from __future__ import annotations

import csv
from pathlib import Path

import pytest
from data_runs import preference_rows, run_runtime

pytestmark = pytest.mark.slow


@pytest.fixture
def model(tiny_model: tuple[str, str]) -> Path:
    cache, revision = tiny_model
    return Path(cache) / "models--nodus--tiny-qwen3" / "snapshots" / revision


def test_kto_on_labels_raises_held_out_preference_accuracy(tmp_path: Path, model: Path) -> None:
    (tmp_path / "volume").mkdir(parents=True)
    with (tmp_path / "volume" / "feedback.csv").open("w", newline="") as handle:
        writer = csv.writer(handle)
        writer.writerow(["question", "reply", "thumb"])
        for row in preference_rows(300):
            writer.writerow([row["prompt"], row["chosen"], "up"])
            writer.writerow([row["prompt"], row["rejected"], "down"])
    data = {
        "volume": "feedback",
        "format": "CSV",
        "columns": {"prompt": "question", "completion": "reply", "label": "thumb"},
    }
    parameters = {"steps": 10, "learningRate": 1e-3, "beta": 0.1, "saveSteps": 10}
    result = run_runtime("kto", tmp_path, model, parameters=parameters, data=data)
    assert result.returncode == 0, result.output[-3000:]

    held = result.results["heldOut"]
    before, after = held["before"], held["after"]
    print(
        f"\nKTO (full): held-out preference accuracy {before['heldOutPreferenceAccuracy']:.3f} -> "
        f"{after['heldOutPreferenceAccuracy']:.3f} on {after['heldOutPairs']} same-prompt pairs"
    )
    assert held["improved"] and after["heldOutPreferenceAccuracy"] > before["heldOutPreferenceAccuracy"]
    assert after["heldOutPairs"] == 30 and result.results["heldOutRows"] == 60  # both replies of 30 prompts
    steps = [e["metrics"] for e in result.platform.events if e.get("stage") == "Training" and e.get("metrics")]
    assert len(steps) == 10 and {"loss", "rewardsMargins"} <= set(steps[-1])
