"""The JSON Schemas in specs/schemas/ match the models, describe every field, and accept every valid spec."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import jsonschema
import pytest

from nodus.specs import BY_KIND, KINDS
from nodus.specs.schema_export import file_name, render
from nodus.specs.yaml_source import load_documents

SCHEMAS = Path(__file__).resolve().parents[1] / "schemas"
REPO = Path(__file__).resolve().parents[2]
SPEC_FILES = sorted((Path(__file__).parent / "fixtures" / "full").glob("*.yaml")) + sorted(
    (REPO / "examples").rglob("*.yaml")
)


@pytest.mark.parametrize("cls", KINDS, ids=lambda c: c.KIND)
def test_committed_schema_matches_the_model(cls: Any) -> None:
    committed = (SCHEMAS / file_name(cls)).read_text()
    assert committed == render(cls), (
        f"specs/schemas/{file_name(cls)} is out of date: run `python -m nodus.specs.schema_export`"
    )


def test_no_stray_schema_files() -> None:
    assert sorted(p.name for p in SCHEMAS.glob("*.json")) == sorted(file_name(c) for c in KINDS)


def _undescribed(node: Any, where: str) -> list[str]:
    found = []
    if isinstance(node, dict):
        for name, prop in (node.get("properties") or {}).items():
            if "description" not in prop:
                found.append(f"{where}.{name}")
        for key, value in node.items():
            found += _undescribed(value, f"{where}/{key}")
    elif isinstance(node, list):
        for item in node:
            found += _undescribed(item, where)
    return found


@pytest.mark.parametrize("cls", KINDS, ids=lambda c: c.KIND)
def test_every_field_has_a_description(cls: Any) -> None:
    assert _undescribed(json.loads(render(cls)), cls.KIND) == []


def test_every_valid_spec_passes_its_json_schema() -> None:
    validators = {kind: jsonschema.Draft202012Validator(json.loads(render(cls))) for kind, cls in BY_KIND.items()}
    checked = 0
    for path in SPEC_FILES:
        for doc in load_documents(path.read_text()):
            errors = list(validators[doc.data["kind"]].iter_errors(doc.data))
            assert errors == [], f"{path}: {[e.message for e in errors]}"
            checked += 1
    assert checked > 40


def test_json_schema_rejects_an_unknown_field() -> None:
    schema = json.loads(render(BY_KIND["TrainingJob"]))
    doc = {
        "apiVersion": "nodus.dev/v1beta1",
        "kind": "TrainingJob",
        "metadata": {"name": "t"},
        "spec": {"runtime": "nodus/grpo-lora", "maxCostUsd": "1"},
    }
    assert not jsonschema.Draft202012Validator(schema).is_valid(doc)
