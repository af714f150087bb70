"""The flow every data-driven runtime shares, and the `Method` seam each of them fills in.

Who calls it: the `main` of `sft`, `dpo`, `orpo`, `kto`, `reward_model` and `distill` (`run(TheirMethod())`), as
the commands of runtimes/<name>.yaml, under the job supervisor with the contract of `contract.RunContext` plus
`NODUS_INPUT_DATA` (and `NODUS_INPUT_TEACHER` for distillation). A new trainer is a new `Method`, not a branch
here. The flow, reported as stages through the attempt API:

    (start)     parameters, the method (Full, LoRA or QLoRA: `weights`), the data (`data`: files, columns) and the
                teacher are checked before any model is loaded: a bad input fails in one line, exit status 2
    Baseline    the method's metric on the held-out part of the data (never trained on) before training; saved in
                NODUS_STATE_DIR, so a resumed run does not measure it again
    Training    TRL steps with the method's own metrics as events; checkpoints in NODUS_STATE_DIR/checkpoints
                every `saveSteps`, resumed from the newest; MLflow or W&B as well where asked (`tracking`)
    Evaluating  the same metric on the same held-out part after training
    Exporting   adapter/ (LoRA, QLoRA) or model/ (full) with the tokenizer, results.json (both measurements and
                whether the metric moved the right way), provenance.json (model, teacher, data files' sha256),
                curves.png and manifest.json

Recovery state is bound to the run configuration (parameters, task, model and teacher revisions, runtime, the
data files' digests): state written by another configuration is refused, never resumed from.
"""

from __future__ import annotations

import hashlib
import json
import os
import sys
import time
from abc import ABC, abstractmethod
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, ClassVar

from nodus.runtimes.contract import RunContext
from nodus.runtimes.data import Data, DataSpec, Shape, as_chat, load, split
from nodus.runtimes.distributed import agreed_checkpoint, everyone, world_size
from nodus.runtimes.outputs import Curves, export, model_digest, write_json
from nodus.runtimes.progress import progress_callback
from nodus.runtimes.refusal import Refusal
from nodus.runtimes.tracking import guard, report_to, tracker_run
from nodus.runtimes.weights import Weights, bf16, check_quantization, load_causal_lm, load_tokenizer


@dataclass(frozen=True)
class Common:
    """The parameters every data-driven runtime reads (runtimes/<name>.yaml hold the schema and defaults)."""

    steps: int = 500
    learning_rate: float = 2e-5
    batch_size: int = 8
    gradient_accumulation_steps: int = 1
    max_length: int = 1024
    save_steps: int = 100
    seed: int = 0
    scheduler: str = "linear"
    warmup_steps: int = 0
    held_out_fraction: float = 0.1
    max_held_out: int = 512
    chat_template: bool = True
    gradient_checkpointing: bool = False

    @classmethod
    def from_json(cls, raw: dict[str, Any]) -> Common:
        return cls(
            steps=int(raw.get("steps", cls.steps)),
            learning_rate=float(raw.get("learningRate", cls.learning_rate)),
            batch_size=int(raw.get("batchSize", cls.batch_size)),
            gradient_accumulation_steps=int(raw.get("gradientAccumulationSteps", cls.gradient_accumulation_steps)),
            max_length=int(raw.get("maxLength", cls.max_length)),
            save_steps=int(raw.get("saveSteps", cls.save_steps)),
            seed=int(raw.get("seed", cls.seed)),
            scheduler=str(raw.get("scheduler", cls.scheduler)),
            warmup_steps=int(raw.get("warmupSteps", cls.warmup_steps)),
            held_out_fraction=float(raw.get("heldOutFraction", cls.held_out_fraction)),
            max_held_out=int(raw.get("maxHeldOutRows", cls.max_held_out)),
            chat_template=bool(raw.get("chatTemplate", cls.chat_template)),
            gradient_checkpointing=bool(raw.get("gradientCheckpointing", cls.gradient_checkpointing)),
        )


@dataclass(frozen=True)
class Metric:
    """The method's held-out metric: its key in the measurements, which way is better, and what it is."""

    name: str
    better: str
    """`lower` or `higher`."""
    description: str

    def improved(self, before: float, after: float) -> bool:
        return after < before if self.better == "lower" else after > before


