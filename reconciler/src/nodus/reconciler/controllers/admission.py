"""TrainingJob admission: everything that can be refused before anything runs or costs money.

Who calls it: the TrainingJob controller on every apply (and `nodus apply --dry-run`, later). It is pure: the
job's document, its runtime's document and the Environments known to the store in, an `Admission` out.

What it decides, in the seeds' words: the runtime exists; the runtime can run the job's mode; an
Environment-backed run names an Environment that exists at that version and a runtime that fetches tasks
through the attempt API (`spec.environmentTasks: AttemptAPI`; "older runtimes are rejected before GPU
acquisition"); parameters are merged over the runtime's defaults and checked against its JSON Schema, and a
typo such as `learning_rate` is rejected with the field path (and "did you mean 'learningRate'?" when the
schema has a name close to it); the model is the job's or the runtime's default, pinned to a 40-character
revision; a run that exports (`spec.exportTo.volume`) names a ReadWriteOnce Volume of its project that exists
(Ready or not yet: the export waits for it) and a runtime that declares an output at `/nodus/outputs`. Every
refusal's message starts with the field it is about (`spec.runtime: ...`), which `field`
holds too, so `nodus plan` and `apply` can print one located line per problem.
"""

from __future__ import annotations

import copy
import dataclasses
import difflib
import re
from collections.abc import Collection, Mapping
from dataclasses import dataclass
from typing import Any

from nodus.reconciler.state.records import DEFAULT_PROJECT, ResourceKey

JSONObject = dict[str, Any]


@dataclass(frozen=True)
class Admission:
    """The verdict: admitted with the merged parameters, or refused with a reason (CamelCase) and a message."""

    admitted: bool
    reason: str = ""
    message: str = ""
    """`<field>: <what is wrong>`."""
    field: str = ""
    """The field the refusal is about, e.g. `spec.parameters.learning_rate`."""
    parameters: JSONObject = dataclasses.field(default_factory=dict)
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


OUTPUTS_PATH = "/nodus/outputs"
"""The output a runtime must declare for `spec.exportTo`: the folder whose files are exported."""


def admit(job: JSONObject, runtime: JSONObject | None, known: Mapping[ResourceKey, JSONObject]) -> Admission:
    """Admit or refuse `job` (its normalised document) given its runtime's document and the Environments and
    Volumes known (`known`, by key: the store's and the plan's)."""
    spec = job["spec"]
    key = runtime_key(job)
    if runtime is None:
        return _refused("RuntimeNotFound", "spec.runtime", f"TrainingRuntime {key.project}/{key.name} does not exist")
    runtime_spec = runtime["spec"]
    mode = spec.get("mode", "Train")
    if mode not in runtime_spec.get("modes", ["Train"]):
        return _refused("ModeNotSupported", "spec.mode", f"runtime {key.name} does not support mode {mode}", key)
    env_key: ResourceKey | None = None
    reference = environment_ref(job)
    if reference is not None:
        env_key, version = reference
        found = known.get(env_key)
        if found is None:
            detail = f"Environment {env_key.project}/{env_key.name} does not exist"
            return _refused("EnvironmentNotFound", "spec.environment.name", detail, key)
        if found["spec"].get("version") != version:
            detail = f"Environment {env_key.name} is at version {found['spec'].get('version')}, not {version}"
            return _refused("EnvironmentVersionNotFound", "spec.environment.name", detail, key)
        if runtime_spec.get("environmentTasks") != "AttemptAPI":
            detail = (
                f"runtime {key.name} does not fetch Environment tasks through the attempt API "
                "(spec.environmentTasks: AttemptAPI)"
            )
            return _refused("RuntimeLacksAttemptAPI", "spec.runtime", detail, key)
    parameters = merge(runtime_spec.get("defaults") or {}, spec.get("parameters") or {})
    problem = _schema_problem(runtime_spec.get("parameterSchema") or {"type": "object"}, parameters)
    if problem is not None:
        path, detail = problem
        return _refused("InvalidParameters", path, detail, key, environment=env_key)
    model = spec.get("model") or runtime_spec.get("defaultModel")
    if model and model.get("uri") and "@" not in str(model["uri"]):
        where = "spec.model.uri" if spec.get("model") else f"runtime {key.name}: spec.defaultModel.uri"
        return _refused("ModelNotPinned", where, f"{model['uri']} names no 40-character revision", key)
    export = _export_problem(job, runtime_spec, known)
    if export is not None:
        reason, path, detail = export
        return _refused(reason, path, detail, key, environment=env_key)
    return Admission(True, parameters=parameters, runtime=key, environment=env_key, model=model)


