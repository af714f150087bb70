"""The data-driven runtimes' parts without training: reading and mapping data in every format, the refusals a
user sees (one line naming the file, the column and the `spec.data` field), the held-out split, the method
(Full, LoRA, QLoRA) as the planner reads it, tracking that never fails a run, progress metrics and the curves.

Fast: no model is loaded (the refusals of a whole trainer process, which must come before any model, are in
test_sft_trainer.py)."""

from __future__ import annotations

import json
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

from nodus.runtimes.data import DataSpec, Shape, as_chat, files_of, load, split
from nodus.runtimes.outputs import GRPO_CURVES, Curves, history, plot
from nodus.runtimes.progress import camel, step_metrics
from nodus.runtimes.refusal import Refusal
from nodus.runtimes.tracking import GuardedTracker, guard, report_to
from nodus.runtimes.weights import Weights

SFT_SHAPES = (Shape(("prompt", "completion")), Shape(("messages",)))
PAIRS = (Shape(("prompt", "chosen", "rejected")),)


def refused(capsys: pytest.CaptureFixture[str], call: Any) -> str:
    """The one line a refusal prints (and that it exits with status 2)."""
    with pytest.raises(Refusal) as caught:
        call()
    assert caught.value.code == 2
    lines = capsys.readouterr().out.strip().splitlines()
    assert len(lines) == 1, lines
    return lines[0]


def write(path: Path, text: str) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)
    return path


def test_jsonl_columns_are_mapped_onto_the_runtime_s_names(tmp_path: Path) -> None:
    write(
        tmp_path / "chats.jsonl",
        '{"question": "2+2?", "answer": "4", "extra": 1}\n\n{"question": "3+3?", "answer": "6"}\n',
    )
    spec = DataSpec(
        volume="support", revision=3, path="chats.jsonl", columns={"prompt": "question", "completion": "answer"}
    )
    data = load(tmp_path, spec, SFT_SHAPES, "nodus/sft")
    assert data.shape == SFT_SHAPES[0]
    assert data.rows == [{"prompt": "2+2?", "completion": "4"}, {"prompt": "3+3?", "completion": "6"}]
    files = data.provenance()["files"]
    assert files[0]["path"] == "chats.jsonl" and len(files[0]["sha256"]) == 64
    assert data.provenance()["volume"] == "support" and data.provenance()["revision"] == 3


def test_a_shape_is_found_from_the_file_when_nothing_is_mapped(tmp_path: Path) -> None:
    chat = [{"role": "user", "content": "hi"}, {"role": "assistant", "content": "hello"}]
    write(tmp_path / "a.jsonl", json.dumps({"messages": chat}) + "\n")
    data = load(tmp_path, DataSpec(), SFT_SHAPES, "nodus/sft")
    assert data.shape == SFT_SHAPES[1] and data.rows == [{"messages": chat}]


def test_csv_parquet_and_text_are_read(tmp_path: Path) -> None:
    write(tmp_path / "labels.csv", 'prompt,completion,label\n"Hi, you",Hello,up\nHi,Go away,0\n')
    kto = (Shape(("prompt", "completion", "label")),)
    data = load(tmp_path, DataSpec(format="CSV"), kto, "nodus/kto")
    assert [row["label"] for row in data.rows] == [True, False] and data.rows[0]["prompt"] == "Hi, you"

    import pyarrow as pa  # type: ignore[import-untyped]
    import pyarrow.parquet as pq  # type: ignore[import-untyped]

    table = pa.table({"q": ["a", "b"], "good": ["x", "y"], "bad": ["z", "w"]})
    (tmp_path / "pairs").mkdir()
    pq.write_table(table, tmp_path / "pairs" / "p.parquet")
    spec = DataSpec(path="pairs", format="Parquet", columns={"prompt": "q", "chosen": "good", "rejected": "bad"})
    assert load(tmp_path, spec, PAIRS, "nodus/dpo").rows[1] == {"prompt": "b", "chosen": "y", "rejected": "w"}

    write(tmp_path / "corpus" / "one.txt", "first line\n\nsecond line\n")
    write(tmp_path / "corpus" / ".hidden.txt", "never read\n")
    text = load(tmp_path, DataSpec(path="corpus", format="Text"), (Shape(("text",)),), "nodus/sft")
    assert [row["text"] for row in text.rows] == ["first line", "second line"]


