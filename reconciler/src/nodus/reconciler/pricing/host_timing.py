"""Step times measured on this host: what a finished run took, read back from its own events.

Who calls it: the TrainingJob controller (`nodus.reconciler.controllers.trainingjob.job_status`), once a run has
Succeeded, stores `measure(...)` (from the executor's `events` and `spec_of`) as the record's `status.timing`;
`nodus.reconciler.pricing.facts` hands the timings of finished runs of a runtime to the estimator, which prefers
them to the runtime's published `cpu` figures for a later CPU run of the same shape (`same_shape`).

Why: a runtime's `measured.stepSeconds.cpu` was measured on one machine; CPUs differ by a third or more (the
same quickstart-sized run took 27 s on one CI machine and 35 s on another), so a fixed CPU figure cannot
estimate every host within 25%. GPU figures stay the runtime's: a GPU type is the same wherever it is rented.

What a timing holds, from one session (a resumed run is not measured: its stages are split across attempts):
- `stepSeconds`: the time from the first reported step to the last over the steps between them (checkpoint
  saves included, as they recur). Not the Training stage's length over its steps: the stage opens with the
  trainer's one-time set-up (building the trainer, the first generation's warm-up: 8-9 s before step 1 of the
  quickstart on a 2-core host, against 0.3 s a step), and spreading that over the steps made a 30-step run's
  figure 1.8x its step gap, so the estimate of a longer run of the same shape came out a third too high.
  With fewer than two step events (a trainer that reports rarely), the stage's length over its steps;
- `evaluationTaskSeconds`: the Baseline and Evaluating stages' length over the held-out tasks they scored;
- `fixedSeconds`: the rest of the billed running time (loading the model, starting graders, the Training
  stage's lead-in before its steps, exporting);
- `shape`: the model and the parameters that set the work of a step or a task (`SHAPE_PARAMETERS`).
The three parts add up to the billed seconds of the run they came from.
"""

from __future__ import annotations

import json
import statistics
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from nodus.specs.status_names import Phase

JSONObject = dict[str, Any]

SHAPE_PARAMETERS = (
    "groupSize",
    "groupsPerStep",
    "maxTokens",
    "maxCompletionLength",
    "maxTurns",
    "maxEpisodeTokens",
    "lora",
    "quantization",
    "generationBackend",
)
"""Merged parameters that change how long a step or a task takes (not steps, learning rate or seeds)."""
RECENT_RUNS = 5
"""How many of the newest finished runs of a shape the estimate takes the median of."""
EVALUATION_STAGES = (("Baseline", "Training"), ("Evaluating", "Exporting"))
"""(stage, the stage that ends it): the stages that score held-out tasks."""


def model_identity(model: Mapping[str, Any] | None) -> str:
    """What the shape calls a model: its URI (pinned revisions included), `volume:NAME`, or "" for none."""
    model = model or {}
    if model.get("uri"):
        return str(model["uri"])
    volume = model.get("volume")
    if isinstance(volume, Mapping) and volume.get("name"):
        return f"volume:{volume['name']}"
    return ""


def shape_of(model: str, parameters: Mapping[str, Any]) -> JSONObject:
    """The shape of a run: its model (`model_identity`) and the parameters in SHAPE_PARAMETERS it has."""
    shape: JSONObject = {"model": model}
    shape.update({name: parameters[name] for name in SHAPE_PARAMETERS if name in parameters})
    stored: JSONObject = json.loads(json.dumps(shape, sort_keys=True))  # compares as the stored JSON does
    return stored


