"""The "no phantom diff" guarantee: a normalised document read back through its model is the same document.

Checked on every example repository under examples/ and the specs' full fixtures, and as a property over
free-form values (parameters, labels) that the models pass through untouched.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from nodus.errors import PlanError
from nodus.reconciler.planning import desired_from, plan
from nodus.reconciler.planning.desired import document_of, normalise_observed
from nodus.reconciler.state.records import DEFAULT_PROJECT, ResourceRecord, spec_hash
from nodus.specs.parse import Parsed, Source, parse_resources, parse_text
from nodus.specs.training import TrainingJob

REPO = Path(__file__).resolve().parents[3]
# Each leaf folder is one example repository; two of them define the same name, so they are read apart.
EXAMPLE_FOLDERS = sorted({path.parent for path in (REPO / "examples").rglob("*.yaml")})
FOLDERS = [*EXAMPLE_FOLDERS, REPO / "specs" / "tests" / "fixtures" / "full"]


def _parsed(folder: Path) -> list[Parsed]:
    result = parse_resources([folder])
    assert result.ok, [str(problem) for problem in result.errors]
    return result.resources


EXAMPLES = [(folder, item) for folder in FOLDERS for item in _parsed(folder)]


def _id(case: tuple[Path, Parsed]) -> str:
    folder, item = case
    return f"{folder.relative_to(REPO)}:{item.resource.ref}"


def test_every_example_folder_is_read() -> None:
    assert len(FOLDERS) > 10
    assert {item.resource.KIND for _, item in EXAMPLES} >= {"Environment", "TrainingJob", "Agent", "Volume"}


@pytest.mark.parametrize("case", EXAMPLES, ids=[_id(case) for case in EXAMPLES])
def test_dump_validate_dump_is_the_same_document(case: tuple[Path, Parsed]) -> None:
    _, item = case
    first = document_of(item.resource)
    again = document_of(type(item.resource).model_validate(first))
    assert again == first
    assert spec_hash(again) == spec_hash(first)
    assert "status" not in first
    assert first["metadata"]["project"] == (item.resource.metadata.project or DEFAULT_PROJECT)
    assert list(first)[:4] == ["apiVersion", "kind", "metadata", "spec"]


@pytest.mark.parametrize("folder", FOLDERS, ids=[str(folder.relative_to(REPO)) for folder in FOLDERS])
def test_an_applied_example_plans_no_changes(folder: Path) -> None:
    desired = desired_from(_parsed(folder))
    stored = [ResourceRecord(item.key, item.document, item.spec_hash) for item in desired]
    planned = plan(desired, stored)
    assert not planned.has_changes, [str(action.key) for action in planned.changes]
    assert {action.type for action in planned.actions} == {"noop"}


def test_a_stored_document_without_defaults_is_not_a_change() -> None:
    """A document an older nodus stored before `grading` had defaults: read through today's model."""
    (item,) = desired_from(parse_text(ENVIRONMENT).resources)
    minimal = {
        "apiVersion": "nodus.dev/v1",
        "kind": "Environment",
        "metadata": {"name": "reverse-words"},
        "spec": {"version": "1.0.0", "package": {"path": "./reverse-words"}},
    }
    record = ResourceRecord(item.key, minimal, spec_hash(minimal), generation=5)
    assert normalise_observed(record) == item.document
    (action,) = plan([item], [record]).actions
    assert action.type == "noop"
    assert action.reason == "matches the state store once normalised"


def test_a_stored_document_the_model_refuses_is_compared_as_stored() -> None:
    (item,) = desired_from(parse_text(ENVIRONMENT).resources)
    odd = {**item.document, "spec": {**item.document["spec"], "retired": True}}
    record = ResourceRecord(item.key, odd, spec_hash(odd))
    assert normalise_observed(record) is odd
    (action,) = plan([item], [record]).actions
    assert [(change.path, change.op) for change in action.changes] == [("spec.retired", "remove")]


def test_the_source_is_file_and_line() -> None:
    (item,) = desired_from(parse_text("# a comment\n---\n" + ENVIRONMENT, "envs/words.yaml").resources)
    assert item.source == "envs/words.yaml:3"
    assert str(item.key) == "Environment/reverse-words"


def test_default_project_written_or_left_out_is_one_resource() -> None:
    explicit = ENVIRONMENT.replace("  name: reverse-words\n", "  name: reverse-words\n  project: default\n")
    parsed = parse_text(ENVIRONMENT, "a.yaml").resources + parse_text(explicit, "b.yaml").resources
    with pytest.raises(
        PlanError, match=r"^b\.yaml:1: Environment/reverse-words: defined twice: here and at a\.yaml:1$"
    ):
        desired_from(parsed)


ENVIRONMENT = """apiVersion: nodus.dev/v1
kind: Environment
metadata:
  name: reverse-words
spec:
  version: 1.0.0
  package:
    path: ./reverse-words
"""

# Free-form values as a spec file can hold them: finite numbers (`.inf` is not JSON), no lone surrogates
# (the YAML reader refuses them).
TEXT = st.characters(exclude_categories=["Cs"])
JSON_SCALARS = (
    st.none()
    | st.booleans()
    | st.integers(-(2**53), 2**53)
    | st.floats(allow_nan=False, allow_infinity=False)
    | st.text(TEXT, max_size=12)
)
JSON_VALUES = st.recursive(
    JSON_SCALARS,
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(TEXT, max_size=8), inner, max_size=3),
    max_leaves=12,
)
LABEL_KEYS = st.from_regex(r"\A([a-z0-9.]{1,20}/)?[A-Za-z0-9]([-A-Za-z0-9_.]{0,10}[A-Za-z0-9])?\Z")


@settings(max_examples=150, deadline=None)
@given(
    parameters=st.dictionaries(st.text(TEXT, min_size=1, max_size=10), JSON_VALUES, max_size=5),
    labels=st.dictionaries(LABEL_KEYS, st.text(TEXT, max_size=10), max_size=3),
    annotations=st.dictionaries(st.text(TEXT, min_size=1, max_size=10), st.text(TEXT, max_size=20), max_size=3),
)
def test_free_form_values_survive_the_round_trip(
    parameters: dict[str, Any], labels: dict[str, str], annotations: dict[str, str]
) -> None:
    document = {
        "apiVersion": "nodus.dev/v1beta1",
        "kind": "TrainingJob",
        "metadata": {"name": "job", "labels": labels, "annotations": annotations},
        "spec": {
            "runtime": "nodus/sft",
            "model": {"uri": "hf://Qwen/Qwen3-0.6B@c1899de289a04d12100db370d81485cdf75e47ca"},
            "data": {"volume": "chats", "format": "JSONL"},
            "parameters": parameters,
        },
    }
    resource = TrainingJob.model_validate(document)
    (item,) = desired_from([Parsed(resource, Source("<generated>", 1, 1, 0))])
    assert item.document["spec"]["parameters"] == parameters
    assert item.document["metadata"]["labels"] == labels
    assert item.document["metadata"]["annotations"] == annotations
    record = ResourceRecord(item.key, item.document, item.spec_hash)
    assert normalise_observed(record) == item.document
    assert not plan([item], [record]).has_changes