@dataclass
class Run:
    """What a method's hooks get: the contract, the parameters, the data and the tokenizer."""

    context: RunContext
    common: Common
    weights: Weights
    task: str
    data: Data
    tokenizer: Any
    chat: bool
    log: Callable[[str], None]
    teacher: Path | None = None
    trackers: list[str] = field(default_factory=list)

    def config(self, config_class: Any, **specific: Any) -> Any:
        """A TRL config with the settings every runtime shares, and the method's own on top."""
        import torch

        c = self.common
        shared: dict[str, Any] = {
            "output_dir": str(self.context.state / "checkpoints"),
            "max_steps": c.steps,
            "learning_rate": c.learning_rate,
            "lr_scheduler_type": c.scheduler,
            "warmup_steps": c.warmup_steps,
            "per_device_train_batch_size": c.batch_size,
            "per_device_eval_batch_size": c.batch_size,
            "gradient_accumulation_steps": c.gradient_accumulation_steps,
            "logging_steps": 1,
            "save_strategy": "steps",
            "save_steps": c.save_steps,
            "save_total_limit": 2,
            "save_on_each_node": True,  # a gang's ranks each resume from a checkpoint on their own machine
            "report_to": self.trackers or "none",
            # TRL turns these on by default; on CPU bf16 is slow and inexact, and checkpointing is a choice.
            "gradient_checkpointing": c.gradient_checkpointing,
            "use_cpu": not torch.cuda.is_available(),
            "bf16": bf16(),
            "seed": c.seed,
            "data_seed": c.seed,
            "disable_tqdm": True,
        }
        return config_class(**{**shared, **specific})


class Method(ABC):
    """One runtime's part: what data it reads, how it builds its TRL trainer and what it measures."""

    runtime: ClassVar[str]
    """e.g. nodus/dpo."""
    tasks: ClassVar[tuple[str, ...]]
    """The `spec.task`s it runs; the first is the default."""
    metric: ClassVar[Metric]
    curves: ClassVar[Curves]
    needs_teacher: ClassVar[bool] = False
    padding_side: ClassVar[str] = "right"

    def configure(self, raw: dict[str, Any], task: str, weights: Weights) -> None:  # noqa: B027 - optional hook
        """Read the method's own parameters; refuse a combination it cannot train."""

    @abstractmethod
    def shapes(self, task: str) -> tuple[Shape, ...]:
        """The column sets it reads, the preferred first."""

    def load_model(self, run: Run) -> Any:
        return load_causal_lm(run.context.model, run.weights, seed=run.common.seed)

    @abstractmethod
    def trainer(self, run: Run, model: Any, train: Any) -> Any:
        """The TRL trainer on `train` (a datasets.Dataset), built with `run.config(...)`."""

    def prepare(self, run: Run, trainer: Any, held: list[dict[str, Any]]) -> None:  # noqa: B027 - optional hook
        """Anything the measurements need once (distillation: the teacher's replies)."""

    def initialization(self, run: Run) -> str:
        """Continued (from the model's weights), or Scratch (its architecture only; SFT's `task: Pretrain`)."""
        return "Continued"

    @abstractmethod
    def measure(self, run: Run, trainer: Any, held: list[dict[str, Any]]) -> dict[str, float]:
        """The held-out measurements; `metric.name` among them."""


def logger(runtime: str) -> Callable[[str], None]:
    prefix = runtime.removeprefix("nodus/")

    def log(message: str) -> None:
        print(f"{prefix}: {message}", flush=True)

    return log


def input_folder(variable: str, field_name: str, runtime: str) -> Path:
    value = os.environ.get(variable)
    if not value:
        raise Refusal(
            f"{variable} is not set: {runtime} reads {field_name} from there (a nodus job supervisor sets it)"
        )
    folder = Path(value)
    if not folder.is_dir():
        raise Refusal(f"{variable} {folder} is not a folder ({field_name})")
    return folder


def teacher_folder(runtime: str) -> Path:
    folder = input_folder("NODUS_INPUT_TEACHER", "spec.teacher", runtime)
    if not (folder / "config.json").is_file():
        raise Refusal(f"NODUS_INPUT_TEACHER {folder} holds no config.json (spec.teacher is not a model)")
    return folder


# --- recovery state --------------------------------------------------------------------------------------


