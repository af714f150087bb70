"""TrainingJob admission: every refusal the seeds name, with the field path, before anything runs."""

from __future__ import annotations

from typing import Any

import pytest

from nodus.reconciler.controllers.admission import admit
from nodus.reconciler.references import merge
from nodus.reconciler.state.records import ResourceKey

SCHEMA = {
    "type": "object",
    "additionalProperties": False,
    "properties": {
        "steps": {"type": "integer", "minimum": 1},
        "learningRate": {"type": "number"},
        "lora": {"type": "object", "properties": {"r": {"type": "integer"}, "alpha": {"type": "integer"}}},
    },
}


def runtime(**spec: Any) -> dict[str, Any]:
    base = {
        "command": ["python", "trainer.py"],
        "tasks": ["RL"],
        "modes": ["Train"],
        "environmentTasks": "AttemptAPI",
        "parameterSchema": SCHEMA,
        "defaults": {"steps": 50, "learningRate": 4e-5, "lora": {"r": 8, "alpha": 16}},
    }
    return {"metadata": {"name": "grpo-lora", "project": "nodus"}, "spec": {**base, **spec}}


def job(**spec: Any) -> dict[str, Any]:
    base = {"runtime": "nodus/grpo-lora", "environment": {"name": "arithmetic@2.0.0", "seed": 42}, "model": MODEL}
    return {"metadata": {"name": "tj", "project": "default"}, "spec": {**base, **spec}}


MODEL = {"uri": "hf://Qwen/Qwen3-0.6B@c1899de289a04d12100db370d81485cdf75e47ca"}


ENVIRONMENTS = {
    ResourceKey("Environment", "default", "arithmetic"): {
        "metadata": {"name": "arithmetic"},
        "spec": {"version": "2.0.0"},
    }
}


def test_a_job_without_a_model_trains_the_runtime_s_default() -> None:
    verdict = admit(job(model=None), runtime(defaultModel=MODEL), ENVIRONMENTS)
    assert verdict.admitted and verdict.model == MODEL


def test_parameters_merge_over_the_runtime_defaults() -> None:
    verdict = admit(job(parameters={"lora": {"r": 16}, "steps": 10}), runtime(), ENVIRONMENTS)
    assert verdict.admitted
    assert verdict.parameters == {"steps": 10, "learningRate": 4e-5, "lora": {"r": 16, "alpha": 16}}
    assert verdict.runtime == ResourceKey("TrainingRuntime", "nodus", "grpo-lora")
    assert verdict.environment == ResourceKey("Environment", "default", "arithmetic")
    assert merge({"a": [1, 2]}, {"a": [3]}) == {"a": [3]}


@pytest.mark.parametrize(
    ("the_job", "the_runtime", "reason", "message"),
    [
        (
            job(parameters={"learning_rate": 1e-4}),
            runtime(),
            "InvalidParameters",
            "spec.parameters.learning_rate: unknown",
        ),
        (
            job(parameters={"lora": {"r": "8"}}),
            runtime(),
            "InvalidParameters",
            "spec.parameters.lora.r: '8' is not of type",
        ),
        (job(parameters={"steps": 0}), runtime(), "InvalidParameters", "spec.parameters.steps: 0 is less than"),
        (job(), None, "RuntimeNotFound", "TrainingRuntime nodus/grpo-lora does not exist"),
        (job(mode="Evaluate"), runtime(), "ModeNotSupported", "does not support mode Evaluate"),
        (job(environment={"name": "missing@1.0.0"}), runtime(), "EnvironmentNotFound", "default/missing"),
        (job(environment={"name": "arithmetic@9.0.0"}), runtime(), "EnvironmentVersionNotFound", "not 9.0.0"),
        (job(), runtime(environmentTasks=None), "RuntimeLacksAttemptAPI", "environmentTasks: AttemptAPI"),
        (job(model={"uri": "hf://Qwen/Qwen3-0.6B"}), runtime(), "ModelNotPinned", "40-character revision"),
        (job(model=None), runtime(defaultModel={"uri": "hf://Qwen/Qwen3-0.6B"}), "ModelNotPinned", "defaultModel"),
    ],
)
def test_refusals_name_the_reason_and_the_field(
    the_job: dict[str, Any], the_runtime: dict[str, Any] | None, reason: str, message: str
) -> None:
    verdict = admit(the_job, the_runtime, ENVIRONMENTS)
    assert not verdict.admitted
    assert verdict.reason == reason
    assert message in verdict.message
    assert verdict.field and verdict.message.startswith(f"{verdict.field}: ")


@pytest.mark.parametrize(
    ("parameters", "field", "message"),
    [
        ({"learning_rate": 1e-4}, "spec.parameters.learning_rate", "unknown parameter; did you mean 'learningRate'?"),
        ({"LearningRate": 1e-4}, "spec.parameters.LearningRate", "unknown parameter; did you mean 'learningRate'?"),
        ({"step": 3}, "spec.parameters.step", "unknown parameter; did you mean 'steps'?"),
        ({"lora": {"alhpa": 8}}, "spec.parameters.lora.alhpa", "unknown parameter; did you mean 'alpha'?"),
        ({"lora": {"rank": 8}}, "spec.parameters.lora.rank", "unknown parameter (the runtime's schema does not allow"),
        ({"temperature": 1.0}, "spec.parameters.temperature", "unknown parameter (the runtime's schema does not"),
    ],
)
def test_an_unknown_parameter_suggests_the_name_it_was_probably_meant_to_be(
    parameters: dict[str, Any], field: str, message: str
) -> None:
    lora = {"type": "object", "additionalProperties": False, "properties": {"r": {}, "alpha": {}}}
    closed = {
        "type": "object",
        "additionalProperties": False,
        "properties": {"steps": {"type": "integer"}, "learningRate": {"type": "number"}, "lora": lora},
    }
    verdict = admit(job(parameters=parameters), runtime(parameterSchema=closed), ENVIRONMENTS)
    assert verdict.reason == "InvalidParameters" and verdict.field == field
    assert verdict.message.startswith(f"{field}: {message}")


def test_an_export_needs_a_writable_volume_of_the_project_and_a_runtime_with_outputs() -> None:
    outputs = [{"name": "outputs", "path": "/nodus/outputs"}]
    results = ResourceKey("Volume", "default", "results")
    writable = {**ENVIRONMENTS, results: {"metadata": {"name": "results"}, "spec": {}}}
    exporting = job(exportTo={"volume": "results"})
    assert admit(exporting, runtime(outputs=outputs), writable).admitted
    missing = admit(exporting, runtime(outputs=outputs), ENVIRONMENTS)
    assert (missing.reason, missing.field) == ("VolumeNotFound", "spec.exportTo.volume")
    assert missing.message == "spec.exportTo.volume: Volume default/results does not exist"
    shared = {**ENVIRONMENTS, results: {"metadata": {"name": "results"}, "spec": {"accessMode": "ReadOnlyMany"}}}
    read_only = admit(exporting, runtime(outputs=outputs), shared)
    assert read_only.reason == "VolumeNotWritable" and "must be ReadWriteOnce" in read_only.message
    no_outputs = admit(exporting, runtime(), writable)
    assert no_outputs.reason == "RuntimeLacksOutputs" and "/nodus/outputs" in no_outputs.message
    # A Volume of another project does not count.
    elsewhere = {**ENVIRONMENTS, ResourceKey("Volume", "team-b", "results"): {"spec": {}}}
    assert admit(exporting, runtime(outputs=outputs), elsewhere).reason == "VolumeNotFound"
