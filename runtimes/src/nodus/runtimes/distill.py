"""The `nodus/distill` trainer: on-policy knowledge distillation of the model from a teacher (TRL's
DistillationTrainer), full, LoRA or QLoRA.

Who runs it: the job supervisor, as the command of `runtimes/distill.yaml` (`python -m nodus.runtimes.distill`),
with `NODUS_INPUT_TEACHER` (the teacher's model folder, like NODUS_INPUT_MODEL) beside the contract; the flow is
`finetune.run`'s. Data: prompts, or chats (the chat up to its last user turn is the prompt; the rest is left to
the student). The student writes its own replies (`maxCompletionLength` tokens, sampled at `temperature`) and
learns to match the teacher's next-token distributions on them: a generalized Jensen-Shannon divergence, `beta`
0 the forward KL, 1 the reverse KL (TRL's default), 0.5 the JSD, both distributions at `temperature`.

Teacher and student must share a vocabulary (checked before training). The held-out metric is the student's KL
divergence from the teacher per token on the teacher's own greedy replies to the held-out prompts, the same
sequences before and after training, which must fall.
"""

from __future__ import annotations

from typing import Any

from nodus.runtimes.data import Shape
from nodus.runtimes.finetune import Method, Metric, Run, main
from nodus.runtimes.outputs import Curves
from nodus.runtimes.refusal import Refusal
from nodus.runtimes.scoring import kl_to_teacher, teacher_replies
from nodus.runtimes.weights import Weights, load_teacher, lora_config


def prompt_of(row: dict[str, Any]) -> Any:
    """A row's prompt: its `prompt`, or its chat up to (and with) the last user turn."""
    if "prompt" in row:
        return row["prompt"]
    messages = list(row["messages"])
    while messages and messages[-1]["role"] == "assistant":
        messages.pop()
    return messages or row["messages"][:1]


class Distill(Method):
    runtime = "nodus/distill"
    tasks = ("Distill",)
    needs_teacher = True
    padding_side = "left"  # the student generates its replies in batches
    metric = Metric(
        name="heldOutKL",
        better="lower",
        description=(
            "the student's KL divergence from the teacher, KL(teacher || student) per token at `temperature`, on "
            "the teacher's greedy replies to the held-out prompts"
        ),
    )
    curves = Curves(
        keys=("loss", "entropy", "completions/mean_length", "learning_rate"),
        metric="entropy",
        label="student entropy (nats)",
        legend="student's next-token entropy per step on its own replies",
        title="Distillation: student entropy and divergence loss per step",
    )

    def __init__(self) -> None:
        self.temperature = 1.0
        self.beta = 1.0
        self.max_completion_length = 256
        self.teacher: Any = None
        self.sequences: list[tuple[list[int], list[int]]] = []

    def configure(self, raw: dict[str, Any], task: str, weights: Weights) -> None:
        self.temperature = float(raw.get("temperature", self.temperature))
        self.beta = float(raw.get("beta", self.beta))
        self.max_completion_length = int(raw.get("maxCompletionLength", self.max_completion_length))

    def shapes(self, task: str) -> tuple[Shape, ...]:
        return (Shape(("prompt",)), Shape(("messages",)))

    def load_model(self, run: Run) -> Any:
        from transformers import AutoConfig

        assert run.teacher is not None
        # Checked from the two configs before either model's weights are read.
        student = AutoConfig.from_pretrained(str(run.context.model)).get_text_config().vocab_size
        teacher = AutoConfig.from_pretrained(str(run.teacher)).get_text_config().vocab_size
        if student != teacher:
            raise Refusal(
                f"spec.teacher: the teacher's vocabulary has {teacher} tokens and the model's {student}; "
                "distillation compares whole next-token distributions, so they must share one"
            )
        self.teacher = load_teacher(run.teacher)
        return super().load_model(run)

    def trainer(self, run: Run, model: Any, train: Any) -> Any:
        from trl import DistillationConfig, DistillationTrainer  # type: ignore[attr-defined]

        config = run.config(
            DistillationConfig,
            temperature=self.temperature,
            beta=self.beta,
            max_completion_length=self.max_completion_length,
        )
        prompts = train.map(lambda row: {"prompt": prompt_of(row)}, remove_columns=train.column_names)
        return DistillationTrainer(
            model=model,
            teacher_model=self.teacher,
            args=config,
            train_dataset=prompts,
            processing_class=run.tokenizer,
            peft_config=lora_config(run.weights, "CAUSAL_LM"),
        )

    def prepare(self, run: Run, trainer: Any, held: list[dict[str, Any]]) -> None:
        self.sequences = teacher_replies(
            self.teacher,
            run.tokenizer,
            [prompt_of(row) for row in held],
            max_new_tokens=self.max_completion_length,
            batch_size=run.common.batch_size,
        )

    def measure(self, run: Run, trainer: Any, held: list[dict[str, Any]]) -> dict[str, float]:
        measured = kl_to_teacher(
            trainer.model,
            self.teacher,
            run.tokenizer,
            self.sequences,
            temperature=self.temperature,
            batch_size=run.common.batch_size,
        )
        return {"heldOutKL": measured["kl"], "heldOutTokens": measured["tokens"]}


if __name__ == "__main__":
    main(Distill())
