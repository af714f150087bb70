"""Benchmark: seconds per step through nodus against plain TRL, for GRPO and for SFT, each measured in one run.

Run: `.venv/bin/python bench/train.py [--rows grpo,sft] [--steps 20] [--sft-steps 200] [--repeats 1]` (part of
`make bench`). Each row trains the same tiny model (`nodus.runtimes.tiny_model`, warmed up on the quickstart task)
the same way on both sides, on the quickstart's reverse-words tasks; a side's seconds per step is the mean gap
between consecutive steps, the first two of each run left out (model load, grader start).

- GRPO: 4 groups of 8 replies per step, 32 tokens per reply, LoRA r 16, learning rate 1e-3.
  nodus: a temporary project with the quickstart Environment (built with nodus-build, base image from the per-user
  cache), `nodus apply --wait` of a TrainingJob on `nodus/grpo-lora`: the supervisor, the attempt API over a Unix
  socket, graders in podman sandboxes. Plain TRL: a GRPOTrainer in this process, the reward function importing
  reverse_words.py directly. Goal: nodus within 10% of plain TRL (ratio <= 1.10). Needs podman and mmdebstrap.
- SFT: prompt/completion rows (the word, and `<answer>` with it spelt backwards), 8 rows per step, LoRA r 16
  (alpha 32), learning rate 1e-4, no checkpoint during the run. nodus: a temporary project with a Volume holding
  the rows (`nodus cp`), `nodus apply --wait` of a TrainingJob on `nodus/sft` (the supervisor, its step events
  through the attempt API, the held-out measurement before and after, which are not steps). Plain TRL: an
  SFTTrainer in this process with the same configuration on the same training rows (nodus's split of them,
  rendered with the chat template as nodus renders them). Goal: nodus within 5% of plain TRL (ratio <= 1.05).
  Needs no podman.

Seconds per step on the nodus side come from the supervisor's record of the trainer's step events
(`logs/events.jsonl`), on the plain side from a callback at each step's end. With `--repeats N` the two sides of a
row run alternately N times each and the medians are compared (this machine's other work moves single runs).
"""

from __future__ import annotations

import argparse
import importlib.util
import itertools
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from rich.console import Console
from rich.table import Table

REPO = Path(__file__).resolve().parents[1]
QUICKSTART = REPO / "examples" / "quickstart"
BIN = Path(sys.executable).parent
LEARNING_RATE = 1e-3
PARAMETERS = {
    "groupSize": 8,
    "groupsPerStep": 4,
    "maxTokens": 32,
    "learningRate": LEARNING_RATE,
    "saveSteps": 1000,
    "lora": {"r": 16, "alpha": 32},
}
SFT_BATCH, SFT_LEARNING_RATE = 8, 1e-4
SFT_PARAMETERS = {
    "batchSize": SFT_BATCH,
    "learningRate": SFT_LEARNING_RATE,
    "saveSteps": 100000,  # no checkpoint during the run, as on the plain side
    "lora": {"r": 16, "alpha": 32},
}
SKIP = 2
console = Console()


def tiny_model(cache: Path) -> str:
    from nodus.runtimes.tiny_model import Recipe, install

    revision, _, built = install(Recipe(), QUICKSTART / "env" / "reverse_words.py", cache)
    console.print(f"tiny model {'built' if built else 'cached'}: {revision}")
    return revision


def per_step(times: list[float]) -> float:
    gaps = [b - a for a, b in itertools.pairwise(times)][SKIP:]
    return sum(gaps) / len(gaps)


