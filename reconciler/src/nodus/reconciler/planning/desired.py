"""The desired side of a plan: each parsed resource as the normalised document the state store keeps.

Who calls it: `nodus plan` and `nodus apply` (through `desired_from`, after `parse_resources`), and
`nodus.reconciler.planning.diff`, which normalises stored documents with `normalise_observed` before
comparing them.

Why normalise: a person writes `timeout: 30s` or leaves `grading` out; the model fills defaults and
formats values one way. Comparing the model's dump (never the YAML) on both sides means an unchanged spec
never shows a phantom diff, and a stored document written by an older nodus (before a default existed) is
re-read through today's model so a new default is not a change either.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from pydantic import ValidationError

from nodus.errors import PlanError
from nodus.reconciler.state.records import DEFAULT_PROJECT, JSONObject, ResourceKey, ResourceRecord, spec_hash
from nodus.specs.base import Resource
from nodus.specs.parse import Parsed
from nodus.specs.registry import BY_KIND

ENVELOPE_ORDER = ("apiVersion", "kind", "metadata", "spec")
"""The order a document's top-level fields are written in (plan.json reads like the YAML)."""


@dataclass(frozen=True)
class Desired:
    """One resource from the files: its identity, normalised document and where it was written."""

    key: ResourceKey
    document: JSONObject
    """The whole resource minus status, with metadata.project filled in: what `StateStore.put` receives."""
    spec_hash: str
    """`spec_hash(document)`: equal to the stored record's hash exactly when nothing changed."""
    source: str
    """`file:line` of the document, for messages and plans."""
    resource: Resource
    """The validated model (controllers read typed fields from it)."""


def document_of(resource: Resource) -> JSONObject:
    """The normalised document of a resource: defaults filled, values formatted by the model, no status."""
    dump: dict[str, Any] = resource.model_dump(by_alias=True, mode="json", exclude_none=True)
    dump.pop("status", None)
    dump["metadata"] = _with_project(dump.get("metadata") or {})
    return _ordered(dump)


def key_of(document: JSONObject) -> ResourceKey:
    """(kind, project, name) of a normalised document."""
    metadata = document["metadata"]
    return ResourceKey(str(document["kind"]), str(metadata.get("project") or DEFAULT_PROJECT), str(metadata["name"]))


def desired_from(parsed: Iterable[Parsed]) -> list[Desired]:
    """The desired state of parsed resources, in the order read; PlanError when a key is defined twice.

    `parse_resources` already refuses duplicates, but it tells `project: default` and a left-out project
    apart, and both are the same resource here.
    """
    seen: dict[ResourceKey, Desired] = {}
    for item in parsed:
        document = document_of(item.resource)
        desired = Desired(
            key=key_of(document),
            document=document,
            spec_hash=spec_hash(document),
            source=f"{item.source.file}:{item.source.line}",
            resource=item.resource,
        )
        earlier = seen.get(desired.key)
        if earlier is not None:
            raise PlanError(f"{desired.source}: {desired.key}: defined twice: here and at {earlier.source}")
        seen[desired.key] = desired
    return list(seen.values())


def normalise_observed(record: ResourceRecord) -> JSONObject:
    """A stored document as today's model writes it; as stored when the model no longer reads it.

    A document the model refuses (a kind or field that no longer exists) is compared as it is: the plan
    then shows those fields changing, which is the truth.
    """
    cls = BY_KIND.get(record.key.kind)
    if cls is None:
        return record.spec
    try:
        resource = cls.model_validate(record.spec)
    except ValidationError:
        return record.spec
    return document_of(resource)


def _with_project(metadata: JSONObject) -> JSONObject:
    """metadata with `project` right after `name`, DEFAULT_PROJECT when it was left out."""
    if metadata.get("project"):
        return metadata
    out: JSONObject = {}
    for field, value in metadata.items():
        out[field] = value
        if field == "name":
            out["project"] = DEFAULT_PROJECT
    out.setdefault("project", DEFAULT_PROJECT)
    return out


def _ordered(document: JSONObject) -> JSONObject:
    head = {field: document[field] for field in ENVELOPE_ORDER if field in document}
    return head | {field: value for field, value in document.items() if field not in head}
