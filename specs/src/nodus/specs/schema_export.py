"""JSON Schemas of every kind, generated from the models into `specs/schemas/<kind>.json`.

Who uses it: `nodus schema KIND` prints one; `python -m nodus.specs.schema_export [DIR]` rewrites them all
(run it after changing a model); a test fails when the committed files drift from the models, so editors
and CI that validate YAML with these schemas always see what `nodus validate` enforces.
"""

from __future__ import annotations

import json
import sys
from datetime import timedelta
from decimal import Decimal
from pathlib import Path
from typing import Any

from pydantic.json_schema import GenerateJsonSchema

from nodus.specs.base import Resource
from nodus.specs.registry import KINDS
from nodus.specs.types import format_duration


class _NodusSchema(GenerateJsonSchema):
    """Defaults written as people write them (`15m`, `"1.00"`), and no auto-made titles on fields."""

    def encode_default(self, dft: Any) -> Any:
        if isinstance(dft, timedelta):
            return format_duration(dft)
        if isinstance(dft, Decimal):
            return format(dft, "f")
        return super().encode_default(dft)

    def field_title_should_be_set(self, schema: Any) -> bool:
        return False


SCHEMA_DIALECT = "https://json-schema.org/draft/2020-12/schema"


def schema_for(cls: type[Resource]) -> dict[str, Any]:
    """The JSON Schema of one kind, as validated (camelCase names, required fields, bounds)."""
    schema = cls.model_json_schema(by_alias=True, mode="validation", schema_generator=_NodusSchema)
    schema = cls.patch_json_schema(schema)
    return {
        "$schema": SCHEMA_DIALECT,
        "$id": f"https://nodus.dev/schemas/{cls.API_VERSION.split('/')[1]}/{cls.KIND.lower()}.json",
        "title": cls.KIND,
        **{k: v for k, v in schema.items() if k != "title"},
    }


def render(cls: type[Resource]) -> str:
    """Stable text of a schema: sorted keys, two-space indent, trailing newline."""
    return json.dumps(schema_for(cls), indent=2, sort_keys=True, ensure_ascii=False) + "\n"


def file_name(cls: type[Resource]) -> str:
    return f"{cls.KIND.lower()}.json"


def default_dir() -> Path:
    """`specs/schemas/` of a source checkout."""
    return Path(__file__).resolve().parents[3] / "schemas"


def write_all(directory: Path) -> list[Path]:
    directory.mkdir(parents=True, exist_ok=True)
    written = []
    for cls in KINDS:
        target = directory / file_name(cls)
        target.write_text(render(cls), encoding="utf-8")
        written.append(target)
    return written


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    directory = Path(args[0]) if args else default_dir()
    for path in write_all(directory):
        print(path)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