def through_nodus(workdir: Path, revision: str, steps: int) -> float:
    project = workdir / "project"
    project.mkdir()
    for name in ("environment.yaml", "env/reverse_words.py"):
        (project / name).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy(QUICKSTART / name, project / name)
    (project / "nodus.lock").write_text("lockfileVersion: 1\nenvironments: {}\n")
    job = {
        "apiVersion": "nodus.dev/v1beta1",
        "kind": "TrainingJob",
        "metadata": {"name": "bench"},
        "spec": {
            "runtime": "nodus/grpo-lora",
            "model": {"uri": f"hf://nodus/tiny-qwen3@{revision}"},
            "environment": {"name": "reverse-words@1.0.0", "trainTasks": 600, "heldOutTasks": 16, "seed": 0},
            "evaluation": {"baseline": False, "final": False},
            "parameters": {**PARAMETERS, "steps": steps},
        },
    }
    (project / "job.yaml").write_text(json.dumps(job))
    console.print("nodus: building the Environment and applying the TrainingJob ...")
    subprocess.run(
        [str(BIN / "nodus-build"), str(project), "--network", "none"],
        check=True,
        cwd=project,
        stdout=subprocess.DEVNULL,
    )
    subprocess.run(
        [str(BIN / "nodus"), "apply", str(project), "--yes", "--wait", "--timeout", "20m"],
        check=True,
        cwd=project,
        stdout=subprocess.DEVNULL,
    )
    events = project / ".nodus" / "jobs" / "default" / "bench" / "logs" / "events.jsonl"
    times = [
        row["at"]
        for row in map(json.loads, events.read_text().splitlines())
        if row.get("type") == "Progress" and "reward" in (row.get("metrics") or {})
    ]
    return per_step(times)


def plain_trl(workdir: Path, model: Path, steps: int) -> float:
    from datasets import Dataset
    from peft import LoraConfig
    from transformers import AutoModelForCausalLM, AutoTokenizer, TrainerCallback
    from trl import GRPOConfig, GRPOTrainer  # type: ignore[attr-defined]

    spec = importlib.util.spec_from_file_location("reverse_words", QUICKSTART / "env" / "reverse_words.py")
    assert spec is not None
    assert spec.loader is not None
    environment = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(environment)
    tasks = environment.tasks("train")
    answers = {t["prompt"]: t["answer"] for t in tasks}

    def reward(prompts: list[Any], completions: list[Any], **_: Any) -> list[float | None]:
        values: list[float | None] = []
        for prompt, completion in zip(prompts, completions, strict=True):
            value = environment.reward(completion[-1]["content"], answers[prompt[-1]["content"]])
            values.append(0.0 if value is None else float(value))
        return values

    times: list[float] = []

    class Clock(TrainerCallback):
        def on_step_end(self, *args: Any, **kwargs: Any) -> None:
            times.append(time.time())

    config = GRPOConfig(
        output_dir=str(workdir / "trl"),
        max_steps=steps,
        learning_rate=LEARNING_RATE,
        lr_scheduler_type="constant",
        per_device_train_batch_size=32,
        num_generations=8,
        max_completion_length=32,
        temperature=1.0,
        top_p=1.0,
        top_k=0,
        beta=0.04,
        logging_steps=1,
        save_strategy="no",
        report_to="none",
        gradient_checkpointing=False,
        use_cpu=True,
        seed=0,
        disable_tqdm=True,
        chat_template_kwargs={"enable_thinking": False},
    )
    trainer = GRPOTrainer(
        model=AutoModelForCausalLM.from_pretrained(model),
        reward_funcs=[reward],
        args=config,
        train_dataset=Dataset.from_list([{"prompt": [{"role": "user", "content": t["prompt"]}]} for t in tasks]),
        processing_class=AutoTokenizer.from_pretrained(model),
        peft_config=LoraConfig(
            r=16, lora_alpha=32, lora_dropout=0.0, target_modules="all-linear", task_type="CAUSAL_LM"
        ),
        callbacks=[Clock()],
    )
    console.print("plain TRL: training in process ...")
    trainer.train()
    return per_step(times)


def sft_rows() -> list[dict[str, str]]:
    """The SFT data: the quickstart's training tasks as prompt/completion rows."""
    environment = reverse_words()
    return [
        {"prompt": str(task["prompt"]), "completion": environment.gold_completion(str(task["answer"]))}
        for task in environment.tasks("train")
    ]


def reverse_words() -> Any:
    spec = importlib.util.spec_from_file_location("reverse_words", QUICKSTART / "env" / "reverse_words.py")
    assert spec is not None
    assert spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def step_times(events: Path, metric: str) -> list[float]:
    """When the supervisor received each training step's event (those carrying `metric`)."""
    return [
        row["at"]
        for row in map(json.loads, events.read_text().splitlines())
        if row.get("type") == "Progress" and metric in (row.get("metrics") or {})
    ]