def test_a_folder_without_path_reads_every_file_of_the_format(tmp_path: Path) -> None:
    write(tmp_path / "b" / "2.jsonl", '{"prompt": "p2", "completion": "c2"}\n')
    write(tmp_path / "a.jsonl", '{"prompt": "p1", "completion": "c1"}\n')
    write(tmp_path / "notes.txt", "not JSONL\n")
    write(tmp_path / ".nodus" / "x.jsonl", "{}\n")
    assert [p.relative_to(tmp_path).as_posix() for p in files_of(tmp_path, DataSpec())] == ["a.jsonl", "b/2.jsonl"]
    assert [row["prompt"] for row in load(tmp_path, DataSpec(), SFT_SHAPES, "nodus/sft").rows] == ["p1", "p2"]


def test_a_missing_column_names_the_file_the_column_and_the_field(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    write(tmp_path / "chats.jsonl", '{"question": "q", "reply": "r"}\n')
    spec = DataSpec(volume="support", path="chats.jsonl", columns={"prompt": "question", "completion": "answer"})
    line = refused(capsys, lambda: load(tmp_path, spec, SFT_SHAPES, "nodus/sft"))
    assert line == (
        "nodus runtime: chats.jsonl (Volume support): no column 'answer', which spec.data.columns.completion names "
        "(its columns: question, reply)"
    )
    # Not mapped: the runtime's own name is looked for, and the line says where to map it.
    spec = DataSpec(volume="prefs", revision=2)
    write(tmp_path / "chats.jsonl", '{"prompt": "q", "chosen": "a"}\n')
    line = refused(capsys, lambda: load(tmp_path, spec, PAIRS, "nodus/dpo"))
    assert "chats.jsonl (Volume prefs revision 2): no column 'rejected'" in line
    assert "spec.data.columns.rejected" in line
    # A later row that lacks a column is named by its row.
    write(tmp_path / "chats.jsonl", '{"prompt": "q", "completion": "a"}\n{"prompt": "q2"}\n')
    line = refused(capsys, lambda: load(tmp_path, DataSpec(), SFT_SHAPES, "nodus/sft"))
    assert "chats.jsonl (the data Volume) row 2: no column 'completion'" in line


def test_bad_inputs_are_refused_in_one_line(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    write(tmp_path / "d.jsonl", '{"prompt": "q", "completion": "a"}\n')
    line = refused(capsys, lambda: files_of(tmp_path, DataSpec(format="XML")))
    assert line == "nodus runtime: spec.data.format: 'XML' is not a format nodus reads (JSONL, Parquet, CSV, Text)"
    line = refused(capsys, lambda: files_of(tmp_path, DataSpec(path="../outside.jsonl")))
    assert "spec.data.path: '../outside.jsonl' leads outside the data Volume" in line
    line = refused(capsys, lambda: files_of(tmp_path, DataSpec(path="missing.jsonl", volume="v")))
    assert "spec.data.path: missing.jsonl (Volume v) does not exist" in line
    line = refused(capsys, lambda: files_of(tmp_path, DataSpec(format="Parquet")))
    assert "holds no Parquet file" in line
    spec = DataSpec(columns={"answer": "a"})
    line = refused(capsys, lambda: load(tmp_path, spec, SFT_SHAPES, "nodus/sft"))
    assert "spec.data.columns.answer: nodus/sft reads no column 'answer'" in line
    write(tmp_path / "d.jsonl", '{"prompt": "q", "completion": "a"}\nnot json\n')
    line = refused(capsys, lambda: load(tmp_path, DataSpec(), SFT_SHAPES, "nodus/sft"))
    assert "d.jsonl (the data Volume) line 2: not JSON" in line
    write(tmp_path / "d.jsonl", '{"prompt": "q", "completion": "a", "label": "maybe"}\n')
    line = refused(capsys, lambda: load(tmp_path, DataSpec(), (Shape(("prompt", "completion", "label")),), "k"))
    assert "label 'maybe' is not a thumbs-up or thumbs-down" in line
    line = refused(capsys, lambda: DataSpec.from_params({}, "nodus/dpo"))
    assert line == "nodus runtime: spec.data: nodus/dpo trains on a data set; name its Volume in spec.data.volume"


def test_the_held_out_split_is_deterministic_keeps_prompts_whole_and_follows_the_seed() -> None:
    rows = [{"prompt": f"p{i // 2}", "completion": f"c{i}", "label": i % 2 == 0} for i in range(200)]
    train, held = split(rows, 0.1, 512, seed=0)
    assert len(held) == 20 and len(train) == 180
    assert {r["prompt"] for r in held}.isdisjoint({r["prompt"] for r in train})
    assert split(list(reversed(rows)), 0.1, 512, seed=0)[1] == list(reversed(held))  # whatever the rows' order
    assert {r["prompt"] for r in split(rows, 0.1, 512, seed=1)[1]} != {r["prompt"] for r in held}
    assert len(split(rows, 0.5, 6, seed=0)[1]) == 6  # at most maxHeldOutRows
    assert len(split(rows[:4], 0.01, 512, seed=0)[1]) == 2  # at least one prompt, never all of them


def test_texts_become_chat_turns_when_the_run_uses_the_chat_template() -> None:
    row = {"prompt": "Q", "chosen": "A", "rejected": "B"}
    assert as_chat(row, chat=True) == {
        "prompt": [{"role": "user", "content": "Q"}],
        "chosen": [{"role": "assistant", "content": "A"}],
        "rejected": [{"role": "assistant", "content": "B"}],
    }
    assert as_chat(row, chat=False) == row
    mixed = {"prompt": [{"role": "system", "content": "S"}, {"role": "user", "content": "Q"}], "completion": "A"}
    assert as_chat(mixed, chat=False)["completion"] == [{"role": "assistant", "content": "A"}]
    assert as_chat({"text": "plain"}, chat=True) == {"text": "plain"}


def test_the_method_is_read_as_the_planner_reads_it(capsys: pytest.CaptureFixture[str]) -> None:
    assert Weights.from_parameters({}).method == "Full" and Weights.from_parameters({}).folder == "model"
    lora = Weights.from_parameters({"lora": {"r": 8, "targetModules": ["q_proj"]}})
    assert (lora.method, lora.folder, lora.lora and lora.lora.r) == ("LoRA", "adapter", 8)
    assert Weights.from_parameters({"lora": {}, "quantization": "4bit"}).method == "QLoRA"
    assert Weights.from_parameters({"lora": {"quantization": "4bit"}}).method == "QLoRA"
    assert Weights.from_parameters({"lora": {}, "quantization": "8bit"}).method == "LoRA"
    line = refused(capsys, lambda: Weights.from_parameters({"quantization": "4bit"}))
    assert line.startswith("nodus runtime: spec.parameters.quantization: 4bit weights are frozen")


def test_the_qlora_refusal_names_the_parameter_and_why(capsys: pytest.CaptureFixture[str]) -> None:
    torch = pytest.importorskip("torch")
    from nodus.runtimes.weights import check_quantization

    if torch.cuda.is_available():
        pytest.skip("this host has CUDA: QLoRA is not refused for want of it")
    line = refused(capsys, lambda: check_quantization(Weights.from_parameters({"lora": {}, "quantization": "4bit"})))
    assert line.startswith("nodus runtime: spec.parameters.quantization: 4bit (QLoRA) needs a CUDA GPU")


def test_a_teacher_with_another_vocabulary_is_refused_before_any_weights_load(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    pytest.importorskip("transformers")
    from transformers import Qwen3Config

    from nodus.runtimes.distill import Distill

    for name, vocabulary in (("student", 400), ("teacher", 512)):
        Qwen3Config(vocab_size=vocabulary, hidden_size=8, num_hidden_layers=1).save_pretrained(tmp_path / name)
    run = SimpleNamespace(context=SimpleNamespace(model=tmp_path / "student"), teacher=tmp_path / "teacher")
    line = refused(capsys, lambda: Distill().load_model(run))  # type: ignore[arg-type]
    assert line == (
        "nodus runtime: spec.teacher: the teacher's vocabulary has 512 tokens and the model's 400; distillation "
        "compares whole next-token distributions, so they must share one"
    )


def test_tracking_is_asked_for_but_never_fails_the_run(monkeypatch: pytest.MonkeyPatch) -> None:
    warnings: list[str] = []
    monkeypatch.delenv("MLFLOW_TRACKING_URI", raising=False)
    monkeypatch.delenv("WANDB_API_KEY", raising=False)
    monkeypatch.delenv("WANDB_MODE", raising=False)
    assert report_to({}, warnings.append) == [] and warnings == []
    params = {"tracking": {"mlflow": {"uri": "http://127.0.0.1:5000"}, "wandb": {"connection": "team"}}}
    assert report_to(params, warnings.append) == []
    assert [w.split(":")[0] for w in warnings] == ["tracking.mlflow", "tracking.wandb"]
    assert "MLFLOW_TRACKING_URI is not set" in warnings[0] and "WANDB_API_KEY is not set" in warnings[1]

    class Failing:
        calls = 0

        def on_log(self, *args: Any, **kwargs: Any) -> None:
            Failing.calls += 1
            raise ConnectionError("http://127.0.0.1:5000 refused the connection")

    Failing.__name__ = "MLflowCallback"
    trainer = SimpleNamespace(callback_handler=SimpleNamespace(callbacks=[Failing(), object()]))
    warnings.clear()
    guard(trainer, warnings.append)
    tracker = trainer.callback_handler.callbacks[0]
    assert isinstance(tracker, GuardedTracker)
    assert tracker.on_log(None, None, None, logs={"loss": 1.0}) is None
    assert tracker.on_log(None, None, None, logs={"loss": 0.5}) is None  # dropped after the first failure
    assert Failing.calls == 1
    assert warnings == [
        "tracking.mlflow: reporting failed (http://127.0.0.1:5000 refused the connection); going on without mlflow"
    ]


def test_progress_metrics_are_camel_cased_and_finite() -> None:
    assert camel("rewards/accuracies") == "rewardsAccuracies" and camel("mean_token_accuracy") == "meanTokenAccuracy"
    logs = {"loss": 0.5, "rewards/accuracies": 1, "kl": float("nan"), "grad_norm": float("inf"), "epoch": 0.1}
    assert step_metrics(logs, ("loss", "rewards/accuracies", "kl", "grad_norm")) == {
        "loss": 0.5,
        "rewardsAccuracies": 1.0,
    }


def test_curves_keep_a_runtime_s_own_metric_and_grpo_s_are_unchanged(tmp_path: Path) -> None:
    log = [
        {"step": 1, "loss": 0.7, "rewards/accuracies": 0.5, "reward": 9.0},
        {"step": 1, "eval_loss": 0.9},
        {"step": 2, "loss": 0.4, "rewards/accuracies": 1.0},
    ]
    dpo = Curves(keys=("loss", "rewards/accuracies"), metric="rewards/accuracies", title="DPO")
    rows = history(log, dpo.keys)
    assert rows == [
        {"step": 1, "loss": 0.7, "rewards/accuracies": 0.5},
        {"step": 2, "loss": 0.4, "rewards/accuracies": 1.0},
    ]
    assert plot(rows, tmp_path / "dpo.png", dpo) and (tmp_path / "dpo.png").read_bytes().startswith(b"\x89PNG")
    assert GRPO_CURVES.keys == ("loss", "reward", "reward_std", "kl", "frac_reward_zero_std")
    assert history(log) == [{"step": 1, "loss": 0.7, "reward": 9.0}, {"step": 2, "loss": 0.4}]
