"""TrainingJob admission: everything that can be refused before anything runs or costs money.

Who calls it: the TrainingJob controller on every apply (and `nodus apply --dry-run`, later). It is pure: the
job's document, its runtime's document and the Environments known to the store in, an `Admission` out.

What it decides, in the seeds' words: the runtime exists; the runtime can run the job's mode; an
Environment-backed run names an Environment that exists at that version and a runtime that fetches tasks
through the attempt API (`spec.environmentTasks: AttemptAPI`; "older runtimes are rejected before GPU
acquisition"); parameters are merged over the runtime's defaults and checked against its JSON Schema, and a
typo such as `learning_rate` is rejected with the field path; the model is the job's or the runtime's
default, pinned to a 40-character revision.
"""

from __future__ import annotations

import copy
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from nodus.reconciler.state.records import DEFAULT_PROJECT, ResourceKey

JSONObject = dict[str, Any]


@dataclass(frozen=True)
class Admission:
    """The verdict: admitted with the merged parameters, or refused with a reason (CamelCase) and a message."""

    admitted: bool
    reason: str = ""
    message: str = ""
    parameters: JSONObject = field(default_factory=dict)
    runtime: ResourceKey | None = None
    environment: ResourceKey | None = None
    model: JSONObject | None = None


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


def admit(job: JSONObject, runtime: JSONObject | None, environments: Mapping[ResourceKey, JSONObject]) -> Admission:
    """Admit or refuse `job` (its normalised document) given its runtime's document and the Environments."""
    spec = job["spec"]
    key = runtime_key(job)
    if runtime is None:
        return Admission(False, "RuntimeNotFound", f"TrainingRuntime {key.project}/{key.name} does not exist")
    runtime_spec = runtime["spec"]
    mode = spec.get("mode", "Train")
    if mode not in runtime_spec.get("modes", ["Train"]):
        return Admission(False, "ModeNotSupported", f"runtime {key.name} does not support mode {mode}", runtime=key)
    env_key: ResourceKey | None = None
    reference = environment_ref(job)
    if reference is not None:
        env_key, version = reference
        found = environments.get(env_key)
        if found is None:
            return Admission(
                False, "EnvironmentNotFound", f"Environment {env_key.project}/{env_key.name} does not exist"
            )
        if found["spec"].get("version") != version:
            return Admission(
                False,
                "EnvironmentVersionNotFound",
                f"Environment {env_key.name} is at version {found['spec'].get('version')}, not {version}",
            )
        if runtime_spec.get("environmentTasks") != "AttemptAPI":
            return Admission(
                False,
                "RuntimeLacksAttemptAPI",
                f"runtime {key.name} does not fetch Environment tasks through the attempt API "
                "(spec.environmentTasks: AttemptAPI)",
            )
    parameters = merge(runtime_spec.get("defaults") or {}, spec.get("parameters") or {})
    problem = _schema_problem(runtime_spec.get("parameterSchema") or {"type": "object"}, parameters)
    if problem is not None:
        return Admission(False, "InvalidParameters", problem, runtime=key, environment=env_key)
    model = spec.get("model") or runtime_spec.get("defaultModel")
    if model and model.get("uri") and "@" not in str(model["uri"]):
        return Admission(False, "ModelNotPinned", f"spec.model.uri {model['uri']} names no 40-character revision")
    return Admission(True, parameters=parameters, runtime=key, environment=env_key, model=model)


def _schema_problem(schema: JSONObject, parameters: JSONObject) -> str | None:
    """The first schema violation as `spec.parameters.<path>: <message>`, or None."""
    import jsonschema

    validator = jsonschema.Draft202012Validator(schema)
    error = jsonschema.exceptions.best_match(validator.iter_errors(parameters))
    if error is None:
        return None
    path = ".".join(["spec.parameters", *(str(part) for part in error.absolute_path)])
    if error.validator == "additionalProperties":
        # jsonschema names the unexpected keys only in its message; put the first one in the path.
        extra = sorted(set(error.instance) - set(error.schema.get("properties", {})))
        if extra:
            return f"{path}.{extra[0]}: unknown parameter (the runtime's schema does not allow it)"
    return f"{path}: {error.message}"
