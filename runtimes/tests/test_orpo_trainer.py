"""The `nodus/orpo` trainer as a process (`data_runs.run_runtime`): ORPO, full fine-tuning, on preference pairs
raises the policy's preference accuracy on held-out prompts; MLflow asked for but not installed is a warning line,
not a failed run. Slow: the tiny model is built once per session, the run takes seconds."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from data_runs import preference_rows, run_runtime, write_rows

pytestmark = pytest.mark.slow


@pytest.fixture
def model(tiny_model: tuple[str, str]) -> Path:
    cache, revision = tiny_model
    return Path(cache) / "models--nodus--tiny-qwen3" / "snapshots" / revision


def test_orpo_raises_held_out_preference_accuracy_and_a_missing_tracker_is_a_warning(
    tmp_path: Path, model: Path
) -> None:
    write_rows(tmp_path / "volume" / "prefs.jsonl", preference_rows(300))
    parameters = {"steps": 20, "learningRate": 1e-3, "beta": 0.1, "saveSteps": 20}
    # Port 9 on loopback: nothing listens there, and nothing should be sent: mlflow is not installed here.
    result = run_runtime(
        "orpo",
        tmp_path,
        model,
        parameters=parameters,
        data={"volume": "prefs", "format": "JSONL"},
        tracking={"mlflow": {"uri": "http://127.0.0.1:9", "experiment": "orpo"}},
        env={"MLFLOW_TRACKING_URI": "http://127.0.0.1:9"},
    )
    assert result.returncode == 0, result.output[-3000:]

    held = result.results["heldOut"]
    before, after = held["before"]["heldOutPreferenceAccuracy"], held["after"]["heldOutPreferenceAccuracy"]
    print(f"\nORPO (full): held-out preference accuracy {before:.3f} -> {after:.3f}")
    assert held["improved"] and after > before

    steps = [e["metrics"] for e in result.platform.events if e.get("stage") == "Training" and e.get("metrics")]
    assert len(steps) == 20 and {"loss", "rewardsAccuracies", "logOddsRatio"} <= set(steps[-1])
    assert "model/model.safetensors" in json.loads((result.outputs / "manifest.json").read_text())["files"]
    import importlib.util

    if importlib.util.find_spec("mlflow") is None:
        assert "orpo: warning: tracking.mlflow: mlflow is not installed here" in result.output
