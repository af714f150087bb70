"""The `nodus/sft` trainer as a process, as the supervisor runs it (`data_runs.run_runtime`): full fine-tuning,
LoRA on chats with a resume, and pretraining from scratch with packing, each learning on the tiny model and
shown to on the held-out rows it never trained on; and the refusals of bad inputs, which come before any model is
loaded, in one line, with exit status 2.

The trainings are slow (the tiny model is built once per session; each run takes seconds); the refusals are fast.
"""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from data_runs import PROMPT, answer, run_runtime, words, write_rows


@pytest.fixture
def model(tiny_model: tuple[str, str]) -> Path:
    cache, revision = tiny_model
    return Path(cache) / "models--nodus--tiny-qwen3" / "snapshots" / revision


def stages(result: Any) -> list[str]:
    """The stages in the order reported, each once where it repeats."""
    seen: list[str] = []
    for event in result.platform.events:
        if event.get("stage") and (not seen or seen[-1] != event["stage"]):
            seen.append(event["stage"])
    return seen


def manifest(result: Any) -> set[str]:
    return set(json.loads((result.outputs / "manifest.json").read_text())["files"])


@pytest.mark.slow
def test_full_fine_tuning_lowers_the_held_out_loss_and_writes_the_model(tmp_path: Path, model: Path) -> None:
    rows = [{"question": PROMPT.format(word=w), "reply": answer(w[::-1])} for w in words(240)]
    write_rows(tmp_path / "volume" / "support" / "chats.jsonl", rows)
    data = {
        "volume": "support-chats",
        "revision": 3,
        "path": "support/chats.jsonl",
        "format": "JSONL",
        "columns": {"prompt": "question", "completion": "reply"},
    }
    parameters = {"steps": 20, "learningRate": 1e-3, "batchSize": 8, "saveSteps": 10}
    result = run_runtime("sft", tmp_path, model, parameters=parameters, data=data)
    assert result.returncode == 0, result.output[-3000:]

    held = result.results["heldOut"]
    before, after = held["before"]["heldOutLoss"], held["after"]["heldOutLoss"]
    print(f"\nSFT (full): held-out loss {before:.3f} -> {after:.3f} on {held['after']['heldOutRows']} held-out rows")
    assert held["metric"] == "heldOutLoss" and after < before and held["improved"]
    assert result.results["heldOutRows"] == 24 and result.results["trainRows"] == 216
    assert (result.results["method"], result.results["task"]) == ("Full", "SFT")
    assert len(result.results["history"]) == 20 and "mean_token_accuracy" in result.results["history"][-1]

    assert stages(result) == ["Baseline", "Training", "Evaluating", "Exporting"]
    training = [e for e in result.platform.events if e.get("stage") == "Training" and e.get("metrics")]
    assert [e["step"] for e in training] == list(range(1, 21)) and "meanTokenAccuracy" in training[0]["metrics"]
    assert result.metrics("Baseline") == [held["before"]] and result.metrics("Evaluating") == [held["after"]]

    files = manifest(result)
    assert {"model/model.safetensors", "model/tokenizer.json", "curves.png", "results.json", "provenance.json"} <= files
    assert not any(name.startswith("adapter/") for name in files)
    provenance = json.loads((result.outputs / "provenance.json").read_text())
    digest = hashlib.sha256((tmp_path / "volume" / "support" / "chats.jsonl").read_bytes()).hexdigest()
    assert provenance["data"]["files"] == [
        {
            "path": "support/chats.jsonl",
            "sha256": digest,
            "size": len((tmp_path / "volume/support/chats.jsonl").read_bytes()),
        }
    ]
    assert (provenance["data"]["volume"], provenance["data"]["revision"]) == ("support-chats", 3)
    assert provenance["model"]["revision"] == "hf://nodus/tiny-qwen3@test"

    from transformers import AutoModelForCausalLM

    trained = AutoModelForCausalLM.from_pretrained(str(result.outputs / "model"))
    assert trained.config.model_type == "qwen3"


@pytest.mark.slow
def test_lora_on_chats_writes_an_adapter_and_a_second_attempt_resumes(tmp_path: Path, model: Path) -> None:
    rows = [
        {
            "messages": [
                {"role": "user", "content": PROMPT.format(word=w)},
                {"role": "assistant", "content": answer(w[::-1])},
            ]
        }
        for w in words(200)
    ]
    write_rows(tmp_path / "volume" / "chats.jsonl", rows)
    parameters = {"steps": 6, "learningRate": 1e-2, "saveSteps": 3, "lora": {"r": 8, "alpha": 16}}
    data = {"volume": "chats", "format": "JSONL"}
    first = run_runtime("sft", tmp_path, model, parameters=parameters, data=data)
    assert first.returncode == 0, first.output[-3000:]
    held = first.results["heldOut"]
    print(
        f"\nSFT (LoRA, chats): held-out loss {held['before']['heldOutLoss']:.3f} -> {held['after']['heldOutLoss']:.3f}"
    )
    assert held["improved"] and first.results["method"] == "LoRA"
    assert "adapter/adapter_model.safetensors" in manifest(first) and "adapter/tokenizer.json" in manifest(first)

    # The supervisor starts a second attempt on the same state: it resumes from the last checkpoint and keeps the
    # baseline measured before any training, instead of measuring a trained model as the baseline.
    second = run_runtime("sft", tmp_path, model, parameters=parameters, data=data, env={"NODUS_ATTEMPT": "2"})
    assert second.returncode == 0, second.output[-3000:]
    assert "resuming from checkpoint-6" in second.output and "baseline kept from attempt 1" in second.output
    assert second.results["heldOut"]["before"] == held["before"] and second.results["attempt"] == "2"

    # A changed configuration never resumes another run's state.
    third = run_runtime("sft", tmp_path, model, parameters={**parameters, "steps": 7}, data=data)
    assert third.returncode == 3 and "belongs to another run configuration" in third.output


