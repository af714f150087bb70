"""The `nodus/orpo` trainer: odds-ratio preference optimization, without a reference model (TRL's ORPOTrainer,
`trl.experimental.orpo` in TRL 1.16), full, LoRA or QLoRA.

Who runs it: the job supervisor, as the command of `runtimes/orpo.yaml` (`python -m nodus.runtimes.orpo`); the
flow is `finetune.run`'s. Data: prompt, chosen, rejected. ORPO adds an odds-ratio term (weighted by `beta`, the
paper's lambda) to the supervised loss on the chosen reply. The held-out metric is the policy's preference
accuracy (`preference`), which must rise.
"""

from __future__ import annotations

import os
from typing import Any

from nodus.runtimes.data import Shape
from nodus.runtimes.finetune import Method, Run, main
from nodus.runtimes.outputs import Curves
from nodus.runtimes.preference import PAIRS, PREFERENCE_ACCURACY, measure_pairs
from nodus.runtimes.weights import Weights, lora_config


class ORPO(Method):
    runtime = "nodus/orpo"
    tasks = ("ORPO",)
    metric = PREFERENCE_ACCURACY
    curves = Curves(
        keys=("loss", "rewards/accuracies", "rewards/margins", "log_odds_ratio", "nll_loss", "learning_rate"),
        metric="rewards/accuracies",
        label="reward accuracy",
        legend="log-odds reward accuracy per step (chosen above rejected)",
        title="ORPO: reward accuracy and loss per step",
    )

    def __init__(self) -> None:
        self.beta = 0.1

    def configure(self, raw: dict[str, Any], task: str, weights: Weights) -> None:
        self.beta = float(raw.get("beta", self.beta))

    def shapes(self, task: str) -> tuple[Shape, ...]:
        return (PAIRS,)

    def trainer(self, run: Run, model: Any, train: Any) -> Any:
        # TRL 1.16 keeps ORPO in trl.experimental and warns on import; the runtime pins TRL, so the warning says
        # nothing a user of the runtime could act on.
        os.environ.setdefault("TRL_EXPERIMENTAL_SILENCE", "1")
        from trl.experimental.orpo import ORPOConfig, ORPOTrainer

        config = run.config(ORPOConfig, beta=self.beta, max_length=run.common.max_length)
        return ORPOTrainer(
            model=model,
            args=config,
            train_dataset=train,
            processing_class=run.tokenizer,
            peft_config=lora_config(run.weights, "CAUSAL_LM"),
        )

    def measure(self, run: Run, trainer: Any, held: list[dict[str, Any]]) -> dict[str, float]:
        return measure_pairs(run, trainer.model, held)


if __name__ == "__main__":
    main(ORPO())
