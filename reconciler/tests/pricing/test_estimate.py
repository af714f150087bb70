"""The estimator: resources from presets (by model size, method, quantisation) or spec.resources, the slowest
allowed GPU's measured time, expectedDuration, multi-node with the assembly bound, what is unpriced, the first
hold against the cap, and the start time after running jobs."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from decimal import Decimal
from typing import Any

import pytest

from nodus.reconciler.pricing.estimate import Facts, RunningJob, estimate_trainingjob, method_of
from nodus.reconciler.pricing.model_size import ModelSize
from nodus.reconciler.pricing.prices import table_from_layers

NOW = datetime(2026, 11, 29, 12, 0, tzinfo=UTC)
PRICES = table_from_layers(
    [
        (
            "prices.yaml",
            {
                "version": "2026-11-29",
                "hostKind": "cloud",
                "gpu": {
                    "l4-24g": {"cloud": Decimal("0.43")},
                    "a100-80g": {"cloud": Decimal("1.64")},
                    "h100-sxm-80g": {"cloud": Decimal("2.99")},
                },
                "cpu": {"local": Decimal("3.60")},
            },
        )
    ]
)
RUNTIME: dict[str, Any] = {
    "apiVersion": "nodus.dev/v1beta1",
    "kind": "TrainingRuntime",
    "metadata": {"name": "trainer", "project": "default"},
    "spec": {
        "command": ["python", "-m", "trainer"],
        "tasks": ["GRPO"],
        "defaults": {"steps": 100, "lora": {"r": 16}},
        "presets": [
            {"name": "tiny-cpu", "match": {"maxModelParameters": "10M", "method": "LoRA"}, "resources": {"cpu": 2}},
            {
                "name": "small-qlora",
                "match": {"maxModelParameters": "9B", "method": "QLoRA", "quantization": "4bit"},
                "resources": {"gpu": {"type": ["l4-24g"], "count": 1}},
            },
            {
                "name": "small-lora",
                "match": {"maxModelParameters": "2B", "method": "LoRA"},
                "resources": {"gpu": {"type": ["l4-24g", "a100-80g"], "count": 1}},
            },
            {
                "name": "full",
                "match": {"maxModelParameters": "9B", "method": "Full"},
                "resources": {"gpu": {"type": ["a100-80g"], "count": 2}},
            },
            {
                "name": "large-lora",
                "match": {"maxModelParameters": "72B", "method": "LoRA"},
                "resources": {"gpu": {"type": ["h100-sxm-80g"], "count": 8}},
            },
        ],
        "measured": {
            "stepSeconds": {"cpu": 0.5, "l4-24g": 2.0, "a100-80g": 0.8},
            "evaluationTaskSeconds": {"cpu": 0.02, "l4-24g": 0.1, "a100-80g": 0.05},
            "modelCachingSeconds": 120,
            "startupSeconds": 30,
        },
    },
}


def job(**spec: Any) -> dict[str, Any]:
    annotations = spec.pop("annotations", None)
    metadata: dict[str, Any] = {"name": "run", "project": "default"}
    if annotations:
        metadata["annotations"] = annotations
    base = {
        "runtime": "trainer",
        "model": {"uri": "hf://Qwen/Qwen3-0.6B@" + "c" * 40},
        "environment": {"name": "reverse-words@1.0.0", "heldOutTasks": 64},
    }
    return {"apiVersion": "nodus.dev/v1beta1", "kind": "TrainingJob", "metadata": metadata, "spec": {**base, **spec}}


def facts(parameters: str | None = "600M", **extra: Any) -> Facts:
    size = (
        ModelSize(int(Decimal(parameters[:-1]) * {"K": 10**3, "M": 10**6, "B": 10**9}[parameters[-1]]), "test")
        if parameters
        else None
    )
    return Facts(now=NOW, model_size=size, **extra)


def test_method_is_read_from_the_parameters() -> None:
    assert method_of({"lora": {"r": 8}}) == ("LoRA", "None")
    assert method_of({"lora": {"r": 8, "quantization": "4bit"}}) == ("QLoRA", "4bit")
    assert method_of({"lora": {"r": 8}, "quantization": "4bit"}) == ("QLoRA", "4bit")
    assert method_of({"lora": {"r": 8}, "quantization": "8bit"}) == ("LoRA", "8bit")
    assert method_of({"steps": 3}) == ("Full", "None")


def test_the_first_preset_that_fits_size_and_method_gives_the_resources() -> None:
    tiny = estimate_trainingjob(job(), RUNTIME, facts("140K"), PRICES)
    assert tiny.preset == "tiny-cpu" and tiny.resources == {"cpu": 2}
    small = estimate_trainingjob(job(), RUNTIME, facts("600M"), PRICES)
    assert small.preset == "small-lora" and small.method == "LoRA"
    qlora = estimate_trainingjob(job(parameters={"lora": {"quantization": "4bit"}}), RUNTIME, facts("8B"), PRICES)
    assert qlora.preset == "small-qlora" and qlora.method == "QLoRA"
    full = estimate_trainingjob(job(parameters={"lora": None}), RUNTIME, facts("8B"), PRICES)
    assert full.preset == "full" and full.method == "Full"
    large = estimate_trainingjob(job(), RUNTIME, facts("70B"), PRICES)
    assert large.preset == "large-lora"


def test_spec_resources_win_over_presets() -> None:
    estimate = estimate_trainingjob(
        job(resources={"gpu": {"type": ["a100-80g"], "count": 4}, "nodes": 1}), RUNTIME, facts("140K"), PRICES
    )
    assert estimate.preset is None and estimate.resources == {"gpu": {"type": ["a100-80g"], "count": 4}, "nodes": 1}
    assert estimate.per_hour_usd == Decimal("6.56")
    assert "resources: spec.resources" in estimate.basis


def test_duration_uses_the_slowest_allowed_gpu_with_a_figure_and_prices_it_there() -> None:
    estimate = estimate_trainingjob(job(parameters={"steps": 500}), RUNTIME, facts("600M", model_cached=True), PRICES)
    # l4-24g is slower than a100-80g: 500 x 2.0 + 128 x 0.1 + 30 start-up, at the l4's rate.
    assert estimate.duration_seconds == pytest.approx(500 * 2.0 + 128 * 0.1 + 30)
    assert estimate.per_hour_usd == Decimal("0.43")
    assert estimate.cost_usd == Decimal("0.1246")
    assert any(line.startswith("training: 500 steps x 2 s (l4-24g)") for line in estimate.basis)
    assert estimate.unpriced == ()


def test_caching_counts_only_when_the_model_is_not_imported() -> None:
    cached = estimate_trainingjob(job(), RUNTIME, facts("140K", model_cached=True), PRICES)
    new = estimate_trainingjob(job(), RUNTIME, facts("140K", model_cached=False), PRICES)
    assert new.duration_seconds is not None and cached.duration_seconds is not None
    assert new.duration_seconds - cached.duration_seconds == pytest.approx(120)


def test_held_out_tasks_count_twice_with_baseline_and_final_and_not_beyond_the_split() -> None:
    both = estimate_trainingjob(job(), RUNTIME, facts("140K"), PRICES)
    final_only = estimate_trainingjob(job(evaluation={"baseline": False}), RUNTIME, facts("140K"), PRICES)
    small_split = estimate_trainingjob(job(), RUNTIME, facts("140K", held_out_available=10), PRICES)
    assert both.duration_seconds is not None and final_only.duration_seconds is not None
    assert both.duration_seconds - final_only.duration_seconds == pytest.approx(64 * 0.02)
    assert any("20 tasks (10 held-out, baseline and final)" in line for line in small_split.basis)


def test_expected_duration_overrides_the_measured_times() -> None:
    estimate = estimate_trainingjob(
        job(expectedDuration="2h", resources={"gpu": {"type": ["a100-80g"], "count": 1}}), RUNTIME, facts(), PRICES
    )
    assert estimate.duration_seconds == 7200
    assert estimate.cost_usd == Decimal("3.28")
    # The first hold is the first hour.
    assert estimate.first_hold_usd == Decimal("1.64")


def test_a_cpu_run_is_priced_at_this_hosts_price() -> None:
    estimate = estimate_trainingjob(job(parameters={"steps": 60}), RUNTIME, facts("140K", model_cached=True), PRICES)
    seconds = 60 * 0.5 + 128 * 0.02 + 30
    assert estimate.duration_seconds == pytest.approx(seconds)
    assert estimate.cost_usd == (Decimal("3.60") * Decimal(str(seconds)) / 3600).quantize(Decimal("0.0001"))
    assert estimate.first_hold_usd == estimate.cost_usd  # shorter than an hour: the whole estimate


def test_multi_node_prices_every_node_and_shows_the_assembly_bound() -> None:
    spec = {
        "resources": {"gpu": {"type": ["a100-80g"], "count": 8}, "nodes": 2},
        "distributed": {"startupTimeout": "15m", "maxAssemblyRetries": 2},
        "expectedDuration": "1h",
    }
    estimate = estimate_trainingjob(job(**spec), RUNTIME, facts(), PRICES)
    assert estimate.per_hour_usd == Decimal("1.64") * 8 * 2
    assert estimate.cost_usd == Decimal("26.24")
    # 4 machines (2 members + 2 replacements) x 8 GPUs x $1.64 x (15 + 5 minutes) x 3 tries.
    assert estimate.assembly_bound_usd == (Decimal("1.64") * 8 * 4 * Decimal(1200) / 3600 * 3).quantize(
        Decimal("0.0001")
    )
    shown = estimate.to_dict()
    assert shown["gangHoldUSD"] == shown["firstHoldUSD"] == "26.24"
    assert shown["assemblyBoundUSD"] == "52.48"


def test_what_cannot_be_priced_is_listed_never_counted_as_zero() -> None:
    # No measured step time on H100s.
    large = estimate_trainingjob(job(), RUNTIME, facts("70B"), PRICES)
    assert large.cost_usd is None and large.duration_seconds is None
    assert [item.item for item in large.unpriced] == ["training"]
    assert "no measured seconds per step for h100-sxm-80g" in large.unpriced[0].reason
    assert large.first_hold_usd == Decimal("2.99") * 8  # the first hour is known all the same
    # No price for the GPU type.
    unpriced = estimate_trainingjob(job(resources={"gpu": {"type": ["b200-180g"]}}), RUNTIME, facts(), PRICES)
    assert unpriced.cost_usd is None and unpriced.first_hold_usd is None
    assert [item.item for item in unpriced.unpriced] == ["training", "price"]
    # An unknown model size cannot choose a preset.
    unknown = estimate_trainingjob(job(model={"uri": "hf://nodus/tiny@" + "a" * 40}), RUNTIME, facts(None), PRICES)
    assert unknown.resources is None and unknown.cost_usd is None
    assert "the model's size is unknown" in unknown.unpriced[0].reason
    # A missing runtime.
    missing = estimate_trainingjob(job(), None, facts(), PRICES)
    assert missing.cost_usd is None and missing.unpriced[0].item == "runtime"
    assert missing.to_dict()["unpriced"][0] == {"item": "runtime", "reason": "TrainingRuntime trainer does not exist"}


def test_the_annotation_decides_the_size_in_the_basis() -> None:
    from nodus.reconciler.pricing.model_size import from_annotation

    size = from_annotation({"nodus.dev/parameters": "70B"})
    assert size is not None and size.parameters == 70 * 10**9
    estimate = estimate_trainingjob(job(), RUNTIME, Facts(now=NOW, model_size=size), PRICES)
    assert estimate.preset == "large-lora"
    assert "annotation nodus.dev/parameters: 70B" in estimate.basis[0]


def test_the_first_hold_is_never_above_the_cap_and_a_low_cap_is_reported() -> None:
    spec = {"expectedDuration": "3h", "resources": {"gpu": {"type": ["a100-80g"]}}}
    capped = estimate_trainingjob(job(**spec, maxCostUSD="1.00"), RUNTIME, facts(), PRICES)
    assert capped.first_hold_usd == Decimal("1.00") and capped.hold_needed_usd == Decimal("1.64")
    assert capped.cap_below_first_hold
    roomy = estimate_trainingjob(job(**spec, maxCostUSD="2.00"), RUNTIME, facts(), PRICES)
    assert roomy.first_hold_usd == Decimal("1.64") and not roomy.cap_below_first_hold
    assert any("suspended at the cap" in line for line in roomy.basis)


def test_the_start_is_now_on_a_free_host_else_after_the_running_jobs() -> None:
    free = estimate_trainingjob(job(), RUNTIME, facts(), PRICES)
    assert free.start_time == NOW
    busy = estimate_trainingjob(job(), RUNTIME, facts(running=(RunningJob("TrainingJob/a", 600.0),)), PRICES)
    assert busy.start_time == NOW + timedelta(seconds=600)
    unknown = estimate_trainingjob(job(), RUNTIME, facts(running=(RunningJob("Job/b", None),)), PRICES)
    assert unknown.start_time is None and unknown.to_dict()["startTime"] is None


def test_the_estimate_names_the_price_table() -> None:
    shown = estimate_trainingjob(job(), RUNTIME, facts(), PRICES).to_dict()
    assert shown["prices"] == {"version": "2026-11-29", "file": "prices.yaml"}
    assert set(shown) >= {"costUSD", "firstHoldUSD", "startTime", "durationSeconds", "resources", "preset", "method"}
    assert shown["startTime"] == "2026-11-29T12:00:00Z"


def test_an_evaluation_run_without_a_time_per_task_has_no_cost() -> None:
    runtime = {**RUNTIME, "spec": {**RUNTIME["spec"], "measured": {"startupSeconds": 5}, "presets": []}}
    estimate = estimate_trainingjob(job(mode="Evaluate"), runtime, facts(), PRICES)
    assert estimate.cost_usd is None and [item.item for item in estimate.unpriced] == ["evaluation"]
    timed = {**runtime["spec"], "measured": {"evaluationTaskSeconds": {"cpu": 0.5}, "startupSeconds": 5}}
    scored = estimate_trainingjob(job(mode="Evaluate"), {**runtime, "spec": timed}, facts(), PRICES)
    assert scored.duration_seconds == pytest.approx(64 * 0.5 + 5)  # scored once, no training
    # Around training, scoring without a time is left out of the cost and listed.
    train = {**RUNTIME["spec"], "measured": {"stepSeconds": {"cpu": 1.0}}}
    partial = estimate_trainingjob(job(parameters={"steps": 10}), {**RUNTIME, "spec": train}, facts("140K"), PRICES)
    assert partial.duration_seconds == pytest.approx(10) and partial.cost_usd is not None
    assert [item.item for item in partial.unpriced] == ["evaluation"]
