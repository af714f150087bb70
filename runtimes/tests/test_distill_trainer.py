"""The `nodus/distill` trainer as a process (`data_runs.run_runtime`): a student with fresh weights, distilled
on-policy from the tiny model (the teacher, warmed up on the quickstart task) on chats, comes closer to the
teacher on held-out prompts: its KL divergence from the teacher on the teacher's own replies falls. Slow: the tiny
model is built once per session, the run takes seconds."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from data_runs import PROMPT, answer, run_runtime, words, write_rows

pytestmark = pytest.mark.slow


@pytest.fixture
def teacher(tiny_model: tuple[str, str]) -> Path:
    cache, revision = tiny_model
    return Path(cache) / "models--nodus--tiny-qwen3" / "snapshots" / revision


def fresh_student(teacher: Path, folder: Path) -> Path:
    """The teacher's architecture and tokenizer with new random weights: a student that knows nothing yet."""
    import torch
    from transformers import AutoConfig, AutoModelForCausalLM, AutoTokenizer

    torch.manual_seed(7)
    fresh = AutoModelForCausalLM.from_config(AutoConfig.from_pretrained(teacher))  # type: ignore[no-untyped-call, unused-ignore]
    fresh.save_pretrained(folder)
    AutoTokenizer.from_pretrained(teacher).save_pretrained(folder)
    return folder


def test_distillation_lowers_the_students_held_out_kl_to_the_teacher(tmp_path: Path, teacher: Path) -> None:
    student = fresh_student(teacher, tmp_path / "student")
    chats = [
        {
            "messages": [
                {"role": "user", "content": PROMPT.format(word=w)},
                {"role": "assistant", "content": answer(w[::-1])},
            ]
        }
        for w in words(300)
    ]
    write_rows(tmp_path / "volume" / "chats.jsonl", chats)
    parameters = {"steps": 15, "learningRate": 3e-3, "temperature": 1.0, "maxCompletionLength": 16, "saveSteps": 15}
    result = run_runtime(
        "distill",
        tmp_path,
        student,
        teacher=teacher,
        parameters=parameters,
        data={"volume": "chats", "format": "JSONL"},
    )
    assert result.returncode == 0, result.output[-3000:]

    held = result.results["heldOut"]
    before, after = held["before"], held["after"]
    print(
        f"\nDistill (full): student's held-out KL to the teacher {before['heldOutKL']:.3f} -> {after['heldOutKL']:.3f}"
        f" nats per token over {after['heldOutTokens']} teacher tokens"
    )
    assert held["metric"] == "heldOutKL" and held["improved"] and after["heldOutKL"] < before["heldOutKL"]
    steps = [e["metrics"] for e in result.platform.events if e.get("stage") == "Training" and e.get("metrics")]
    assert len(steps) == 15 and "loss" in steps[-1]

    provenance = json.loads((result.outputs / "provenance.json").read_text())
    assert provenance["teacher"]["revision"] == "hf://nodus/tiny-qwen3@teacher"
    assert provenance["teacher"]["digest"].startswith("sha256:")
    assert "model/model.safetensors" in json.loads((result.outputs / "manifest.json").read_text())["files"]
