"""The `nodus/reward-model` trainer as a process (`data_runs.run_runtime`): a reward model with a LoRA adapter
(PEFT's SEQ_CLS task: the score head trains beside it) on pairs read from Parquet scores held-out chosen replies
above rejected ones well beyond chance.

The rejected replies here give no answer at all ("I do not know the word ..."), which a reward model can tell
from the reply itself. Rejected replies that answer with the word unreversed need the model to compare the answer
with the prompt's word: the tiny model (140k parameters) got only 0.63 of held-out pairs right after 40 steps on
those, too close to chance for a test. Slow: the tiny model is built once per session, the run takes seconds."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from data_runs import preference_rows, run_runtime

pytestmark = pytest.mark.slow


@pytest.fixture
def model(tiny_model: tuple[str, str]) -> Path:
    cache, revision = tiny_model
    return Path(cache) / "models--nodus--tiny-qwen3" / "snapshots" / revision


def test_reward_model_with_lora_beats_chance_on_held_out_pairs(tmp_path: Path, model: Path) -> None:
    import pyarrow as pa  # type: ignore[import-untyped]
    import pyarrow.parquet as pq  # type: ignore[import-untyped]

    rows = preference_rows(300)
    table = pa.table(
        {
            "prompt": [r["prompt"] for r in rows],
            "chosen": [r["chosen"] for r in rows],
            "rejected": [f"I do not know the word {r['rejected'][8:-9]}." for r in rows],
        }
    )
    (tmp_path / "volume").mkdir(parents=True)
    pq.write_table(table, tmp_path / "volume" / "pairs.parquet")
    parameters = {"steps": 20, "learningRate": 1e-2, "lora": {"r": 8, "alpha": 16}, "saveSteps": 20}
    result = run_runtime(
        "reward_model", tmp_path, model, parameters=parameters, data={"volume": "pairs", "format": "Parquet"}
    )
    assert result.returncode == 0, result.output[-3000:]

    held = result.results["heldOut"]
    before, after = held["before"], held["after"]
    print(
        f"\nReward model (LoRA): held-out pairwise accuracy {before['heldOutPairwiseAccuracy']:.3f} -> "
        f"{after['heldOutPairwiseAccuracy']:.3f}, score margin {before['heldOutScoreMargin']:.3f} -> "
        f"{after['heldOutScoreMargin']:.3f} on {after['heldOutPairs']} pairs (chance: 0.5)"
    )
    assert after["heldOutPairwiseAccuracy"] >= 0.9 and after["heldOutScoreMargin"] > before["heldOutScoreMargin"]
    steps = [e["metrics"] for e in result.platform.events if e.get("stage") == "Training" and e.get("metrics")]
    assert len(steps) == 20 and {"loss", "accuracy", "margin"} <= set(steps[-1])

    files = set(json.loads((result.outputs / "manifest.json").read_text())["files"])
    assert "adapter/adapter_model.safetensors" in files
    config = json.loads((result.outputs / "adapter" / "adapter_config.json").read_text())
    assert config["task_type"] == "SEQ_CLS"
