"""Training progress as attempt-API events: one `Training` event per optimizer step with the method's metrics.

Who uses it: `finetune.run`, which adds `progress_callback` to every data-driven runtime's TRL trainer (the GRPO
trainer has its own in `grpo_lora`). TRL logs every step (`logging_steps=1`); this callback turns the entries the
method names (DPO: `loss`, `rewards/accuracies`, `rewards/margins`) into camelCase metrics (`rewardsAccuracies`)
and one log line. Evaluation entries (`eval_*`, from measuring the held-out part) are not steps and are skipped.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from typing import Any

from nodus.runtimes.attempt import AttemptClient


def camel(name: str) -> str:
    """TRL's log name as an event metric: `rewards/accuracies` -> `rewardsAccuracies`."""
    head, *rest = re.split(r"[_/]", name)
    return head + "".join(part[:1].upper() + part[1:] for part in rest)


def step_metrics(logs: dict[str, Any], names: tuple[str, ...]) -> dict[str, float]:
    """The finite numbers among `names` in one log entry, camelCased and rounded."""
    return {
        camel(name): round(float(logs[name]), 6)
        for name in names
        if isinstance(logs.get(name), int | float) and logs[name] == logs[name] and abs(logs[name]) != float("inf")
    }


def progress_callback(api: AttemptClient, total: int, names: tuple[str, ...], log: Callable[[str], None]) -> Any:
    from transformers import TrainerCallback

    class Progress(TrainerCallback):
        def on_log(self, args: Any, state: Any, control: Any, logs: dict[str, Any] | None = None, **_: Any) -> None:
            if not logs or "train_runtime" in logs or any(key.startswith("eval_") for key in logs):
                return
            metrics = step_metrics(logs, names)
            step = int(state.global_step)
            api.event(stage="Training", step=step, totalSteps=total, metrics=metrics)
            log(f"step {step}/{total} " + " ".join(f"{k}={v:.4g}" for k, v in metrics.items()))

    return Progress()
