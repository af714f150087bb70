"""What a document names (a TrainingJob's runtime, Environment, Volumes and Secrets; an endpoint's TrainingJob), what
it produces (a TrainingJob's `exportTo` Volume), and how parameters merge.

Who calls it: admission (`nodus.reconciler.controllers.admission`), the estimator and the price table
(`nodus.reconciler.pricing`), the managed runtimes of a plan (`nodus.reconciler.planning.managed`), the waits and
the SDK. It sits below planning, pricing and the controllers so that each of them reads a job's references the
same way without importing the others: pure functions of documents, nothing read or written.
"""

from __future__ import annotations

import copy
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Literal

from nodus.reconciler.state.records import DEFAULT_PROJECT, ResourceKey

JSONObject = dict[str, Any]


def split_ref(ref: str, default_project: str) -> tuple[str, str]:
    """`[project/]name` -> (project, name)."""
    project, _, name = ref.rpartition("/")
    return (project or default_project), name


def runtime_key(job: JSONObject) -> ResourceKey:
    project = job.get("metadata", {}).get("project") or DEFAULT_PROJECT
    runtime_project, name = split_ref(str(job["spec"]["runtime"]), project)
    return ResourceKey("TrainingRuntime", runtime_project, name)


def environment_ref(job: JSONObject) -> tuple[ResourceKey, str] | None:
    """The (key, version) of the Environment a job trains or evaluates on, or None."""
    environment = job.get("spec", {}).get("environment")
    if not environment:
        return None
    project = job.get("metadata", {}).get("project") or DEFAULT_PROJECT
    reference, _, version = str(environment["name"]).partition("@")
    env_project, name = split_ref(reference, project)
    return ResourceKey("Environment", env_project, name), version


def merge(defaults: Mapping[str, Any], overrides: Mapping[str, Any]) -> JSONObject:
    """Deep merge: mappings merge key by key, anything else in `overrides` wins (lists are replaced)."""
    merged: JSONObject = copy.deepcopy(dict(defaults))
    for name, value in overrides.items():
        if isinstance(value, Mapping) and isinstance(merged.get(name), Mapping):
            merged[name] = merge(merged[name], value)
        else:
            merged[name] = copy.deepcopy(value)
    return merged


# --- what any resource names, and what it produces --------------------------------------------------------------


@dataclass(frozen=True)
class ReferenceField:
    """A field of a kind that names another resource: its dotted path (`[*]` for every item of a list), the kind
    it names, the field beside it that pins a Volume revision, and what a consumer waits for when the named
    resource is being made in the same plan: `self` (the resource itself: an Environment, a TrainingJob), `producers`
    (the TrainingJobs that export into that Volume) or nothing (a Secret is ready once stored)."""

    path: str
    kind: str
    revision: str | None = None
    waits_on: Literal["self", "producers", ""] = ""
    checked: bool = True
    """Whether the plan refuses a name that nothing has (the runtime and the Environment are admission's own)."""


_MODEL_VOLUME = ReferenceField("spec.model.volume.name", "Volume", "spec.model.volume.revision", "producers")
REFERENCE_FIELDS: Mapping[str, tuple[ReferenceField, ...]] = {
    "TrainingJob": (
        ReferenceField("spec.runtime", "TrainingRuntime", checked=False),
        ReferenceField("spec.environment.name", "Environment", waits_on="self", checked=False),
        _MODEL_VOLUME,
        ReferenceField("spec.teacher.volume.name", "Volume", "spec.teacher.volume.revision", "producers"),
        ReferenceField("spec.data.volume", "Volume", "spec.data.revision", "producers"),
        ReferenceField("spec.model.secret", "Secret"),
        ReferenceField("spec.teacher.secret", "Secret"),
        ReferenceField("spec.tracking.mlflow.secret", "Secret"),
        ReferenceField("spec.tracking.wandb.connection", "Secret"),
        ReferenceField("spec.evaluation.endpoint.keySecret", "Secret"),
    ),
    "Job": (ReferenceField("spec.secrets[*]", "Secret"),),
    "InferenceEndpoint": (_MODEL_VOLUME, ReferenceField("spec.model.trainingJob", "TrainingJob", waits_on="self")),
}
"""Every field of every kind that names another resource (a kind left out names none): the plan checks that each
exists (or is made by the same plan), shows what waits for what, and apply launches in that order."""
PRODUCED_FIELDS: Mapping[str, tuple[ReferenceField, ...]] = {
    "TrainingJob": (ReferenceField("spec.exportTo.volume", "Volume"),)
}
"""Fields whose resource writes into another one: a TrainingJob's export commits the Volume's next revision."""


@dataclass(frozen=True)
class Reference:
    """One resource a document names: the field, the key, and the Volume revision pinned (None: the latest)."""

    field: ReferenceField
    key: ResourceKey
    revision: int | None = None
    path: str = ""
    """The field as a message names it: `spec.data.volume`, `spec.secrets[1]`."""


def references(
    document: JSONObject, fields: Mapping[str, tuple[ReferenceField, ...]] = REFERENCE_FIELDS
) -> list[Reference]:
    """What `document` names, field by field (`PRODUCED_FIELDS` for what it writes into), in the table's order."""
    kind = str(document.get("kind") or "")
    project = str((document.get("metadata") or {}).get("project") or DEFAULT_PROJECT)
    found = []
    for field in fields.get(kind, ()):
        revisions = _values(document, field.revision) if field.revision else []
        for index, value in enumerate(_values(document, field.path)):
            # `[project/]name[@version]`: an Environment's version is admission's to check, not a revision.
            owner, name = split_ref(str(value).partition("@")[0], project)
            revision = revisions[index] if index < len(revisions) else None
            number = int(revision) if isinstance(revision, int | str) and str(revision).isdigit() else None
            path = field.path.replace("[*]", f"[{index}]")  # one list per field at most: the item's index
            found.append(Reference(field, ResourceKey(field.kind, owner, name), number, path))
    return found


def produced(document: JSONObject) -> list[ResourceKey]:
    """The resources `document` writes into (a TrainingJob's `spec.exportTo.volume`)."""
    return [reference.key for reference in references(document, PRODUCED_FIELDS)]


def _values(document: Any, path: str) -> list[Any]:
    """The values at a dotted path, `[*]` standing for every item of a list; absent and null values left out."""
    current: list[Any] = [document]
    for part in path.split("."):
        each = part.endswith("[*]")
        name = part.removesuffix("[*]")
        current = [item.get(name) for item in current if isinstance(item, Mapping)]
        if each:
            current = [item for found in current if isinstance(found, list) for item in found]
        current = [item for item in current if item is not None and item != ""]
    return current