def sft_through_nodus(workdir: Path, revision: str, steps: int) -> float:
    """`nodus apply --wait` of an SFT TrainingJob on a Volume the rows were uploaded to with `nodus cp`."""
    project = Path(tempfile.mkdtemp(prefix="sft-", dir=workdir))
    (project / "nodus.lock").write_text("lockfileVersion: 1\n")
    volume = {"apiVersion": "nodus.dev/v1", "kind": "Volume", "metadata": {"name": "chats"}, "spec": {}}
    (project / "volume.yaml").write_text(json.dumps(volume))
    (project / "chats.jsonl").write_text("".join(json.dumps(row) + "\n" for row in sft_rows()))
    nodus = [str(BIN / "nodus")]
    quiet: dict[str, Any] = {"check": True, "cwd": project, "stdout": subprocess.DEVNULL}
    subprocess.run([*nodus, "apply", "volume.yaml", "--yes"], **quiet)
    subprocess.run([*nodus, "cp", "chats.jsonl", "vol/chats:chats.jsonl"], **quiet)
    job = {
        "apiVersion": "nodus.dev/v1beta1",
        "kind": "TrainingJob",
        "metadata": {"name": "bench-sft"},
        "spec": {
            "runtime": "nodus/sft",
            "model": {"uri": f"hf://nodus/tiny-qwen3@{revision}"},
            "data": {"volume": "chats", "path": "chats.jsonl", "format": "JSONL"},
            "parameters": {**SFT_PARAMETERS, "steps": steps},
        },
    }
    (project / "job.yaml").write_text(json.dumps(job))
    console.print("nodus: applying the SFT TrainingJob ...")
    subprocess.run([*nodus, "apply", ".", "--yes", "--wait", "--timeout", "20m"], **quiet)
    times = step_times(project / ".nodus" / "jobs" / "default" / "bench-sft" / "logs" / "events.jsonl", "loss")
    if len(times) != steps:
        raise SystemExit(f"bench/train.py: TrainingJob bench-sft reported {len(times)} of {steps} steps")
    return per_step(times)


def sft_plain_trl(workdir: Path, model: Path, steps: int) -> float:
    """TRL's SFTTrainer in this process, configured as nodus.runtimes.sft configures it, on the rows nodus trains on."""
    from datasets import Dataset
    from peft import LoraConfig
    from transformers import AutoModelForCausalLM, TrainerCallback
    from trl import SFTConfig, SFTTrainer  # type: ignore[attr-defined]

    from nodus.runtimes.data import as_chat, split
    from nodus.runtimes.weights import load_tokenizer

    train, _ = split(sft_rows(), 0.1, 512, 0)  # the runtime's defaults: heldOutFraction, maxHeldOutRows, seed
    times: list[float] = []

    class Clock(TrainerCallback):
        def on_step_end(self, *args: Any, **kwargs: Any) -> None:
            times.append(time.time())

    config = SFTConfig(
        output_dir=str(workdir / "trl-sft"),
        max_steps=steps,
        learning_rate=SFT_LEARNING_RATE,
        lr_scheduler_type="linear",
        warmup_steps=0,
        per_device_train_batch_size=SFT_BATCH,
        gradient_accumulation_steps=1,
        max_length=1024,
        packing=False,
        logging_steps=1,
        save_strategy="no",
        report_to="none",
        gradient_checkpointing=False,
        use_cpu=True,
        bf16=False,
        seed=0,
        data_seed=0,
        disable_tqdm=True,
    )
    trainer = SFTTrainer(
        model=AutoModelForCausalLM.from_pretrained(model),
        args=config,
        train_dataset=Dataset.from_list([as_chat(row, True) for row in train]),
        processing_class=load_tokenizer(model),
        peft_config=LoraConfig(
            r=16, lora_alpha=32, lora_dropout=0.0, target_modules="all-linear", task_type="CAUSAL_LM"
        ),
        callbacks=[Clock()],
    )
    console.print("plain TRL: SFT in process ...")
    trainer.train()
    return per_step(times)


