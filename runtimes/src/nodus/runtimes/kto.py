"""The `nodus/kto` trainer: Kahneman-Tversky optimization from thumbs-up and thumbs-down labels (TRL's
KTOTrainer), full, LoRA or QLoRA.

Who runs it: the job supervisor, as the command of `runtimes/kto.yaml` (`python -m nodus.runtimes.kto`); the flow
is `finetune.run`'s. Data: prompt, completion, label (true/false, 1/0, up/down: `data.convert`). `desirableWeight`
and `undesirableWeight` balance data with more of one kind. The held-out metric is the policy's preference
accuracy on the held-out prompts' desirable against undesirable completions (`preference.labelled_pairs`), which
must rise.
"""

from __future__ import annotations

from typing import Any

from nodus.runtimes.data import Shape
from nodus.runtimes.finetune import Method, Run, main
from nodus.runtimes.outputs import Curves
from nodus.runtimes.preference import LABELLED, PREFERENCE_ACCURACY, labelled_pairs, measure_pairs
from nodus.runtimes.refusal import Refusal
from nodus.runtimes.weights import Weights, lora_config


class KTO(Method):
    runtime = "nodus/kto"
    tasks = ("KTO",)
    metric = PREFERENCE_ACCURACY
    curves = Curves(
        keys=("loss", "rewards/margins", "rewards/chosen", "rewards/rejected", "kl", "learning_rate"),
        metric="rewards/margins",
        label="reward margin",
        legend="implicit reward margin per step (desirable minus undesirable)",
        title="KTO: implicit reward margin and loss per step",
    )

    def __init__(self) -> None:
        self.beta = 0.1
        self.desirable_weight = 1.0
        self.undesirable_weight = 1.0

    def configure(self, raw: dict[str, Any], task: str, weights: Weights) -> None:
        self.beta = float(raw.get("beta", self.beta))
        self.desirable_weight = float(raw.get("desirableWeight", self.desirable_weight))
        self.undesirable_weight = float(raw.get("undesirableWeight", self.undesirable_weight))
        if int(raw.get("batchSize", 8)) < 2:
            raise Refusal(
                "spec.parameters.batchSize: KTO estimates its KL term from the other rows of a batch, so it needs at "
                "least 2 rows a batch"
            )

    def shapes(self, task: str) -> tuple[Shape, ...]:
        return (LABELLED,)

    def trainer(self, run: Run, model: Any, train: Any) -> Any:
        from trl import KTOConfig, KTOTrainer  # type: ignore[attr-defined]

        config = run.config(
            KTOConfig,
            beta=self.beta,
            desirable_weight=self.desirable_weight,
            undesirable_weight=self.undesirable_weight,
            max_length=run.common.max_length,
        )
        return KTOTrainer(
            model=model,
            args=config,
            # TRL's KTO reads its data in order (its KL term pairs each row with its neighbour in the batch), so the
            # rows are shuffled here, by the run's seed: a file sorted by label would give batches of one label.
            train_dataset=train.shuffle(seed=run.common.seed),
            processing_class=run.tokenizer,
            peft_config=lora_config(run.weights, "CAUSAL_LM"),
        )

    def measure(self, run: Run, trainer: Any, held: list[dict[str, Any]]) -> dict[str, float]:
        pairs, same_prompt = labelled_pairs(held)
        if not same_prompt:
            run.log("no held-out prompt has both a desirable and an undesirable completion: pairing across prompts")
        return measure_pairs(run, trainer.model, pairs)


if __name__ == "__main__":
    main(KTO())