def run_config_digest(context: RunContext, task: str, data: Data) -> str:
    """What recovery state is bound to: parameters, task, model and teacher, runtime, and the data's files."""
    params = context.params
    bound = {
        "parameters": params.get("parameters"),
        "task": task,
        "modelRevision": params.get("modelRevision"),
        "teacherRevision": params.get("teacherRevision"),
        "runtime": params.get("runtime"),
        "data": data.provenance(),
    }
    return hashlib.sha256(json.dumps(bound, sort_keys=True).encode()).hexdigest()


def bind_state(context: RunContext, task: str, data: Data, log: Callable[[str], None]) -> None:
    """Refuse state written by another run configuration (a resume must continue the same run)."""
    path = context.state / "run-config.json"
    digest = run_config_digest(context, task, data)
    if path.is_file():
        saved = str(json.loads(path.read_text()).get("digest"))
        if saved != digest:
            log(
                f"the state in {context.state} belongs to another run configuration ({saved[:12]}...: parameters, "
                "model, data or runtime changed); refusing it"
            )
            raise SystemExit(3)
        return
    write_json(path, {"digest": digest})


# --- the flow --------------------------------------------------------------------------------------------


def prepare_run(method: Method, log: Callable[[str], None]) -> tuple[Run, list[dict[str, Any]], list[dict[str, Any]]]:
    """Everything checked and read before a model is loaded: (run, train rows, held-out rows)."""
    context = RunContext.from_environment()
    raw = context.parameters
    task = str(context.params.get("task") or method.tasks[0])
    if task not in method.tasks:
        raise Refusal(f"spec.task: {method.runtime} trains {' or '.join(method.tasks)}, not {task}")
    common = Common.from_json(raw)
    weights = Weights.from_parameters(raw)
    method.configure(raw, task, weights)
    check_quantization(weights)
    spec = DataSpec.from_params(context.params, method.runtime)
    data = load(
        input_folder("NODUS_INPUT_DATA", "spec.data", method.runtime), spec, method.shapes(task), method.runtime
    )
    teacher = teacher_folder(method.runtime) if method.needs_teacher else None
    bind_state(context, task, data, log)
    train_rows, held_rows = split(data.rows, common.held_out_fraction, common.max_held_out, common.seed)
    tokenizer = load_tokenizer(context.model, padding_side=method.padding_side)
    chat = common.chat_template and bool(getattr(tokenizer, "chat_template", None))
    job = Run(
        context=context,
        common=common,
        weights=weights,
        task=task,
        data=data,
        tokenizer=tokenizer,
        chat=chat,
        log=log,
        teacher=teacher,
        trackers=report_to(context.params, lambda line: log(f"warning: {line}")),
    )
    return job, [as_chat(r, chat) for r in train_rows], [as_chat(r, chat) for r in held_rows]


def build_trainer(method: Method, run: Run, train_rows: list[dict[str, Any]]) -> Any:
    import datasets
    from datasets import Dataset
    from transformers import set_seed
    from transformers.trainer_callback import PrinterCallback
    from transformers.utils import logging

    # The log is read by people (nodus logs): progress bars of tokenizing and loading are noise there.
    datasets.disable_progress_bars()
    logging.disable_progress_bar()  # type: ignore[no-untyped-call, unused-ignore]
    set_seed(run.common.seed)  # fresh weights (a score head, LoRA, Scratch) are drawn from the run's seed
    model = method.load_model(run)
    trainer = method.trainer(run, model, Dataset.from_list(train_rows))
    trainer.remove_callback(PrinterCallback)  # it prints every log dict; the progress callback says it in one line
    trainer.add_callback(progress_callback(run.context.api, run.common.steps, method.curves.keys, run.log))
    guard(trainer, lambda line: run.log(f"warning: {line}"))
    return trainer


def shown(measured: dict[str, float]) -> str:
    return " ".join(f"{k}={v:.4g}" if isinstance(v, float) else f"{k}={v}" for k, v in measured.items())


