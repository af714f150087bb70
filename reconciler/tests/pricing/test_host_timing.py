"""Host timings: a finished run's step, task and fixed seconds read back from its events, and the estimator
preferring them (same shape, CPU runs only) to the runtime's published figures."""

from __future__ import annotations

from decimal import Decimal
from typing import Any

import pytest

from nodus.reconciler.pricing.estimate import estimate_trainingjob
from nodus.reconciler.pricing.host_timing import (
    RECENT_RUNS,
    host_timing,
    model_identity,
    shape_of,
    timing_of,
)

from .test_estimate import PRICES, RUNTIME, facts, job

MODEL = "hf://Qwen/Qwen3-0.6B@" + "c" * 40
PARAMETERS = {"steps": 60, "groupSize": 8, "groupsPerStep": 4, "maxTokens": 32, "lora": {"r": 16}, "seed": 0}
SHAPE = shape_of(MODEL, PARAMETERS)


def finished_run(
    *,
    steps: int = 20,
    step: float = 0.3,
    task: float = 0.02,
    tasks: int = 64,
    fixed: float = 8.0,
    lead: float = 0.0,
    every: int = 1,
) -> tuple[list[dict[str, Any]], dict[str, Any]]:
    """The events and status.json of a single-session GRPO run with these figures (start-up before the
    baseline, export after the final evaluation; `lead` seconds of trainer set-up open the Training stage before
    its first step; a step event every `every` steps)."""
    start = 1000.0
    baseline = start + fixed / 2
    training = baseline + tasks * task
    evaluating = training + lead + steps * step
    exporting = evaluating + tasks * task
    ended = exporting + fixed / 2
    events = [
        {"at": start - 0.2, "type": "SupervisorStarted"},
        {"at": start, "type": "TrainerStarted"},
        {"at": baseline, "type": "Progress", "stage": "Baseline", "step": 0},
        {"at": training, "type": "Progress", "stage": "Training"},
        *(
            {"at": training + lead + (i + 1) * step, "type": "Progress", "stage": "Training", "step": i + 1}
            for i in range(steps)
            if (i + 1) % every == 0
        ),
        {"at": evaluating, "type": "Progress", "stage": "Evaluating", "step": steps},
        {"at": exporting, "type": "Progress", "stage": "Exporting"},
        {"at": ended + 1, "type": "TrainerSucceeded"},
    ]
    status = {
        "phase": "Succeeded",
        "generation": 1,
        "finishedAt": ended + 1,
        "step": steps,
        "sessions": [{"attempt": 1, "seconds": ended - start}],
        "summary": {"baseline": {"tasks": tasks}, "final": {"tasks": tasks}},
    }
    return events, status


def test_a_finished_run_is_split_into_steps_tasks_and_the_rest() -> None:
    events, status = finished_run()
    timing = timing_of(events, status, SHAPE)
    assert timing is not None
    assert timing["stepSeconds"] == pytest.approx(0.3) and timing["steps"] == 20
    assert timing["evaluationTaskSeconds"] == pytest.approx(0.02) and timing["evaluationTasks"] == 128
    assert timing["fixedSeconds"] == pytest.approx(8.0)
    # The parts add up to what was billed.
    total = timing["steps"] * timing["stepSeconds"] + 128 * timing["evaluationTaskSeconds"] + timing["fixedSeconds"]
    assert total == pytest.approx(timing["seconds"], abs=0.01)


def test_the_trainers_set_up_before_its_first_step_is_fixed_not_a_steps_time() -> None:
    """Measured on the quickstart: 8.5 s from the Training stage to step 1, then 0.3 s a step. Spread over 30
    steps the set-up made 0.58 s a step, and a 60-step estimate a third too high."""
    events, status = finished_run(steps=30, step=0.3, lead=8.5, fixed=6.0)
    timing = timing_of(events, status, SHAPE)
    assert timing is not None
    assert timing["stepSeconds"] == pytest.approx(0.3)
    assert timing["fixedSeconds"] == pytest.approx(6.0 + 8.5)
    total = timing["steps"] * timing["stepSeconds"] + 128 * timing["evaluationTaskSeconds"] + timing["fixedSeconds"]
    assert total == pytest.approx(timing["seconds"], abs=0.01)

    # A trainer that reports every 10th step is timed between its reports.
    events, status = finished_run(steps=30, step=0.3, lead=8.5, every=10)
    assert timing_of(events, status, SHAPE)["stepSeconds"] == pytest.approx(0.3)  # type: ignore[index]


def test_with_one_step_event_the_stage_is_spread_over_its_steps() -> None:
    events, status = finished_run(steps=10, step=0.3, lead=2.0, every=10)
    timing = timing_of(events, status, SHAPE)
    assert timing is not None
    assert timing["stepSeconds"] == pytest.approx((2.0 + 10 * 0.3) / 10)
    assert timing["fixedSeconds"] == pytest.approx(8.0)


