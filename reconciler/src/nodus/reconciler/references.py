"""What a TrainingJob document names (its runtime, its Environment at a version) and how parameters merge.

Who calls it: admission (`nodus.reconciler.controllers.admission`), the estimator and the price table
(`nodus.reconciler.pricing`), the managed runtimes of a plan (`nodus.reconciler.planning.managed`), the waits and
the SDK. It sits below planning, pricing and the controllers so that each of them reads a job's references the
same way without importing the others: pure functions of documents, nothing read or written.
"""

from __future__ import annotations

import copy
from collections.abc import Mapping
from typing import Any

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