def baseline(method: Method, job: Run, trainer: Any, held: list[dict[str, Any]]) -> dict[str, float]:
    """The held-out measurements before training: measured once, then kept in the state folder, so a resumed run
    never takes a half-trained model for its baseline."""
    context, steps = job.context, job.common.steps
    saved_file = context.state / "baseline.json"
    # Kept only where every process kept one: measuring is a collective call (an evaluation gathers every rank's
    # losses), so a replaced node measuring alone would wait for the others forever.
    if everyone(saved_file.is_file()):
        saved = json.loads(saved_file.read_text())
        job.log(f"baseline kept from attempt {saved.get('attempt')}: {shown(saved['measured'])}")
        return dict(saved["measured"])
    context.api.event(stage="Baseline", step=0, totalSteps=steps)
    before = method.measure(job, trainer, held)
    write_json(saved_file, {"measured": before, "attempt": context.attempt})
    context.api.event(stage="Baseline", step=0, totalSteps=steps, metrics=before)
    job.log(f"held out before training: {shown(before)}")
    return before


def train(job: Run, trainer: Any) -> None:
    """TRL's training loop, from the newest checkpoint in the state folder when there is one."""
    job.context.api.event(stage="Training", step=0, totalSteps=job.common.steps)
    checkpoint = agreed_checkpoint(job.context.state / "checkpoints", job.log)
    if checkpoint is not None:
        job.log(f"resuming from {checkpoint.name}")
    trainer.train(resume_from_checkpoint=str(checkpoint) if checkpoint else None)


def final(method: Method, job: Run, trainer: Any, held: list[dict[str, Any]]) -> dict[str, float]:
    steps = job.common.steps
    job.context.api.event(stage="Evaluating", step=steps, totalSteps=steps)
    after = method.measure(job, trainer, held)
    job.context.api.event(stage="Evaluating", step=steps, totalSteps=steps, metrics=after)
    return after


def sources(method: Method, job: Run) -> dict[str, Any]:
    """What provenance.json says about the inputs besides the model: the data's files, the teacher, a Scratch start."""
    found: dict[str, Any] = {"data": job.data.provenance()}
    if job.teacher is not None:
        revision = job.context.params.get("teacherRevision")
        found["teacher"] = {"revision": revision, "digest": model_digest(job.teacher)}
    if method.initialization(job) != "Continued":
        found["initialization"] = method.initialization(job)
    return found


def run(method: Method) -> int:
    started = time.monotonic()
    log = logger(method.runtime)
    job, train_rows, held_rows = prepare_run(method, log)
    files = ", ".join(f.relative for f in job.data.files[:3]) + (" ..." if len(job.data.files) > 3 else "")
    log(
        f"attempt {job.context.attempt}: {job.task} ({job.weights.method}) on {len(train_rows)} rows, "
        f"{len(held_rows)} held out, of {files} ({job.data.shape.describe()}); {job.common.steps} steps"
        + (f"; {world_size()} processes, data-parallel" if world_size() > 1 else "")
    )
    trainer = build_trainer(method, job, train_rows)
    method.prepare(job, trainer, held_rows)
    name = os.environ.get("NODUS_JOB_NAME") or method.runtime
    with tracker_run(job.trackers, name, trainer, lambda line: log(f"warning: {line}")):
        before = baseline(method, job, trainer, held_rows)
        train(job, trainer)
        after = final(method, job, trainer, held_rows)
    metric = method.metric
    improved = metric.improved(before[metric.name], after[metric.name])
    log(f"held out after training: {shown(after)} ({metric.name} {'improved' if improved else 'did not improve'})")

    job.context.api.event(stage="Exporting", step=job.common.steps, totalSteps=job.common.steps)
    export(
        job.context,
        trainer=trainer,
        tokenizer=job.tokenizer,
        weights=job.weights.folder,
        curves=method.curves,
        sources=sources(method, job),
        results={
            "runtime": method.runtime,
            "task": job.task,
            "method": job.weights.method,
            "quantization": job.weights.quantization,
            "steps": job.common.steps,
            "trainRows": len(train_rows),
            "heldOutRows": len(held_rows),
            "heldOut": {
                "metric": metric.name,
                "better": metric.better,
                "description": metric.description,
                "before": before,
                "after": after,
                "improved": improved,
            },
            "seconds": round(time.monotonic() - started, 1),
            "attempt": job.context.attempt,
        },
    )
    log("done")
    return 0


def main(method: Method) -> None:
    """The entry point of a runtime module: `sys.exit(run(method))`."""
    sys.exit(run(method))
