"""The JSONPath subset kubectl users type: `{.status.phase}`, `{.status.outputs[*].name}`, `{.spec.steps}`.

Who calls it: `nodus get -o jsonpath=...` and `nodus wait --for=jsonpath=...`. Supported: a template of
literal text and `{...}` expressions, each a dotted path of field names with `[N]` (an index) and `[*]`
(every item); results of one expression are joined with a space, as kubectl does.
"""

from __future__ import annotations

import json
import re
from typing import Any

from nodus.errors import ConfigError

_EXPRESSION = re.compile(r"\{([^{}]*)\}")
_STEP = re.compile(r"\.([A-Za-z_][A-Za-z0-9_-]*)|\[(\*|-?\d+)\]")


def evaluate(template: str, document: Any) -> str:
    """`template` with every `{...}` replaced by what it selects in `document`."""
    if "{" not in template:
        template = "{" + template + "}"
    return _EXPRESSION.sub(lambda match: _render(select(match.group(1), document)), template)


def select(path: str, document: Any) -> list[Any]:
    """Every value `path` (`.a.b[0]`, `.items[*].name`, or `.` for the whole document) selects."""
    text = path.strip()
    if text in ("", "."):
        return [document]
    if not text.startswith((".", "[")):
        text = "." + text
    values = [document]
    position = 0
    for match in _STEP.finditer(text):
        if match.start() != position:
            raise ConfigError(f"jsonpath {path!r}: cannot read {text[position:]!r}", hint="write it as {.status.phase}")
        position = match.end()
        values = [found for value in values for found in _step(value, match.group(1), match.group(2))]
    if position != len(text):
        raise ConfigError(f"jsonpath {path!r}: cannot read {text[position:]!r}", hint="write it as {.status.phase}")
    return values


def _step(value: Any, field: str | None, index: str | None) -> list[Any]:
    if field is not None:
        return [value[field]] if isinstance(value, dict) and field in value else []
    if not isinstance(value, list):
        return []
    if index == "*":
        return list(value)
    position = int(index or 0)
    return [value[position]] if -len(value) <= position < len(value) else []


def _render(values: list[Any]) -> str:
    return " ".join(v if isinstance(v, str) else json.dumps(v, sort_keys=True) for v in values)