def _export_problem(
    job: JSONObject, runtime_spec: JSONObject, known: Mapping[ResourceKey, JSONObject]
) -> tuple[str, str, str] | None:
    """(reason, field, detail) when `spec.exportTo` cannot be honoured; None when it can (or is not set)."""
    export = job["spec"].get("exportTo")
    if not export:
        return None
    project = str((job.get("metadata") or {}).get("project") or DEFAULT_PROJECT)
    volume = known.get(ResourceKey("Volume", project, str(export["volume"])))
    if volume is None:
        return "VolumeNotFound", "spec.exportTo.volume", f"Volume {project}/{export['volume']} does not exist"
    mode = (volume.get("spec") or {}).get("accessMode", "ReadWriteOnce")
    if mode != "ReadWriteOnce":
        detail = f"Volume {export['volume']} is {mode}; an export writes a new revision, so it must be ReadWriteOnce"
        return "VolumeNotWritable", "spec.exportTo.volume", detail
    paths = [str(output.get("path")) for output in runtime_spec.get("outputs") or []]
    if OUTPUTS_PATH not in paths:
        detail = f"the runtime declares no output at {OUTPUTS_PATH} (spec.outputs), so there is nothing to export"
        return "RuntimeLacksOutputs", "spec.exportTo", detail
    return None


def _refused(
    reason: str, path: str, detail: str, runtime: ResourceKey | None = None, *, environment: ResourceKey | None = None
) -> Admission:
    return Admission(False, reason, f"{path}: {detail}", field=path, runtime=runtime, environment=environment)


def _schema_problem(schema: JSONObject, parameters: JSONObject) -> tuple[str, str] | None:
    """The first schema violation as (`spec.parameters.<path>`, what is wrong), or None."""
    import jsonschema

    validator = jsonschema.Draft202012Validator(schema)
    error = jsonschema.exceptions.best_match(validator.iter_errors(parameters))
    if error is None:
        return None
    path = ".".join(["spec.parameters", *(str(part) for part in error.absolute_path)])
    if error.validator == "additionalProperties" and isinstance(error.instance, Mapping):
        # jsonschema names the unexpected keys only in its message; put the first one in the path. The
        # names this level of the schema allows are the candidates for "did you mean".
        known = [str(name) for name in error.schema.get("properties", {})]
        extra = sorted(set(error.instance) - set(known))
        if extra:
            suggestion = suggest(str(extra[0]), known)
            if suggestion is not None:
                return f"{path}.{extra[0]}", f"unknown parameter; did you mean {suggestion!r}?"
            return f"{path}.{extra[0]}", "unknown parameter (the runtime's schema does not allow it)"
    return path, error.message


def suggest(name: str, known: Collection[str]) -> str | None:
    """The allowed name `name` was probably meant to be: its camelCase spelling (parameters are camelCase,
    Python habits write snake_case), the same name in other capitals, else the closest one if close."""
    camel = re.sub(r"[_-]+([a-zA-Z0-9])", lambda match: match.group(1).upper(), name.strip("_-"))
    if camel in known:
        return camel
    folded = {candidate.lower(): candidate for candidate in known}
    for spelling in (name.lower(), camel.lower(), name.replace("_", "").replace("-", "").lower()):
        if spelling in folded:
            return folded[spelling]
    close = difflib.get_close_matches(name, list(known), n=1)
    return close[0] if close else None
