"""A misspelt field anywhere in the fixed part of any kind gives one located line with the suggestion.

The 'full' fixtures use every field of every kind; each of their keys in a fixed (not free-form) mapping is
misspelt in turn, and the error must name the file, line and column of that key, the resource, the field
path and 'did you mean <the right name>?'.
"""

from __future__ import annotations

import typing
from pathlib import Path
from typing import Any

import pytest
import yaml
from pydantic import BaseModel

from nodus.specs import BY_KIND, parse_text
from nodus.specs.parse import _dotted, _fields_at, _unwrap
from nodus.specs.yaml_source import load_documents

FULL = Path(__file__).parent / "fixtures" / "full"


def _misspell(word: str) -> str:
    """Drop a letter from the middle (or double the last one for very short names)."""
    if len(word) <= 3:
        return word + word[-1]
    middle = len(word) // 2
    return word[:middle] + word[middle + 1 :]


def _cases() -> list[tuple[str, int, tuple[Any, ...]]]:
    cases = []
    for path in sorted(FULL.glob("*.yaml")):
        for index, doc in enumerate(load_documents(path.read_text())):
            cls = BY_KIND[doc.data["kind"]]
            for key_path in doc.keys:
                if key_path[-1] in _fields_at(cls, key_path[:-1]):
                    cases.append((path.name, index, key_path))
    return cases


CASES = _cases()


def _rename(data: Any, key_path: tuple[Any, ...], new: str) -> Any:
    if not key_path:
        return data
    head, rest = key_path[0], key_path[1:]
    if isinstance(data, list):
        return [(_rename(item, rest, new) if i == head else item) for i, item in enumerate(data)]
    out = {}
    for key, value in data.items():
        if key == head:
            out[new if not rest else key] = _rename(value, rest, new) if rest else value
        else:
            out[key] = value
    return out


def _all_field_paths(tp: Any, prefix: tuple[str, ...] = ()) -> set[tuple[str, ...]]:
    """Every YAML field path a kind has in its fixed part (list items and free-form maps skipped)."""
    tp = _unwrap(tp)
    if typing.get_origin(tp) in (list, tuple, set):
        return _all_field_paths(typing.get_args(tp)[0], prefix)
    if not (isinstance(tp, type) and issubclass(tp, BaseModel)):
        return set()
    paths: set[tuple[str, ...]] = set()
    for name, info in tp.model_fields.items():
        path = (*prefix, info.alias or name)
        paths.add(path)
        paths |= _all_field_paths(info.annotation, path)
    return paths


def test_full_fixtures_use_every_field_of_every_kind() -> None:
    used: dict[str, set[tuple[str, ...]]] = {}
    for path in sorted(FULL.glob("*.yaml")):
        for doc in load_documents(path.read_text()):
            keys = {tuple(str(k) for k in key if not isinstance(k, int)) for key in doc.keys}
            used.setdefault(doc.data["kind"], set()).update(keys)
    assert set(used) == set(BY_KIND)
    missing = {
        kind: sorted(".".join(p) for p in _all_field_paths(cls) - used[kind] if p[0] != "status")
        for kind, cls in BY_KIND.items()
    }
    assert all(not m for m in missing.values()), {k: m for k, m in missing.items() if m}
    assert len(CASES) > 150


@pytest.mark.parametrize(
    ("file", "index", "key_path"), CASES, ids=lambda v: _dotted(v) if isinstance(v, tuple) else str(v)
)
def test_misspelt_field_is_reported_with_suggestion(file: str, index: int, key_path: tuple[Any, ...]) -> None:
    docs = list(yaml.safe_load_all((FULL / file).read_text()))
    original = str(key_path[-1])
    typo = _misspell(original)
    mutated = _rename(docs[index], key_path, typo)
    text = yaml.safe_dump(mutated, sort_keys=False, allow_unicode=True)
    bad_path = (*key_path[:-1], typo)
    line, column = load_documents(text)[0].keys[bad_path]
    errors = [str(p) for p in parse_text(text, "typo.yaml").errors]
    expected = f"typo.yaml:{line}:{column}: "
    matching = [e for e in errors if e.startswith(expected) and f": {_dotted(bad_path)}: unknown field" in e]
    assert matching, errors
    assert matching[0].endswith(f"unknown field (did you mean {original}?)"), matching[0]
    assert "\n" not in matching[0]


def test_a_key_ending_in_a_newline_is_quoted_so_the_error_stays_one_line() -> None:
    """Found by tests/test_validate_fuzz.py: `re.match` with `$` took `0\\n` for a plain key."""
    text = "apiVersion: nodus.dev/v1\nkind: Volume\nmetadata: {name: v}\nspec: {}\n? '0\n\n  '\n: x\n"
    (problem,) = parse_text(text, "nl.yaml").errors
    assert problem.field == '["0\\n"]' and "\n" not in str(problem), str(problem)