def timing_of(events: Sequence[Mapping[str, Any]], status: Mapping[str, Any], shape: JSONObject) -> JSONObject | None:
    """The timing of a finished single-session run from its events log and status.json; None when it cannot be
    measured (resumed, no trainer start, no stages, nothing billed)."""
    sessions = [s for s in status.get("sessions") or [] if isinstance(s, Mapping)]
    if len(sessions) != 1 or status.get("phase") != Phase.SUCCEEDED:
        return None
    billed = float(sessions[0].get("seconds") or 0.0)
    started = next((float(e["at"]) for e in events if e.get("type") == "TrainerStarted" and "at" in e), None)
    if started is None or billed <= 0:
        return None
    ended = started + billed
    stages = _stage_starts(events)
    training = 0.0
    if "Training" in stages:
        end = min([stages[s] for s in ("Evaluating", "Exporting") if s in stages] or [ended])
        training = max(0.0, end - stages["Training"])
    steps = int(status.get("step") or 0) if "Training" in stages else 0
    step_seconds = _step_gap(events) if steps else None
    if step_seconds is None and steps:
        step_seconds = training / steps
    # What the steps took at that rate; the rest of the stage is its one-time lead-in, billed as fixed.
    stepping = min(training, step_seconds * steps) if step_seconds is not None else 0.0
    evaluation = 0.0
    for stage, until in EVALUATION_STAGES:
        if stage in stages:
            end = stages[until] if until in stages else _next_stage(stages, stage, ended)
            evaluation += max(0.0, end - stages[stage])
    tasks = _evaluation_tasks(status.get("summary") or {})
    if (steps == 0 or training == 0) and (tasks == 0 or evaluation == 0):
        return None
    timing: JSONObject = {
        "shape": shape,
        "generation": status.get("generation"),
        "finishedAt": status.get("finishedAt"),
        "seconds": round(billed, 3),
        "steps": steps,
        "stepSeconds": round(stepping / steps, 4) if steps else None,
        "evaluationTasks": tasks,
        "evaluationTaskSeconds": round(evaluation / tasks, 4) if tasks else None,
        "fixedSeconds": round(max(0.0, billed - stepping - (evaluation if tasks else 0.0)), 3),
    }
    return timing


def measure(
    events: Iterable[Mapping[str, Any]], params: Mapping[str, Any], status: Mapping[str, Any], model: str
) -> JSONObject | None:
    """The timing of a finished run from what its executor kept: its events log (`Executor.events`), its
    parameters as the trainer got them (the job spec's params: `parameters` are the merged ones) and `status`
    (the executor's record of it). An events log that cannot be read counts as empty."""
    parameters = params.get("parameters")
    if not isinstance(parameters, dict):
        return None
    try:
        read = [dict(event) for event in events]
    except OSError:
        read = []
    return timing_of(read, status, shape_of(model, parameters))


@dataclass(frozen=True)
class HostTiming:
    """The medians of the newest finished runs of one shape on this host (what the estimator uses)."""

    runs: int
    step_seconds: float | None
    evaluation_task_seconds: float | None
    fixed_seconds: float

    def describe(self) -> str:
        return f"this host: the median of {self.runs} finished run{'s' if self.runs != 1 else ''} of this shape"


def host_timing(timings: Iterable[Mapping[str, Any]], shape: JSONObject) -> HostTiming | None:
    """The medians over the newest RECENT_RUNS timings whose shape is `shape`; None when there is none."""
    same = [t for t in timings if t.get("shape") == shape]
    same.sort(key=lambda t: float(t.get("finishedAt") or 0.0), reverse=True)
    same = same[:RECENT_RUNS]
    if not same:
        return None
    return HostTiming(
        runs=len(same),
        step_seconds=_median(t.get("stepSeconds") for t in same),
        evaluation_task_seconds=_median(t.get("evaluationTaskSeconds") for t in same),
        fixed_seconds=_median(t.get("fixedSeconds") for t in same) or 0.0,
    )


def _stage_starts(events: Sequence[Mapping[str, Any]]) -> dict[str, float]:
    """When each stage was first reported (after the trainer started)."""
    starts: dict[str, float] = {}
    for event in events:
        stage = event.get("stage")
        if isinstance(stage, str) and stage not in starts and "at" in event:
            starts[stage] = float(event["at"])
    return starts


def _step_gap(events: Sequence[Mapping[str, Any]]) -> float | None:
    """Seconds a step, from the first and the last Training progress event that names a step; None with fewer
    than two such events (or no time between them)."""
    stepped = [
        (int(e["step"]), float(e["at"]))
        for e in events
        if e.get("stage") == "Training" and isinstance(e.get("step"), int) and "at" in e
    ]
    if len(stepped) < 2:
        return None
    (first_step, first_at), (last_step, last_at) = stepped[0], stepped[-1]
    if last_step <= first_step or last_at <= first_at:
        return None
    return (last_at - first_at) / (last_step - first_step)


def _next_stage(stages: Mapping[str, float], stage: str, ended: float) -> float:
    later = [at for name, at in stages.items() if at > stages[stage] and name != stage]
    return min(later, default=ended)


def _evaluation_tasks(summary: Mapping[str, Any]) -> int:
    """Held-out tasks scored by the baseline and final evaluations (the platform's summary counts them)."""
    total = 0
    for part in ("baseline", "final"):
        counts = summary.get(part)
        if isinstance(counts, Mapping) and isinstance(counts.get("tasks"), int):
            total += int(counts["tasks"])
    return total


def _median(values: Iterable[Any]) -> float | None:
    numbers = [float(value) for value in values if isinstance(value, (int, float)) and not isinstance(value, bool)]
    return statistics.median(numbers) if numbers else None
