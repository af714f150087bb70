"""The `nodus/sft` trainer: supervised fine-tuning (full, LoRA or QLoRA) and, with `task: Pretrain`, pretraining.

Who runs it: the job supervisor, as the command of `runtimes/sft.yaml` (`python -m nodus.runtimes.sft`); the flow
is `finetune.run`'s. TRL's SFTTrainer trains on:

- task SFT: prompt + completion (loss on the completion only) or messages (a whole chat); texts become chat
  turns through the model's chat template unless `chatTemplate: false`;
- task Pretrain: text (every token), with `initialization: Continued` (the model's weights, the default) or
  `Scratch` (its architecture and tokenizer with fresh weights from `seed`), and `packing` (rows concatenated and
  cut into `maxLength` blocks, as pretraining does; for SFT, whole rows packed best-fit into blocks).

The held-out metric is the trainer's own loss on the held-out rows (`trainer.evaluate`), which must fall.
"""

from __future__ import annotations

from typing import Any

from nodus.runtimes.data import Shape
from nodus.runtimes.finetune import Method, Metric, Run, main
from nodus.runtimes.outputs import Curves
from nodus.runtimes.refusal import Refusal
from nodus.runtimes.weights import Weights, load_causal_lm, lora_config

INITIALIZATIONS = ("Continued", "Scratch")


class SFT(Method):
    runtime = "nodus/sft"
    tasks = ("SFT", "Pretrain")
    metric = Metric(
        name="heldOutLoss",
        better="lower",
        description=(
            "the trainer's loss (mean negative log-likelihood per trained token) on the held-out rows: the "
            "completion of prompt/completion rows, every token of chats and text"
        ),
    )
    curves = Curves(
        keys=("loss", "mean_token_accuracy", "entropy", "learning_rate", "grad_norm"),
        metric="mean_token_accuracy",
        label="token accuracy",
        legend="next-token accuracy per step",
        title="SFT: next-token accuracy and loss per step",
    )

    def __init__(self) -> None:
        self.initialization_name = "Continued"
        self.packing = False

    def configure(self, raw: dict[str, Any], task: str, weights: Weights) -> None:
        self.initialization_name = str(raw.get("initialization", "Continued"))
        if self.initialization_name not in INITIALIZATIONS:
            known = ", ".join(INITIALIZATIONS)
            raise Refusal(f"spec.parameters.initialization: {self.initialization_name!r} is not one of {known}")
        if self.initialization_name == "Scratch" and weights.lora is not None:
            raise Refusal(
                "spec.parameters.initialization: Scratch trains every weight from fresh ones, and a LoRA adapter "
                "would train only itself on random frozen weights; leave out the lora block"
            )
        self.packing = bool(raw.get("packing", False))

    def initialization(self, run: Run) -> str:
        return self.initialization_name

    def shapes(self, task: str) -> tuple[Shape, ...]:
        if task == "Pretrain":
            return (Shape(("text",)),)
        return (Shape(("prompt", "completion")), Shape(("messages",)))

    def load_model(self, run: Run) -> Any:
        scratch = self.initialization_name == "Scratch"
        return load_causal_lm(run.context.model, run.weights, scratch=scratch, seed=run.common.seed)

    def trainer(self, run: Run, model: Any, train: Any) -> Any:
        from trl import SFTConfig, SFTTrainer  # type: ignore[attr-defined]

        config = run.config(
            SFTConfig,
            max_length=run.common.max_length,
            packing=self.packing,
            # Pretraining packs the way pretraining does: one stream cut into blocks. SFT keeps rows whole.
            packing_strategy="wrapped" if run.task == "Pretrain" else "bfd",
            dataset_text_field="text",
        )
        return SFTTrainer(
            model=model,
            args=config,
            train_dataset=train,
            processing_class=run.tokenizer,
            peft_config=lora_config(run.weights, "CAUSAL_LM"),
        )

    def measure(self, run: Run, trainer: Any, held: list[dict[str, Any]]) -> dict[str, float]:
        from datasets import Dataset

        measured = trainer.evaluate(eval_dataset=Dataset.from_list(held))
        return {"heldOutLoss": float(measured["eval_loss"]), "heldOutRows": len(held)}


if __name__ == "__main__":
    main(SFT())
