"""The `nodus/dpo` trainer: direct preference optimization (TRL's DPOTrainer), full, LoRA or QLoRA.

Who runs it: the job supervisor, as the command of `runtimes/dpo.yaml` (`python -m nodus.runtimes.dpo`); the flow
is `finetune.run`'s. Data: prompt, chosen, rejected (`spec.data.columns` maps yours onto them). The reference model
is a frozen copy of the starting model (full fine-tuning) or the model with its adapter switched off (LoRA). The
held-out metric is the policy's preference accuracy (`preference`), which must rise.
"""

from __future__ import annotations

from typing import Any

from nodus.runtimes.data import Shape
from nodus.runtimes.finetune import Method, Run, main
from nodus.runtimes.outputs import Curves
from nodus.runtimes.preference import PAIRS, PREFERENCE_ACCURACY, measure_pairs
from nodus.runtimes.weights import Weights, lora_config


class DPO(Method):
    runtime = "nodus/dpo"
    tasks = ("DPO",)
    metric = PREFERENCE_ACCURACY
    curves = Curves(
        keys=("loss", "rewards/accuracies", "rewards/margins", "rewards/chosen", "rewards/rejected", "learning_rate"),
        metric="rewards/accuracies",
        label="reward accuracy",
        legend="implicit reward accuracy per step (chosen above rejected)",
        title="DPO: implicit reward accuracy and loss per step",
    )

    def __init__(self) -> None:
        self.beta = 0.1

    def configure(self, raw: dict[str, Any], task: str, weights: Weights) -> None:
        self.beta = float(raw.get("beta", self.beta))

    def shapes(self, task: str) -> tuple[Shape, ...]:
        return (PAIRS,)

    def trainer(self, run: Run, model: Any, train: Any) -> Any:
        from trl import DPOConfig, DPOTrainer  # type: ignore[attr-defined]

        config = run.config(DPOConfig, beta=self.beta, max_length=run.common.max_length)
        return DPOTrainer(
            model=model,
            args=config,
            train_dataset=train,
            processing_class=run.tokenizer,
            peft_config=lora_config(run.weights, "CAUSAL_LM"),
        )

    def measure(self, run: Run, trainer: Any, held: list[dict[str, Any]]) -> dict[str, float]:
        return measure_pairs(run, trainer.model, held)


if __name__ == "__main__":
    main(DPO())
