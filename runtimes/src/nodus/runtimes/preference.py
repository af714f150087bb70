"""What the preference runtimes share: their data shape, held-out metric, curves and the measurement itself.

Who uses it: `dpo`, `orpo` and `kto` (and `reward_model` for the pairs' shape). The held-out metric is the
policy's preference accuracy: how often, on held-out prompts, the chosen reply has a higher mean log-probability
per token than the rejected one (`scoring.preference_accuracy`). It is measured the same way for all three
methods, before and after training, so it must rise. KTO's data is unpaired (prompt, completion, thumbs up or
down): its pairs are the desirable and undesirable completions of the same held-out prompt, and where no prompt
has both, every desirable against every undesirable completion of the held-out part (an AUC across prompts).
"""

from __future__ import annotations

from itertools import product
from typing import Any

from nodus.runtimes.data import Shape
from nodus.runtimes.finetune import Metric, Run
from nodus.runtimes.scoring import preference_accuracy

PAIRS = Shape(("prompt", "chosen", "rejected"))
LABELLED = Shape(("prompt", "completion", "label"))
MOST_CROSS_PAIRS = 4096
"""KTO without same-prompt pairs: at most this many desirable-undesirable combinations are scored."""

PREFERENCE_ACCURACY = Metric(
    name="heldOutPreferenceAccuracy",
    better="higher",
    description=(
        "share of held-out pairs whose chosen reply the policy gives a higher mean log-probability per token "
        "than the rejected one"
    ),
)


def measure_pairs(run: Run, model: Any, pairs: list[dict[str, Any]]) -> dict[str, float]:
    measured = preference_accuracy(
        model, run.tokenizer, pairs, batch_size=run.common.batch_size, max_length=run.common.max_length
    )
    return {
        "heldOutPreferenceAccuracy": measured["accuracy"],
        "heldOutLogprobMargin": measured["margin"],
        "heldOutPairs": measured["pairs"],
    }


def labelled_pairs(rows: list[dict[str, Any]]) -> tuple[list[dict[str, Any]], bool]:
    """(pairs, same_prompt): KTO's held-out rows as chosen/rejected pairs (see the module's docstring)."""
    by_prompt: dict[str, tuple[list[Any], list[Any], Any]] = {}
    for row in rows:
        key = repr(row["prompt"])
        good, bad, _ = by_prompt.setdefault(key, ([], [], row["prompt"]))
        (good if row["label"] else bad).append(row["completion"])
    pairs = [
        {"prompt": prompt, "chosen": chosen, "rejected": rejected}
        for good, bad, prompt in by_prompt.values()
        for chosen, rejected in product(good, bad)
    ]
    if pairs:
        return pairs, True
    good_rows = [row for row in rows if row["label"]]
    bad_rows = [row for row in rows if not row["label"]]
    crossed = [
        {"prompt": g["prompt"], "chosen": g["completion"], "rejected": b["completion"], "rejected_prompt": b["prompt"]}
        for g, b in product(good_rows, bad_rows)
    ]
    return crossed[:MOST_CROSS_PAIRS], False
