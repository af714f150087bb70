"""The `nodus/grpo-lora` trainer: GRPO with a LoRA adapter (TRL's GRPOTrainer, PEFT), graded by the platform.

Who runs it: the job supervisor, as the command of `runtimes/grpo-lora.yaml`
(`python -m nodus.runtimes.grpo_lora`), with the contract of `contract.RunContext`. The flow, reported as
stages through the attempt API:

    Baseline    greedy replies to the held-out tasks, graded in phase Baseline (skipped on a resume: the
                baseline is saved in the state folder the first time)
    Training    GRPO steps: `groupSize` replies to each of `groupsPerStep` train tasks, each reply graded by
                the platform (an async reward function posts them to `gradings`); loss, reward, reward std,
                KL per step as events; checkpoints in NODUS_STATE_DIR every `saveSteps`, resumed from
    Evaluating  greedy replies to the same held-out tasks, graded in phase Evaluation
    Exporting   adapter/ with the tokenizer, results.json, provenance.json, curves.png, manifest.json

The trainer never sees an answer (tasks come without them) and never grades itself: the before-and-after
comparison in the TrainingJob's status is computed by the platform from its own record of the verdicts.
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from nodus.runtimes.attempt import reward_of
from nodus.runtimes.contract import RunContext
from nodus.runtimes.distributed import agreed_checkpoint
from nodus.runtimes.evaluation import run_episodes
from nodus.runtimes.generation import Sampling, TransformersGenerator, as_messages, make_generator, tools_of
from nodus.runtimes.multiturn import make_rollout, rollout_rows
from nodus.runtimes.outputs import export, write_json


@dataclass(frozen=True)
class LoRA:
    r: int = 16
    alpha: int = 32
    dropout: float = 0.0
    target_modules: Any = "all-linear"


@dataclass(frozen=True)
class Parameters:
    """The merged parameters (runtimes/grpo-lora.yaml holds the schema and the defaults)."""

    steps: int = 50
    learning_rate: float = 4e-5
    group_size: int = 8
    groups_per_step: int = 4
    max_tokens: int = 256
    temperature: float = 1.0
    top_p: float = 1.0
    top_k: int = 0
    beta: float = 0.04
    lora: LoRA = field(default_factory=LoRA)
    max_turns: int = 1
    max_completion_length: int | None = None
    max_episode_tokens: int = 2048
    save_steps: int = 10
    seed: int = 0
    eval_max_tokens: int | None = None
    generation_backend: str = "auto"
    scheduler: str = "constant"
    warmup_steps: int = 0

    @classmethod
    def from_json(cls, raw: dict[str, Any]) -> Parameters:
        lora = raw.get("lora") or {}
        return cls(
            steps=int(raw.get("steps", cls.steps)),
            learning_rate=float(raw.get("learningRate", cls.learning_rate)),
            group_size=int(raw.get("groupSize", cls.group_size)),
            groups_per_step=int(raw.get("groupsPerStep", cls.groups_per_step)),
            max_tokens=int(raw.get("maxTokens", cls.max_tokens)),
            temperature=float(raw.get("temperature", cls.temperature)),
            top_p=float(raw.get("topP", cls.top_p)),
            top_k=int(raw.get("topK", cls.top_k)),
            beta=float(raw.get("beta", cls.beta)),
            lora=LoRA(
                r=int(lora.get("r", LoRA.r)),
                alpha=int(lora.get("alpha", LoRA.alpha)),
                dropout=float(lora.get("dropout", LoRA.dropout)),
                target_modules=lora.get("targetModules", LoRA.target_modules),
            ),
            max_turns=int(raw.get("maxTurns", cls.max_turns)),
            max_completion_length=raw.get("maxCompletionLength"),
            max_episode_tokens=int(raw.get("maxEpisodeTokens", cls.max_episode_tokens)),
            save_steps=int(raw.get("saveSteps", cls.save_steps)),
            seed=int(raw.get("seed", cls.seed)),
            eval_max_tokens=raw.get("evalMaxTokens"),
            generation_backend=str(raw.get("generationBackend", cls.generation_backend)),
            scheduler=str(raw.get("scheduler", cls.scheduler)),
            warmup_steps=int(raw.get("warmupSteps", cls.warmup_steps)),
        )

    @property
    def completion_tokens(self) -> int:
        """Tokens of its own the model learns from per episode (every turn's reply, not the environment's)."""
        if self.max_completion_length is not None:
            return int(self.max_completion_length)
        return min(self.max_tokens * self.max_turns, self.max_episode_tokens)


def log(message: str) -> None:
    print(f"grpo-lora: {message}", flush=True)


# --- recovery state --------------------------------------------------------------------------------------


def run_config_digest(context: RunContext) -> str:
    """What recovery state is bound to: the parameters, model revision, runtime and environment."""
    params = context.params
    bound = {
        "parameters": params.get("parameters"),
        "modelRevision": params.get("modelRevision"),
        "runtime": params.get("runtime"),
        "environment": params.get("environment"),
        "evaluation": params.get("evaluation"),
    }
    return hashlib.sha256(json.dumps(bound, sort_keys=True).encode()).hexdigest()


def check_state(context: RunContext) -> None:
    """Refuse state written by a different run configuration (a resume must continue the same run)."""
    path = context.state / "run-config.json"
    digest = run_config_digest(context)
    if path.is_file():
        saved = json.loads(path.read_text()).get("digest")
        if saved != digest:
            log(f"the state in {context.state} belongs to another run configuration ({saved[:12]}...); refusing it")
            raise SystemExit(3)
        return
    write_json(path, {"digest": digest})


def last_checkpoint(folder: Path) -> Path | None:
    """The newest complete TRL checkpoint (one with trainer_state.json) that every training process holds, or None
    (`distributed.agreed_checkpoint`: with one process, its newest)."""
    return agreed_checkpoint(folder, log)


# --- the trainer -----------------------------------------------------------------------------------------


def load_model(context: RunContext) -> tuple[Any, Any]:
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(context.model)
    if tokenizer.pad_token is None:
        tokenizer.pad_token = tokenizer.eos_token
    dtype = torch.bfloat16 if torch.cuda.is_available() and torch.cuda.is_bf16_supported() else torch.float32
    model: Any = AutoModelForCausalLM.from_pretrained(str(context.model), dtype=dtype)
    if torch.cuda.is_available():
        model = model.to("cuda")
    return model, tokenizer


def make_reward(context: RunContext) -> Any:
    """The reward function TRL calls once per batch: the batch's replies go to the platform's grader.

    Async, so TRL runs it on its event-loop thread; the HTTP call itself runs in a worker thread.
    """

    async def grader(prompts: list[Any], completions: list[Any], task_id: list[str], **columns: Any) -> list[Any]:
        if "episode_reward" in columns:  # multi-turn: graded turn by turn during the rollout
            return list(columns["episode_reward"])
        texts = [c[-1]["content"] if isinstance(c, list) else str(c) for c in completions]
        items = [{"taskId": t, "completion": text} for t, text in zip(task_id, texts, strict=True)]
        verdicts = await asyncio.to_thread(context.api.grade, items, "Training")
        return [reward_of(v) for v in verdicts]

    return grader


def progress_callback(context: RunContext, total: int) -> Any:
    from transformers import TrainerCallback

    names = ("loss", "reward", "reward_std", "kl", "frac_reward_zero_std", "entropy", "learning_rate", "grad_norm")

    class Progress(TrainerCallback):
        def on_log(self, args: Any, state: Any, control: Any, logs: dict[str, Any] | None = None, **_: Any) -> None:
            if not logs or "train_runtime" in logs:
                return
            metrics = {
                _camel(name): round(float(logs[name]), 6)
                for name in names
                if isinstance(logs.get(name), int | float) and logs[name] == logs[name]
            }
            step = int(state.global_step)
            context.api.event(stage="Training", step=step, totalSteps=total, metrics=metrics)
            shown = " ".join(f"{k}={v:.4g}" for k, v in metrics.items() if k in ("loss", "reward", "kl", "rewardStd"))
            log(f"step {step}/{total} {shown}")

    return Progress()


def _camel(name: str) -> str:
    head, *rest = name.split("_")
    return head + "".join(part.title() for part in rest)


def grpo_config(context: RunContext, p: Parameters) -> Any:
    import torch
    from trl import GRPOConfig  # type: ignore[attr-defined]

    cuda = torch.cuda.is_available()
    return GRPOConfig(
        output_dir=str(context.state / "checkpoints"),
        max_steps=p.steps,
        learning_rate=p.learning_rate,
        lr_scheduler_type=p.scheduler,
        warmup_steps=p.warmup_steps,
        per_device_train_batch_size=p.group_size * p.groups_per_step,
        gradient_accumulation_steps=1,
        num_generations=p.group_size,
        max_completion_length=p.completion_tokens,
        temperature=p.temperature,
        top_p=p.top_p,
        top_k=p.top_k,
        beta=p.beta,
        logging_steps=1,
        save_strategy="steps",
        save_steps=p.save_steps,
        save_total_limit=2,
        save_on_each_node=True,  # a gang's ranks each resume from a checkpoint on their own machine
        report_to="none",
        gradient_checkpointing=False,
        use_cpu=not cuda,
        bf16=cuda and torch.cuda.is_bf16_supported(),
        seed=p.seed,
        disable_tqdm=True,
        remove_unused_columns=False,
        chat_template_kwargs={"enable_thinking": False},
    )


def train(context: RunContext, p: Parameters, model: Any, tokenizer: Any, tasks: list[dict[str, Any]]) -> Any:
    from datasets import Dataset
    from peft import LoraConfig
    from trl import GRPOTrainer  # type: ignore[attr-defined]

    rows = [{"prompt": as_messages(t["prompt"]), "task_id": t["taskId"]} for t in tasks]
    lora = LoraConfig(
        r=p.lora.r,
        lora_alpha=p.lora.alpha,
        lora_dropout=p.lora.dropout,
        target_modules=p.lora.target_modules,
        task_type="CAUSAL_LM",
    )
    rollout = None
    # Episodes play through the rollout when they may take more than one turn, and when tasks offer tools: TRL's
    # own generation would render the prompt without them. Its rows carry their taskIds (tasks may share a prompt).
    if p.max_turns > 1 or any(tools_of(t) for t in tasks):
        rows, task_ids, offered = rollout_rows(tasks)
        rollout = make_rollout(context, p, task_ids, offered)
    trainer = GRPOTrainer(
        model=model,
        reward_funcs=[make_reward(context)],
        args=grpo_config(context, p),
        train_dataset=Dataset.from_list(rows),
        processing_class=tokenizer,
        peft_config=lora,
        callbacks=[progress_callback(context, p.steps)],
        rollout_func=rollout,
    )
    from transformers.trainer_callback import PrinterCallback

    trainer.remove_callback(PrinterCallback)  # it prints every log dict; the progress callback says it in one line
    checkpoint = last_checkpoint(context.state / "checkpoints")
    if checkpoint is not None:
        log(f"resuming from {checkpoint.name}")
    trainer.train(resume_from_checkpoint=str(checkpoint) if checkpoint else None)
    return trainer


def evaluate(context: RunContext, p: Parameters, generator: Any, tasks: list[dict[str, Any]], phase: str) -> Any:
    sampling = Sampling(max_tokens=int(p.eval_max_tokens or p.max_tokens), greedy=True)
    return run_episodes(
        generator,
        tasks,
        context.api,
        phase=phase,
        sampling=sampling,
        max_turns=p.max_turns,
        max_episode_tokens=p.max_episode_tokens,
        count_tokens=token_counter(generator),
    )


def token_counter(generator: Any) -> Any:
    if not isinstance(generator, TransformersGenerator):
        return None
    return lambda conversation: len(generator.tokenizer(generator.render(conversation))["input_ids"])


def main() -> int:
    started = time.monotonic()
    context = RunContext.from_environment()
    p = Parameters.from_json(context.parameters)
    check_state(context)
    tasks = context.api.tasks()
    train_tasks, test_tasks = tasks.get("train", []), tasks.get("test", [])
    if not train_tasks:
        log("the environment served no train tasks")
        return 2
    log(f"attempt {context.attempt}: {len(train_tasks)} train and {len(test_tasks)} held-out tasks, {p.steps} steps")
    model, tokenizer = load_model(context)
    generator = make_generator(p.generation_backend, model, tokenizer, str(context.model))
    wanted = context.evaluation

    baseline_file = context.state / "baseline.json"
    baseline: dict[str, Any] | None = json.loads(baseline_file.read_text()) if baseline_file.is_file() else None
    if wanted.get("baseline", True) and test_tasks and baseline is None:
        context.api.event(stage="Baseline", step=0, totalSteps=p.steps)
        result = evaluate(context, p, generator, test_tasks, "Baseline")
        baseline = {"passRate": result.pass_rate, "tasks": len(result.verdicts), "attempt": context.attempt}
        write_json(baseline_file, baseline)
        log(f"baseline pass rate {result.pass_rate}")
    elif baseline is not None:
        log(f"baseline kept from attempt {baseline.get('attempt')} (pass rate {baseline.get('passRate')})")

    context.api.event(stage="Training", totalSteps=p.steps)
    trainer = train(context, p, model, tokenizer, train_tasks)
    trained = trainer.model

    final = None
    if wanted.get("final", True) and test_tasks:
        context.api.event(stage="Evaluating", step=p.steps, totalSteps=p.steps)
        final_generator = TransformersGenerator(trained, tokenizer) if generator.name == "transformers" else generator
        final = evaluate(context, p, final_generator, test_tasks, "Evaluation")
        log(f"final pass rate {final.pass_rate}")

    context.api.event(stage="Exporting")
    export(
        context,
        trainer=trainer,
        tokenizer=tokenizer,
        results={
            "runtime": "nodus/grpo-lora",
            "steps": p.steps,
            "trainTasks": len(train_tasks),
            "heldOutTasks": len(test_tasks),
            "baselinePassRate": (baseline or {}).get("passRate"),
            "finalPassRate": final.pass_rate if final else None,
            "seconds": round(time.monotonic() - started, 1),
            "attempt": context.attempt,
        },
    )
    log("done")
    return 0


if __name__ == "__main__":
    sys.exit(main())
