"""The base every resource model stands on: strict camelCase models, metadata, and the Resource envelope.

Who uses it: every kind module in `nodus.specs` subclasses `SpecModel` for its parts and `Resource` for the
kind itself; `nodus.specs.parse` validates documents against them; the reconciler reads the class-level
facts (`API_VERSION`, `KIND`, `SHORT_NAMES`, `UPDATABLE_IN_PLACE`) to plan.

Why these settings: unknown fields are errors (a typo must never be silently ignored), fields are written
in the seeds' exact camelCase (`trainTasks`, `maxCostUSD`) while Python code uses snake_case, and snake_case
is *not* accepted in YAML (so `learning_rate` is reported, not quietly taken). A field's docstring is its
description, which lands in the JSON Schema.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from typing import Any, ClassVar

from pydantic import BaseModel, ConfigDict, Field, field_validator
from pydantic.alias_generators import to_camel

from nodus.specs.types import DnsLabel

Loc = tuple[str | int, ...]


class SpecModel(BaseModel):
    """A part of a spec: unknown fields rejected, camelCase in YAML, immutable once parsed."""

    model_config = ConfigDict(
        extra="forbid",
        alias_generator=to_camel,
        validate_by_alias=True,
        validate_by_name=False,
        serialize_by_alias=True,
        use_attribute_docstrings=True,
        frozen=True,
        regex_engine="python-re",
    )

    def require_exactly_one(self, *names: str) -> None:
        """Raise when not exactly one of these optional fields is set (the seeds' either-or choices)."""
        fields = type(self).model_fields
        chosen = [fields[n].alias or n for n in names if getattr(self, n) is not None]
        if len(chosen) != 1:
            spelled = [fields[n].alias or n for n in names]
            listed = ", ".join(spelled[:-1]) + " or " + spelled[-1]
            got = f" (got {', '.join(chosen)})" if chosen else ""
            raise ValueError(f"set exactly one of {listed}{got}")

    def to_yaml_dict(self) -> dict[str, Any]:
        """The spec as a person writes it: camelCase, defaults left out, JSON-compatible values."""
        return self.model_dump(mode="json", by_alias=True, exclude_none=True, exclude_unset=True)


LABEL_NAME_RE = re.compile(r"^[A-Za-z0-9]([-A-Za-z0-9_.]{0,61}[A-Za-z0-9])?$")


def _check_label_key(key: str) -> str:
    prefix, _, name = key.rpartition("/")
    if not LABEL_NAME_RE.match(name) or len(prefix) > 253:
        raise ValueError(f"label key {key!r} must be [prefix/]name with letters, digits, '-', '_', '.'")
    return key


class Metadata(SpecModel):
    """Identity of a resource: its name, the project it belongs to, and labels for selection."""

    name: DnsLabel
    """The resource's name: a DNS label, unique per kind in its project."""
    project: DnsLabel | None = None
    """The project (namespace) that owns it; the current project when left out. `nodus` is the catalog."""
    labels: dict[str, str] = Field(default_factory=dict)
    """Key/value pairs for selecting resources (`nodus get -l key=value`)."""
    annotations: dict[str, str] = Field(default_factory=dict)
    """Free-form notes for people and tools; nodus never acts on them."""

    @field_validator("labels")
    @classmethod
    def _label_keys(cls, value: dict[str, str]) -> dict[str, str]:
        for key in value:
            _check_label_key(key)
        return value


class Resource(SpecModel):
    """The envelope of every kind: `apiVersion`, `kind`, `metadata` and `spec` (status never comes from git)."""

    API_VERSION: ClassVar[str]
    KIND: ClassVar[str]
    SHORT_NAMES: ClassVar[tuple[str, ...]] = ()
    """Abbreviations the CLI accepts (`tj` for TrainingJob)."""
    UPDATABLE_IN_PLACE: ClassVar[tuple[str, ...]] = ()
    """Dotted `spec` paths that may change without replacing the resource; any other change replaces it."""
    RAISE_ONLY: ClassVar[tuple[str, ...]] = ()
    """Dotted `spec` paths of spending caps, which can only be raised: a file lower than the live value (raised by
    `nodus patch`) is drift the plan shows and keeps live, never a lowering (`nodus.reconciler.planning.diff`)."""

    metadata: Metadata
    """Name, project and labels."""

    @property
    def name(self) -> str:
        return self.metadata.name

    @property
    def ref(self) -> str:
        """`Kind/name`, how messages and plans name a resource."""
        return f"{self.KIND}/{self.metadata.name}"

    @classmethod
    def patch_json_schema(cls, schema: dict[str, Any]) -> dict[str, Any]:
        """Adjust the generated JSON Schema where a kind's rules are wider than its model's types."""
        return schema

    def lint(self) -> Iterator[tuple[Loc, str]]:
        """Warnings that do not make the resource invalid (e.g. an image not pinned by digest)."""
        return iter(())
