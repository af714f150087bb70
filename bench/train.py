"""Benchmark: seconds per GRPO step through nodus (external, sandboxed grading) against plain TRL (in-process reward).

Run: `.venv/bin/python bench/train.py [--steps 20]` (part of `make bench`). Both sides train the same tiny
model (`nodus.runtimes.tiny_model`, warmed up on the quickstart task) with the same GRPO configuration: 4
groups of 8 replies per step, 32 tokens per reply, LoRA r 16, learning rate 1e-3, on the quickstart's
reverse-words tasks.

- nodus: a temporary project with the quickstart Environment (built with nodus-build, base image from the
  per-user cache), `nodus apply --wait` of a TrainingJob on `nodus/grpo-lora`: the supervisor, the attempt
  API over a Unix socket, graders in podman sandboxes. Seconds per step from the supervisor's record of the
  trainer's step events.
- plain TRL: a GRPOTrainer in this process, the reward function importing reverse_words.py directly.

The first two steps of each side are left out (model load and grader start). Goal: nodus within 10% of plain
TRL (ratio <= 1.10). Needs podman and mmdebstrap (the grader image).
"""

from __future__ import annotations

import argparse
import importlib.util
import itertools
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from rich.console import Console
from rich.table import Table

REPO = Path(__file__).resolve().parents[1]
QUICKSTART = REPO / "examples" / "quickstart"
BIN = Path(sys.executable).parent
PARAMETERS = {
    "groupSize": 8,
    "groupsPerStep": 4,
    "maxTokens": 32,
    "learningRate": 1e-3,
    "saveSteps": 1000,
    "lora": {"r": 16, "alpha": 32},
}
SKIP = 2
console = Console()


def tiny_model(cache: Path) -> str:
    from nodus.runtimes.tiny_model import Recipe, install

    revision, _, built = install(Recipe(), QUICKSTART / "reverse_words.py", cache)
    console.print(f"tiny model {'built' if built else 'cached'}: {revision}")
    return revision


def per_step(times: list[float]) -> float:
    gaps = [b - a for a, b in itertools.pairwise(times)][SKIP:]
    return sum(gaps) / len(gaps)


def through_nodus(workdir: Path, revision: str, steps: int) -> float:
    project = workdir / "project"
    project.mkdir()
    for name in ("environment.yaml", "reverse_words.py"):
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
    from trl import GRPOConfig, GRPOTrainer

    spec = importlib.util.spec_from_file_location("reverse_words", QUICKSTART / "reverse_words.py")
    assert spec is not None
    assert spec.loader is not None
    environment = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(environment)
    tasks = environment.tasks("train")
    answers = {t["prompt"]: t["answer"] for t in tasks}

    def reward(prompts: list[Any], completions: list[Any], **_: Any) -> list[float | None]:
        values = []
        for prompt, completion in zip(prompts, completions, strict=True):
            value = environment.reward(completion[-1]["content"], answers[prompt[-1]["content"]])
            values.append(0.0 if value is None else float(value))
        return values

    times: list[float] = []

    class Clock(TrainerCallback):  # type: ignore[misc]
        def on_step_end(self, *args: Any, **kwargs: Any) -> None:
            times.append(time.time())

    config = GRPOConfig(
        output_dir=str(workdir / "trl"),
        max_steps=steps,
        learning_rate=PARAMETERS["learningRate"],
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


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--steps", type=int, default=20)
    args = parser.parse_args()
    if shutil.which("podman") is None:
        console.print("bench/train.py needs podman (apt-get install podman runc uidmap)")
        return 2
    with tempfile.TemporaryDirectory(prefix="nodus-bench-train-") as temporary:
        workdir = Path(temporary)
        cache = Path(os.environ.get("HF_HUB_CACHE") or workdir / "hub")
        os.environ["HF_HUB_CACHE"] = str(cache)
        revision = tiny_model(cache)
        model = cache / "models--nodus--tiny-qwen3" / "snapshots" / revision
        trl_seconds = plain_trl(workdir, model, args.steps)
        nodus_seconds = through_nodus(workdir, revision, args.steps)
    table = Table(title=f"GRPO seconds per step ({args.steps} steps, first {SKIP} left out)")
    table.add_column("run")
    table.add_column("s/step", justify="right")
    table.add_column("ratio", justify="right")
    table.add_row("plain TRL, in-process reward (baseline)", f"{trl_seconds:.3f}", "1.00x")
    table.add_row(
        "nodus: supervisor, attempt API, sandboxed graders",
        f"{nodus_seconds:.3f}",
        f"{nodus_seconds / trl_seconds:.2f}x",
    )
    console.print(table)
    verdict = "within" if nodus_seconds <= 1.10 * trl_seconds else "NOT within"
    console.print(f"nodus is {verdict} 10% of plain TRL (goal: ratio <= 1.10)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
