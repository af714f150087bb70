"""The `nodus/reward-model` trainer: a reward model for RLHF from preference pairs (TRL's RewardTrainer), full,
LoRA or QLoRA.

Who runs it: the job supervisor, as the command of `runtimes/reward-model.yaml` (`python -m
nodus.runtimes.reward_model`); the flow is `finetune.run`'s. The model's language-model head is replaced by a
one-output score head (`weights.load_reward_model`; with LoRA the head trains beside the adapter: PEFT's
`SEQ_CLS` task), trained so that the chosen reply scores above the rejected one. Data: prompt, chosen, rejected.
The held-out metric is pairwise accuracy (chosen scored above rejected), which must beat chance (0.5): the head
starts from random weights, so the baseline sits near chance. The outputs' weights are a sequence-classification
model (or adapter), not a causal language model.
"""

from __future__ import annotations

from typing import Any

from nodus.runtimes.data import Shape
from nodus.runtimes.finetune import Method, Metric, Run, main
from nodus.runtimes.outputs import Curves
from nodus.runtimes.preference import PAIRS
from nodus.runtimes.scoring import pairwise_accuracy
from nodus.runtimes.weights import Weights, load_reward_model, lora_config


class RewardModel(Method):
    runtime = "nodus/reward-model"
    tasks = ("RewardModel",)
    metric = Metric(
        name="heldOutPairwiseAccuracy",
        better="higher",
        description="share of held-out pairs the reward model scores chosen above rejected (0.5 is chance)",
    )
    curves = Curves(
        keys=("loss", "accuracy", "margin", "mean_reward", "learning_rate"),
        metric="accuracy",
        label="pairwise accuracy",
        legend="pairwise accuracy per step (chosen scored above rejected)",
        title="Reward model: pairwise accuracy and loss per step",
    )

    def __init__(self) -> None:
        self.center_rewards: float | None = None

    def configure(self, raw: dict[str, Any], task: str, weights: Weights) -> None:
        value = raw.get("centerRewardsCoefficient")
        self.center_rewards = None if value is None else float(value)

    def shapes(self, task: str) -> tuple[Shape, ...]:
        return (PAIRS,)

    def load_model(self, run: Run) -> Any:
        return load_reward_model(run.context.model, run.weights, run.tokenizer)

    def trainer(self, run: Run, model: Any, train: Any) -> Any:
        from trl import RewardConfig, RewardTrainer  # type: ignore[attr-defined]

        config = run.config(
            RewardConfig, max_length=run.common.max_length, center_rewards_coefficient=self.center_rewards
        )
        return RewardTrainer(
            model=model,
            args=config,
            train_dataset=train,
            processing_class=run.tokenizer,
            peft_config=lora_config(run.weights, "SEQ_CLS"),
        )

    def measure(self, run: Run, trainer: Any, held: list[dict[str, Any]]) -> dict[str, float]:
        measured = pairwise_accuracy(
            trainer.model, run.tokenizer, held, batch_size=run.common.batch_size, max_length=run.common.max_length
        )
        return {
            "heldOutPairwiseAccuracy": measured["accuracy"],
            "heldOutScoreMargin": measured["margin"],
            "heldOutPairs": measured["pairs"],
        }


if __name__ == "__main__":
    main(RewardModel())
