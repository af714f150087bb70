"""Training progress as attempt-API events: one `Training` event per optimizer step with the method's metrics.

Who uses it: `finetune.run`, which adds `progress_callback` to every data-driven runtime's TRL trainer (the GRPO
trainer has its own in `grpo_lora`). TRL logs every step (`logging_steps=1`); this callback turns the entries the
method names (DPO: `loss`, `rewards/accuracies`, `rewards/margins`) into camelCase metrics (`rewardsAccuracies`)
and one log line. Evaluation entries (`eval_*`, from measuring the held-out part) are not steps and are skipped.
"""

from __future__ import annotations

import queue
import re
import threading
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


class BackgroundEvents:
    """Step events posted from a thread of their own, in order, so that a step never waits for the platform's answer
    (about 4 ms a step here: 15% of the tiny model's 25 ms step, measured by bench/train.py). `flush` waits until
    every event queued was posted (training's end: the main thread posts the next stage after it), and says the first
    failure there, as a post on the main thread would have."""

    def __init__(self, api: AttemptClient) -> None:
        self.api = api
        self.queue: queue.Queue[dict[str, Any]] = queue.Queue()
        self.error: BaseException | None = None
        threading.Thread(target=self._post, name="nodus-events", daemon=True).start()

    def post(self, **report: Any) -> None:
        self.queue.put(report)

    def _post(self) -> None:
        while True:
            report = self.queue.get()
            try:
                if self.error is None:
                    self.api.event(**report)
            except BaseException as exc:  # raised again on the main thread by flush
                self.error = exc
            finally:
                self.queue.task_done()

    def flush(self) -> None:
        self.queue.join()
        if self.error is not None:
            raise self.error


def progress_callback(api: AttemptClient, total: int, names: tuple[str, ...], log: Callable[[str], None]) -> Any:
    from transformers import TrainerCallback

    events = BackgroundEvents(api)

    class Progress(TrainerCallback):
        def on_log(self, args: Any, state: Any, control: Any, logs: dict[str, Any] | None = None, **_: Any) -> None:
            if not logs or "train_runtime" in logs or any(key.startswith("eval_") for key in logs):
                return
            metrics = step_metrics(logs, names)
            step = int(state.global_step)
            events.post(stage="Training", step=step, totalSteps=total, metrics=metrics)
            log(f"step {step}/{total} " + " ".join(f"{k}={v:.4g}" for k, v in metrics.items()))

        def on_train_end(self, args: Any, state: Any, control: Any, **_: Any) -> None:
            events.flush()

    return Progress()