def alternate(repeats: int, plain: Callable[[], float], through: Callable[[], float]) -> tuple[float, float]:
    """Median seconds per step of each side, run alternately `repeats` times (plain TRL first)."""
    plains, nodus = [], []
    for _ in range(repeats):
        plains.append(plain())
        nodus.append(through())
    if repeats > 1:
        console.print(f"  plain TRL runs: {', '.join(f'{x:.4f}' for x in plains)}")
        console.print(f"  nodus runs:     {', '.join(f'{x:.4f}' for x in nodus)}")
    return statistics.median(plains), statistics.median(nodus)


def added(nodus_seconds: float, trl_seconds: float) -> str:
    """What nodus adds to a step, in milliseconds: a fixed cost per step (the step's event through the attempt API,
    the supervisor and `nodus apply --wait` sharing the CPU) weighs less the longer a step is."""
    return f"{1000 * (nodus_seconds - trl_seconds):+.1f} ms"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--rows", default="grpo,sft", help="which rows: grpo, sft or both (default)")
    parser.add_argument("--steps", type=int, default=20, help="GRPO steps per run")
    parser.add_argument("--sft-steps", type=int, default=200, help="SFT steps per run")
    parser.add_argument("--repeats", type=int, default=1, help="runs of each side per row (medians compared)")
    args = parser.parse_args()
    rows = {row.strip() for row in args.rows.split(",") if row.strip()}
    if not rows or rows - {"grpo", "sft"}:
        console.print(f"bench/train.py: --rows {args.rows!r}: name grpo, sft or both (grpo,sft)")
        return 2
    if "grpo" in rows and shutil.which("podman") is None:
        console.print("bench/train.py: the grpo row needs podman (apt-get install podman runc uidmap); --rows sft")
        return 2
    verdicts: list[str] = []
    table = Table(title=f"Seconds per step, nodus against plain TRL (first {SKIP} steps of each run left out)")
    table.add_column("row")
    table.add_column("run")
    table.add_column("s/step", justify="right")
    table.add_column("ratio", justify="right")
    table.add_column("added", justify="right")
    with tempfile.TemporaryDirectory(prefix="nodus-bench-train-") as temporary:
        workdir = Path(temporary)
        cache = Path(os.environ.get("HF_HUB_CACHE") or workdir / "hub")
        os.environ["HF_HUB_CACHE"] = str(cache)
        revision = tiny_model(cache)
        model = cache / "models--nodus--tiny-qwen3" / "snapshots" / revision
        if "grpo" in rows:
            trl_seconds, nodus_seconds = alternate(
                args.repeats,
                lambda: plain_trl(workdir, model, args.steps),
                lambda: through_nodus(Path(tempfile.mkdtemp(dir=workdir)), revision, args.steps),
            )
            label = f"GRPO, {args.steps} steps"
            table.add_row(label, "plain TRL, in-process reward (baseline)", f"{trl_seconds:.3f}", "1.00x", "")
            table.add_row(
                label,
                "nodus: supervisor, attempt API, sandboxed graders",
                f"{nodus_seconds:.3f}",
                f"{nodus_seconds / trl_seconds:.2f}x",
                added(nodus_seconds, trl_seconds),
            )
            verdict = "within" if nodus_seconds <= 1.10 * trl_seconds else "NOT within"
            verdicts.append(f"GRPO: nodus is {verdict} 10% of plain TRL (goal: ratio <= 1.10)")
        if "sft" in rows:
            trl_seconds, nodus_seconds = alternate(
                args.repeats,
                lambda: sft_plain_trl(workdir, model, args.sft_steps),
                lambda: sft_through_nodus(workdir, revision, args.sft_steps),
            )
            label = f"SFT (LoRA), {args.sft_steps} steps"
            table.add_row(label, "plain TRL SFTTrainer (baseline)", f"{trl_seconds:.4f}", "1.00x", "")
            table.add_row(
                label,
                "nodus apply: nodus/sft, supervisor, step events",
                f"{nodus_seconds:.4f}",
                f"{nodus_seconds / trl_seconds:.3f}x",
                added(nodus_seconds, trl_seconds),
            )
            verdict = "within" if nodus_seconds <= 1.05 * trl_seconds else "NOT within"
            verdicts.append(f"SFT: nodus is {verdict} 5% of plain TRL (goal: ratio <= 1.05)")
    console.print(table)
    for line in verdicts:
        console.print(line)
    return 0


if __name__ == "__main__":
    sys.exit(main())
