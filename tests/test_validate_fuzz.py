"""Property test: mutated specs through `nodus validate` end in a valid parse or clear one-line errors.

Mutations: dropped, renamed and retyped fields, broken YAML, wrong kinds and apiVersions, huge values and
unicode, applied to every valid spec the project has. Whatever the input, the command exits 0 or 1, prints
JSON whose every error is one located line, and never a traceback.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import yaml
from click.testing import CliRunner
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from nodus.cli.main import cli

REPO = Path(__file__).resolve().parents[1]
BASES = [
    yaml.safe_dump(doc, sort_keys=False, allow_unicode=True)
    for path in sorted((REPO / "specs" / "tests" / "fixtures" / "full").glob("*.yaml"))
    + sorted((REPO / "examples").rglob("*.yaml"))
    for doc in yaml.safe_load_all(path.read_text())
    if doc
]

scalars = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(),
    st.integers(min_value=10**18, max_value=10**400),
    st.floats(allow_nan=True, allow_infinity=True),
    st.text(max_size=40),
    st.text(
        alphabet=st.characters(min_codepoint=0x80, max_codepoint=0x10FFFF, exclude_categories=("Cs",)), max_size=20
    ),
    st.just("x" * 100_000),
    st.sampled_from(["1.0.0", "hf://a/b@main", "nodus/x@1.0.0", "15m", "5.00", "-1", "NODUS_X", "", "🚀"]),
)
values = st.recursive(
    scalars,
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=12), inner, max_size=4),
    max_leaves=8,
)


def _paths(node: Any, prefix: tuple[Any, ...] = ()) -> list[tuple[Any, ...]]:
    found = [prefix] if prefix else []
    if isinstance(node, dict):
        for key, value in node.items():
            found += _paths(value, (*prefix, key))
    elif isinstance(node, list):
        for index, value in enumerate(node):
            found += _paths(value, (*prefix, index))
    return found


def _parent(doc: Any, path: tuple[Any, ...]) -> Any:
    for part in path[:-1]:
        doc = doc[part]
    return doc


@st.composite
def mutated_specs(draw: st.DrawFn) -> str:
    text = draw(st.sampled_from(BASES))
    doc = yaml.safe_load(text)
    for _ in range(draw(st.integers(min_value=1, max_value=3))):
        paths = _paths(doc)
        action = draw(st.sampled_from(["drop", "rename", "retype", "kind", "api", "break", "unicode", "whole"]))
        if action in ("drop", "rename", "retype") and paths:
            path = draw(st.sampled_from(paths))
            parent = _parent(doc, path)
            key = path[-1]
            if action == "drop":
                del parent[key]
            elif action == "rename" and isinstance(parent, dict):
                parent[draw(st.text(min_size=1, max_size=15))] = parent.pop(key)
            else:
                parent[key] = draw(values)
        elif action == "kind" and isinstance(doc, dict):
            doc["kind"] = draw(st.sampled_from(["TrainingJob", "Agent", "Job", "trainingjob", "Gizmo", ""]) | scalars)
        elif action == "api" and isinstance(doc, dict):
            doc["apiVersion"] = draw(
                st.sampled_from(["nodus.dev/v1", "nodus.dev/v1beta1", "nodus.dev/v2", "v1"]) | scalars
            )
        elif action == "unicode" and isinstance(doc, dict):
            doc[draw(st.text(min_size=1, max_size=8))] = draw(st.text(max_size=30))
        elif action == "whole":
            doc = draw(values)
    out = yaml.safe_dump(doc, sort_keys=False, allow_unicode=True)
    if draw(st.booleans()) and out:
        # Break the YAML itself: cut it, or splice in characters that YAML treats specially.
        at = draw(st.integers(min_value=0, max_value=len(out)))
        junk = draw(
            st.sampled_from(["", ":", "- ", "{", "]", "\t", "&a", "*b", "'", '"', "\n  x", "!!python/object:os.system"])
        )
        out = out[:at] + junk + (out[at:] if draw(st.booleans()) else "")
    return out


@settings(max_examples=600, deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
@given(mutated_specs())
def test_validate_never_crashes(text: str) -> None:
    result = CliRunner().invoke(cli, ["validate", "-o", "json", "-"], input=text)
    assert result.exit_code in (0, 1), result.output
    assert result.exception is None or isinstance(result.exception, SystemExit), repr(result.exception)
    assert "Traceback" not in result.output
    report = json.loads(result.stdout)
    assert report["valid"] == (result.exit_code == 0)
    for problem in report["errors"]:
        assert problem["file"] == "-"
        assert problem["line"] >= 1 and problem["column"] >= 1
        assert problem["message"] and "\n" not in problem["message"]
        assert "\n" not in (problem["field"] or "")
    if result.exit_code == 1:
        assert report["errors"]
    else:
        assert report["resources"]