@pytest.mark.slow
def test_pretraining_from_scratch_with_packing_lowers_the_held_out_loss(tmp_path: Path, model: Path) -> None:
    lines = [f"The word {w} spelt backwards is {w[::-1]}." for w in words(400)]
    (tmp_path / "volume").mkdir(parents=True)
    (tmp_path / "volume" / "corpus.txt").write_text("\n".join(lines) + "\n")
    parameters = {
        "steps": 30,
        "learningRate": 3e-3,
        "maxLength": 128,
        "initialization": "Scratch",
        "packing": True,
        "saveSteps": 30,
    }
    data = {"volume": "corpus", "format": "Text"}
    result = run_runtime("sft", tmp_path, model, task="Pretrain", parameters=parameters, data=data)
    assert result.returncode == 0, result.output[-3000:]
    held = result.results["heldOut"]
    before, after = held["before"]["heldOutLoss"], held["after"]["heldOutLoss"]
    print(f"\nPretrain (Scratch, packed): held-out loss {before:.3f} -> {after:.3f}")
    # Fresh weights predict each of the ~400 tokens about evenly (ln 400 = 6.0); trained ones do much better.
    assert before > 5.0 and after < before - 1.0
    provenance = json.loads((result.outputs / "provenance.json").read_text())
    assert provenance["initialization"] == "Scratch" and result.results["task"] == "Pretrain"
    assert "model/model.safetensors" in manifest(result)


# --- refusals: before any model is loaded, one line, exit status 2 -----------------------------------------


def refusal(tmp_path: Path, parameters: dict[str, Any], data: dict[str, Any], *, task: str | None = None) -> str:
    """What the trainer prints when it refuses; a model folder that only looks like one is enough."""
    model = tmp_path / "model"
    model.mkdir(parents=True)
    (model / "config.json").write_text("{}")
    (tmp_path / "input").mkdir()
    params = {"task": task, "parameters": parameters, "data": data, "runtime": {"name": "nodus/sft"}}
    (tmp_path / "input" / "params.json").write_text(json.dumps(params))
    write_rows(
        tmp_path / "volume" / "chats.jsonl", [{"question": "q", "reply": "r"}, {"question": "q2", "reply": "r2"}]
    )
    contract = {
        "NODUS_INPUT_PARAMS": str(tmp_path / "input"),
        "NODUS_INPUT_MODEL": str(model),
        "NODUS_INPUT_DATA": str(tmp_path / "volume"),
        "NODUS_STATE_DIR": str(tmp_path / "state"),
        "NODUS_OUTPUT_DIR": str(tmp_path / "outputs"),
        "NODUS_ATTEMPT_API": str(tmp_path / "no.sock"),  # never called: the run stops before its first event
        "NODUS_JOB_NAME": "test",
    }
    process = subprocess.run(
        [sys.executable, "-m", "nodus.runtimes.sft"],
        env={**os.environ, **contract, "CUDA_VISIBLE_DEVICES": ""},
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert process.returncode == 2, process.stdout + process.stderr
    assert process.stderr == "" and "Traceback" not in process.stdout
    assert not any((tmp_path / "outputs").iterdir()) and not any((tmp_path / "state").iterdir())
    lines = process.stdout.strip().splitlines()
    assert len(lines) == 1, lines
    return lines[0]


def test_a_column_the_file_lacks_is_refused_naming_file_column_and_field(tmp_path: Path) -> None:
    data = {"volume": "support-chats", "path": "chats.jsonl", "columns": {"prompt": "question", "completion": "answer"}}
    assert refusal(tmp_path, {"steps": 1}, data) == (
        "nodus runtime: chats.jsonl (Volume support-chats): no column 'answer', which spec.data.columns.completion "
        "names (its columns: question, reply)"
    )


def test_an_unknown_format_is_refused(tmp_path: Path) -> None:
    line = refusal(tmp_path, {"steps": 1}, {"volume": "support-chats", "format": "XML"})
    assert line == "nodus runtime: spec.data.format: 'XML' is not a format nodus reads (JSONL, Parquet, CSV, Text)"


def test_qlora_without_cuda_is_refused_naming_the_parameter(tmp_path: Path) -> None:
    parameters = {"steps": 1, "lora": {"r": 8}, "quantization": "4bit"}
    line = refusal(
        tmp_path, parameters, {"volume": "support-chats", "columns": {"prompt": "question", "completion": "reply"}}
    )
    assert line.startswith(
        "nodus runtime: spec.parameters.quantization: 4bit (QLoRA) needs a CUDA GPU and this host has none"
    )


def test_scratch_with_a_lora_block_and_an_unknown_task_are_refused(tmp_path: Path) -> None:
    data = {"volume": "support-chats", "columns": {"prompt": "question", "completion": "reply"}}
    line = refusal(tmp_path / "a", {"initialization": "Scratch", "lora": {}}, data, task="Pretrain")
    assert line.startswith("nodus runtime: spec.parameters.initialization: Scratch trains every weight")
    line = refusal(tmp_path / "b", {}, data, task="DPO")
    assert line == "nodus runtime: spec.task: nodus/sft trains SFT or Pretrain, not DPO"
