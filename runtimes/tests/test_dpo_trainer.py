"""The `nodus/dpo` trainer as a process (`data_runs.run_runtime`): DPO with a LoRA adapter on preference pairs
(chosen: the word spelt backwards; rejected: the word as it is) raises the policy's preference accuracy on
held-out prompts it never trained on. Slow: the tiny model is built once per session, the run takes seconds."""

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


def test_dpo_with_lora_raises_held_out_preference_accuracy(tmp_path: Path, model: Path) -> None:
    rows = [{"instruction": r["prompt"], "good": r["chosen"], "bad": r["rejected"]} for r in preference_rows(300)]
    write_rows(tmp_path / "volume" / "prefs.jsonl", rows)
    data = {
        "volume": "prefs",
        "format": "JSONL",
        "columns": {"prompt": "instruction", "chosen": "good", "rejected": "bad"},
    }
    parameters = {"steps": 10, "learningRate": 1e-2, "beta": 0.1, "lora": {"r": 8, "alpha": 16}, "saveSteps": 10}
    result = run_runtime("dpo", tmp_path, model, parameters=parameters, data=data)
    assert result.returncode == 0, result.output[-3000:]

    held = result.results["heldOut"]
    before, after = held["before"], held["after"]
    print(
        f"\nDPO (LoRA): held-out preference accuracy {before['heldOutPreferenceAccuracy']:.3f} -> "
        f"{after['heldOutPreferenceAccuracy']:.3f}, log-prob margin {before['heldOutLogprobMargin']:.3f} -> "
        f"{after['heldOutLogprobMargin']:.3f} on {after['heldOutPairs']} pairs"
    )
    assert held["metric"] == "heldOutPreferenceAccuracy" and held["improved"]
    assert after["heldOutPreferenceAccuracy"] > before["heldOutPreferenceAccuracy"]
    assert after["heldOutLogprobMargin"] > before["heldOutLogprobMargin"]
    assert after["heldOutPairs"] == 30

    steps = [e["metrics"] for e in result.platform.events if e.get("stage") == "Training" and e.get("metrics")]
    assert len(steps) == 10 and {"loss", "rewardsAccuracies", "rewardsMargins"} <= set(steps[-1])
    files = set(json.loads((result.outputs / "manifest.json").read_text())["files"])
    assert {"adapter/adapter_model.safetensors", "adapter/adapter_config.json", "adapter/tokenizer.json"} <= files
    assert "curves.png" in files and not any(name.startswith("model/") for name in files)
    assert result.results["method"] == "LoRA"