def test_a_resumed_or_unfinished_run_is_not_measured() -> None:
    events, status = finished_run()
    resumed = {**status, "sessions": [*status["sessions"], {"attempt": 2, "seconds": 5.0}]}
    assert timing_of(events, resumed, SHAPE) is None
    assert timing_of(events, {**status, "phase": "Failed"}, SHAPE) is None
    assert timing_of([e for e in events if e["type"] != "TrainerStarted"], status, SHAPE) is None


def test_an_evaluate_run_has_only_task_seconds() -> None:
    start = 50.0
    events = [
        {"at": start, "type": "TrainerStarted"},
        {"at": start + 4, "type": "Progress", "stage": "Evaluating", "step": 0},
        {"at": start + 4 + 32 * 0.05, "type": "Progress", "stage": "Exporting"},
    ]
    status = {
        "phase": "Succeeded",
        "generation": 1,
        "sessions": [{"seconds": 4 + 32 * 0.05 + 1}],
        "summary": {"final": {"tasks": 32}},
    }
    timing = timing_of(events, status, SHAPE)
    assert timing is not None and timing["steps"] == 0 and timing["stepSeconds"] is None
    assert timing["evaluationTaskSeconds"] == pytest.approx(0.05) and timing["fixedSeconds"] == pytest.approx(5.0)


def test_the_shape_is_the_model_and_the_parameters_that_set_a_steps_work() -> None:
    assert shape_of(MODEL, {**PARAMETERS, "steps": 500, "learningRate": 1e-3, "seed": 4}) == SHAPE
    assert shape_of(MODEL, {**PARAMETERS, "groupSize": 16}) != SHAPE
    assert shape_of("hf://other@" + "d" * 40, PARAMETERS) != SHAPE
    assert model_identity({"volume": {"name": "weights"}}) == "volume:weights"
    assert model_identity(None) == ""


def test_the_median_of_the_newest_runs_of_the_same_shape() -> None:
    timings = []
    for index, step in enumerate([0.9, 0.2, 0.3, 0.4, 0.3, 0.35]):
        events, status = finished_run(step=step)
        timing = timing_of(events, {**status, "finishedAt": 100.0 + index}, SHAPE)
        assert timing is not None
        timings.append(timing)
    other = timing_of(*finished_run(step=5.0), shape_of(MODEL, {**PARAMETERS, "maxTokens": 256}))
    assert other is not None
    found = host_timing([*timings, other], SHAPE)
    assert found is not None and found.runs == RECENT_RUNS  # the oldest (0.9 s) is left out, the other shape too
    assert found.step_seconds == pytest.approx(0.3)
    assert host_timing([other], SHAPE) is None
    assert host_timing([{"generation": 1}], SHAPE) is None  # a run that could not be measured


def test_the_estimate_of_a_cpu_run_prefers_this_hosts_figures() -> None:
    events, status = finished_run(step=0.25, task=0.01, fixed=6.0)
    timing = timing_of(events, status, shape_of(MODEL, {**RUNTIME["spec"]["defaults"], **PARAMETERS}))
    spec = job(parameters=PARAMETERS)
    table = estimate_trainingjob(spec, RUNTIME, facts("140K"), PRICES)
    host = estimate_trainingjob(spec, RUNTIME, facts("140K", host_timings=(timing,)), PRICES)
    assert table.duration_seconds == pytest.approx(60 * 0.5 + 128 * 0.02 + 30)  # the runtime's cpu figures
    assert host.duration_seconds == pytest.approx(60 * 0.25 + 128 * 0.01 + 6.0)
    assert host.cost_usd == (Decimal("3.60") * Decimal(str(host.duration_seconds)) / 3600).quantize(Decimal("0.0001"))
    assert "training: 60 steps x 0.25 s (this host: the median of 1 finished run of this shape) = 15.0 s" in host.basis
    assert any(line.startswith("start-up and export: 6.0 s (this host") for line in host.basis)
    # Another shape, or a GPU run, keeps the runtime's figures.
    other = job(parameters={**PARAMETERS, "groupSize": 16})
    assert estimate_trainingjob(other, RUNTIME, facts("140K", host_timings=(timing,)), PRICES).duration_seconds == (
        pytest.approx(60 * 0.5 + 128 * 0.02 + 30)
    )
    gpu = estimate_trainingjob(spec, RUNTIME, facts("600M", host_timings=(timing,)), PRICES)
    assert gpu.preset == "small-lora" and any("(l4-24g)" in line for line in gpu.basis)


def test_a_runtime_without_published_figures_is_priced_after_its_first_run() -> None:
    bare = {**RUNTIME, "spec": {**RUNTIME["spec"], "measured": {}, "presets": []}}
    spec = job(parameters=PARAMETERS)
    before = estimate_trainingjob(spec, bare, facts("140K"), PRICES)
    assert before.cost_usd is None and [item.item for item in before.unpriced] == ["training"]
    events, status = finished_run()
    timing = timing_of(events, status, shape_of(MODEL, {**bare["spec"]["defaults"], **PARAMETERS}))
    after = estimate_trainingjob(spec, bare, facts("140K", host_timings=(timing,)), PRICES)
    assert after.cost_usd is not None and after.unpriced == ()
