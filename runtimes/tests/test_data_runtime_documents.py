"""The documents of the data-driven runtimes (runtimes/sft.yaml, dpo, orpo, kto, reward-model, distill): each is a
valid managed TrainingRuntime whose command is its trainer module, whose tasks are the trainer's, whose schema uses
only JSON Schema keywords (a YAML flow mapping with an unquoted comma makes a keyword out of half a description,
which JSON Schema then ignores), whose defaults train every weight (no lora block: the seeds' full fine-tuning),
which takes the Training guide's examples' parameters, and which the wheel ships (a force-include line each).
Fast: nothing is trained."""

from __future__ import annotations

import importlib
import importlib.util
from pathlib import Path
from typing import Any

import pytest

from nodus.runtimes.finetune import Common
from nodus.runtimes.weights import Weights
from nodus.specs.parse import parse_resources

RUNTIMES = Path(__file__).resolve().parents[1]
MODULES = {
    "sft": ("nodus.runtimes.sft", "SFT"),
    "dpo": ("nodus.runtimes.dpo", "DPO"),
    "orpo": ("nodus.runtimes.orpo", "ORPO"),
    "kto": ("nodus.runtimes.kto", "KTO"),
    "reward-model": ("nodus.runtimes.reward_model", "RewardModel"),
    "distill": ("nodus.runtimes.distill", "Distill"),
}
KEYWORDS = {"type", "minimum", "maximum", "exclusiveMinimum", "description", "enum", "oneOf", "items", "minItems"}
KEYWORDS |= {"additionalProperties", "properties", "$schema"}
EXAMPLES: dict[str, list[dict[str, Any]]] = {
    # The Training guide's (seed 001) parameters for these runtimes, as examples/training holds them.
    "sft": [
        {"steps": 2000, "lora": {"r": 16, "alpha": 32}},
        {"steps": 10000, "initialization": "Scratch", "packing": True},
    ],
    "dpo": [{"steps": 400}],
    "distill": [{"temperature": 2.0}],
}


def document(name: str) -> Any:
    result = parse_resources([RUNTIMES / f"{name}.yaml"])
    assert result.ok, [str(e) for e in result.errors]
    [parsed] = result.resources
    return parsed.resource


def keywords(schema: Any, path: str = "") -> list[str]:
    """Every keyword used in a schema that JSON Schema does not know, with where it is."""
    unknown: list[str] = []
    if isinstance(schema, dict):
        for key, value in schema.items():
            if key not in KEYWORDS:
                unknown.append(f"{path}/{key}")
            if key == "properties":
                for name, sub in value.items():
                    unknown += keywords(sub, f"{path}/properties/{name}")
            elif isinstance(value, dict | list):
                unknown += keywords(value, f"{path}/{key}")
    elif isinstance(schema, list):
        for index, item in enumerate(schema):
            unknown += keywords(item, f"{path}[{index}]")
    return unknown


@pytest.mark.parametrize("name", sorted(MODULES))
def test_the_runtime_document_matches_its_trainer(name: str) -> None:
    runtime = document(name)
    spec = runtime.spec
    module_name, class_name = MODULES[name]
    assert (runtime.metadata.name, runtime.metadata.project, spec.managed) == (name, "nodus", True)
    assert spec.command == ["python", "-m", module_name]
    assert importlib.util.find_spec(module_name) is not None
    method = getattr(importlib.import_module(module_name), class_name)
    assert tuple(spec.tasks) == method.tasks and method.runtime == f"nodus/{name}"
    assert spec.parameter_schema["additionalProperties"] is False
    assert keywords(spec.parameter_schema) == []
    assert spec.measured.step_seconds.get("cpu") and spec.measured.startup_seconds > 0
    assert [output.path for output in spec.outputs] == ["/nodus/outputs"]
    # Defaults train every weight: a lora block in them could never be left out (the merge is deep).
    assert "lora" not in spec.defaults and Weights.from_parameters(spec.defaults).method == "Full"
    common = Common.from_json(spec.defaults)
    assert common.steps == spec.defaults["steps"] and common.held_out_fraction == 0.1
    methods = {preset.match.method for preset in spec.presets}
    assert methods == {"Full", "LoRA", "QLoRA"}


@pytest.mark.parametrize("name", sorted(EXAMPLES))
def test_the_training_guide_s_parameters_are_accepted(name: str) -> None:
    import jsonschema

    spec = document(name).spec
    for parameters in EXAMPLES[name]:
        jsonschema.validate({**spec.defaults, **parameters}, spec.parameter_schema)
    with pytest.raises(jsonschema.ValidationError):
        jsonschema.validate({**spec.defaults, "learning_rate": 1e-5}, spec.parameter_schema)


def test_every_runtime_document_is_shipped_in_the_wheel() -> None:
    text = (RUNTIMES / "pyproject.toml").read_text()
    for path in sorted(RUNTIMES.glob("*.yaml")):
        assert f'"{path.name}" = "nodus/runtimes/catalog/{path.name}"' in text, path.name
