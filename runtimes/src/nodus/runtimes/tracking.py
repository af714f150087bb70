"""External experiment tracking (MLflow, Weights & Biases) for the data-driven runtimes, never a reason to fail.

Who calls it: `finetune.run`: `report_to` when it builds the TRL config, `guard` once the trainer exists. What it
follows, from the seeds' "Tracking": params.json `tracking` (the TrainingJob's `spec.tracking`) asks for MLflow or
W&B; the run reports to MLflow when its environment has `MLFLOW_TRACKING_URI` (the Secret adds the token or user
and password), to W&B when it has `WANDB_API_KEY` (or `WANDB_MODE=offline`). TRL's `report_to` does the
reporting (metrics every step, the training arguments as parameters). nodus shows its own stages and metrics
either way, so a tracker asked for but not installed (mlflow and wandb are optional, not dependencies of
nodus-runtimes), not configured, or failing while the run goes on (a server that cannot be reached) is one warning
line in the log and the run carries on without it.
"""

from __future__ import annotations

import contextlib
import importlib.util
import os
from collections.abc import Callable, Iterator
from typing import Any

TRACKER_CALLBACKS = {"MLflowCallback": "mlflow", "WandbCallback": "wandb"}
"""transformers' callbacks for the trackers nodus supports, by class name, and the tracker each serves."""


def report_to(params: dict[str, Any], warn: Callable[[str], None]) -> list[str]:
    """The trackers TRL should report to: those asked for that are installed and configured."""
    tracking = params.get("tracking") or {}
    chosen: list[str] = []
    mlflow = tracking.get("mlflow")
    if mlflow is not None:
        if not os.environ.get("MLFLOW_TRACKING_URI"):
            warn("tracking.mlflow: MLFLOW_TRACKING_URI is not set in this run's environment; not reporting to MLflow")
        elif importlib.util.find_spec("mlflow") is None:
            warn("tracking.mlflow: mlflow is not installed here (pip install mlflow); not reporting to MLflow")
        else:
            if isinstance(mlflow, dict) and mlflow.get("experiment"):
                os.environ.setdefault("MLFLOW_EXPERIMENT_NAME", str(mlflow["experiment"]))
            # A server that does not answer costs seconds, not mlflow's default minutes of retries.
            os.environ.setdefault("MLFLOW_HTTP_REQUEST_MAX_RETRIES", "1")
            # mlflow reports usage to its makers unless told not to: the run talks to the user's server, no other.
            os.environ.setdefault("MLFLOW_DISABLE_TELEMETRY", "true")
            os.environ.setdefault("DO_NOT_TRACK", "true")
            os.environ.setdefault("MLFLOW_HTTP_REQUEST_TIMEOUT", "10")
            chosen.append("mlflow")
    wandb = tracking.get("wandb")
    if wandb is not None:
        offline = os.environ.get("WANDB_MODE", "").lower() in ("offline", "dryrun")
        if not (os.environ.get("WANDB_API_KEY") or offline):
            warn("tracking.wandb: WANDB_API_KEY is not set in this run's environment; not reporting to W&B")
        elif importlib.util.find_spec("wandb") is None:
            warn("tracking.wandb: wandb is not installed here (pip install wandb); not reporting to W&B")
        else:
            if isinstance(wandb, dict) and wandb.get("project"):
                os.environ.setdefault("WANDB_PROJECT", str(wandb["project"]))
            chosen.append("wandb")
    return chosen


class GuardedTracker:
    """A tracker's callback whose failures are a warning line: after the first, the tracker is dropped for the
    rest of the run. transformers calls callbacks by event name (`on_log`, ...), which this forwards."""

    def __init__(self, inner: Any, tracker: str, warn: Callable[[str], None]) -> None:
        self.inner = inner
        self.tracker = tracker
        self.warn = warn
        self.failed = False

    def __getattr__(self, name: str) -> Any:
        event = getattr(self.inner, name)
        if not name.startswith("on_") or not callable(event):
            return event

        def guarded(*args: Any, **kwargs: Any) -> Any:
            if self.failed:
                return None
            try:
                return event(*args, **kwargs)
            except Exception as exc:  # any failure of an optional tracker: its own errors, network errors
                self.failed = True
                cause = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
                self.warn(f"tracking.{self.tracker}: reporting failed ({cause}); going on without {self.tracker}")
                return None

        return guarded


@contextlib.contextmanager
def tracker_run(trackers: list[str], name: str, trainer: Any, warn: Callable[[str], None]) -> Iterator[None]:
    """One MLflow run for the whole nodus run: the baseline, every step and the final held-out measurement.
    transformers' MLflowCallback opens a run of its own when there is none and ends it when training ends, so the
    measurement after training would land in a second run; opened here, the callback uses this one and leaves it
    open, and it ends after the final measurement. A tracker that fails here is one warning, as anywhere, and the
    trainer's callback for it (wrapped by `guard`) is dropped, so it does not fail again at every step."""
    if "mlflow" not in trackers:
        yield
        return
    try:
        import mlflow

        if os.environ.get("MLFLOW_EXPERIMENT_NAME"):
            mlflow.set_experiment(os.environ["MLFLOW_EXPERIMENT_NAME"])
        mlflow.start_run(run_name=name)
    except Exception as exc:  # any failure of an optional tracker: the run goes on without it, said once
        warn(f"tracking.mlflow: reporting failed ({_cause(exc)}); going on without mlflow")
        callbacks = trainer.callback_handler.callbacks
        callbacks[:] = [c for c in callbacks if getattr(c, "tracker", None) != "mlflow"]
        yield
        return
    try:
        yield
    finally:
        try:
            mlflow.end_run()
        except Exception as exc:
            warn(f"tracking.mlflow: cannot end the run ({_cause(exc)})")


def _cause(exc: BaseException) -> str:
    return str(exc).splitlines()[0] if str(exc) else type(exc).__name__


def guard(trainer: Any, warn: Callable[[str], None]) -> None:
    """Wrap the trainer's tracker callbacks in `GuardedTracker`."""
    callbacks = trainer.callback_handler.callbacks
    for index, callback in enumerate(callbacks):
        tracker = TRACKER_CALLBACKS.get(type(callback).__name__)
        if tracker is not None:
            callbacks[index] = GuardedTracker(callback, tracker, warn)
