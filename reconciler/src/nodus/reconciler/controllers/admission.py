"""TrainingJob admission: everything that can be refused before anything runs or costs money.

Who calls it: the TrainingJob controller on every apply (`admit`); `nodus plan` and `apply` before anything is
written, through the controllers' `admit` hook (`apply.refusals` asks the registry): the TrainingJob controller
answers with `trainingjob_refusals`, the AgentGroup one with `agent_group_refusals` (an evaluation group's
Environment). It is pure: the job's document, its runtime's document and the Environments known to the store in,
an `Admission` out.

What it decides, in the seeds' words: the runtime exists (else "did you mean" the closest known runtime); the
runtime can run the job's mode; an Environment-backed run names an Environment that exists at that version and a
runtime that fetches tasks through the attempt API (`spec.environmentTasks: AttemptAPI`; "older runtimes are
rejected before GPU acquisition"); a training run that compares baseline and final holds out at least
`evaluation.minComparisonTasks` tasks (else it could only end in TooFewTasks, once the money is spent); parameters
are merged over the runtime's defaults and checked against its JSON Schema, and a typo such as `learning_rate` is
rejected with the field path (and "did you mean 'learningRate'?" when the schema has a name close to it); the
model is the job's or the runtime's default (a runtime of your own may need none), pinned to a 40-character
revision; a run that exports (`spec.exportTo.volume`) names a ReadWriteOnce Volume of its project that exists
(Ready or not yet: the export waits for it) and a runtime that declares an output at `/nodus/outputs`. Every
refusal's message starts with the field it is about (`spec.runtime: ...`), which `field` holds too, so `nodus
plan` and `apply` can print one located line per problem.
"""

from __future__ import annotations

import dataclasses
import difflib
import re
from collections.abc import Collection, Mapping
from dataclasses import dataclass
from decimal import Decimal
from typing import Any

from nodus.reconciler.controllers.base import AdmissionContext, Refusal
from nodus.reconciler.controllers.data_columns import column_refusals
from nodus.reconciler.controllers.model_volume import model_volume_refusals
from nodus.reconciler.planning.managed import read_catalog
from nodus.reconciler.references import environment_ref, merge, runtime_key, split_ref
from nodus.reconciler.state.records import DEFAULT_PROJECT, ResourceKey, ResourceRecord

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
    refusals: tuple[Refusal, ...] = ()
    """Every problem found, the first of which is `reason`/`message`: what plan and apply print, one line each,
    so a user fixes them in one edit rather than one per plan."""


OUTPUTS_PATH = "/nodus/outputs"
"""The output a runtime must declare for `spec.exportTo`: the folder whose files are exported."""


def admit(
    job: JSONObject,
    runtime: JSONObject | None,
    known: Mapping[ResourceKey, JSONObject],
    runtimes: Collection[ResourceKey] = (),
) -> Admission:
    """Admit or refuse `job` (its normalised document) given its runtime's document and the Environments and
    Volumes known (`known`, by key: the store's and the plan's); `runtimes`, the runtimes that do exist, are
    where a misspelt runtime's "did you mean" comes from."""
    spec = job["spec"]
    key = runtime_key(job)
    if runtime is None:
        detail = f"TrainingRuntime {key.project}/{key.name} does not exist"
        meant = suggest_runtime(str(spec["runtime"]), key, runtimes)
        return _refused("RuntimeNotFound", "spec.runtime", detail + (f"; did you mean {meant}?" if meant else ""))
    runtime_spec = runtime["spec"]
    mode = spec.get("mode", "Train")
    if mode not in runtime_spec.get("modes", ["Train"]):
        return _refused("ModeNotSupported", "spec.mode", f"runtime {key.name} does not support mode {mode}", key)
    env_key: ResourceKey | None = None
    found: list[Admission] = []  # each check below is independent of the others: all of them are said at once
    reference = environment_ref(job)
    if reference is not None:
        env_key, version = reference
        missing = _environment_problem(env_key, version, known)
        too_few = _too_few_held_out(spec)
        if missing is not None:
            found.append(_refused(missing[0], "spec.environment.name", missing[1], key))
        elif too_few is not None:
            found.append(_refused("TooFewHeldOutTasks", too_few[0], too_few[1], key, environment=env_key))
        if runtime_spec.get("environmentTasks") != "AttemptAPI":
            detail = (
                f"runtime {key.name} does not fetch Environment tasks through the attempt API "
                "(spec.environmentTasks: AttemptAPI)"
            )
            found.append(_refused("RuntimeLacksAttemptAPI", "spec.runtime", detail, key))
    parameters = merge(runtime_spec.get("defaults") or {}, spec.get("parameters") or {})
    for path, detail in _schema_problems(runtime_spec.get("parameterSchema") or {"type": "object"}, parameters):
        found.append(_refused("InvalidParameters", path, detail, key, environment=env_key))
    model = spec.get("model") or runtime_spec.get("defaultModel")
    if model and model.get("uri") and "@" not in str(model["uri"]):
        where = "spec.model.uri" if spec.get("model") else f"runtime {key.name}: spec.defaultModel.uri"
        found.append(_refused("ModelNotPinned", where, f"{model['uri']} names no 40-character revision", key))
    export = _export_problem(job, runtime_spec, known)
    if export is not None:
        reason, path, detail = export
        found.append(_refused(reason, path, detail, key, environment=env_key))
    if found:
        every = tuple(Refusal(problem.reason, problem.message) for problem in found)
        return dataclasses.replace(found[0], parameters=parameters, refusals=every)
    return Admission(True, parameters=parameters, runtime=key, environment=env_key, model=model)


def trainingjob_refusals(record: ResourceRecord | None, job: JSONObject, context: AdmissionContext) -> list[Refusal]:
    """The TrainingJob controller's `admit`: `admit` against the plan's runtime and Environments (a misspelt
    runtime's "did you mean" drawn from the plan's, the store's and the managed catalog's runtimes), and a
    spending cap lowered or removed against the stored job (`record`)."""
    planned = context.planned
    runtime = planned.document(runtime_key(job))
    runtimes = _known_runtimes(context) if runtime is None else ()
    verdict = admit(job, runtime, planned.of_kinds("Environment", "Volume"), runtimes)
    found = [] if verdict.admitted else list(verdict.refusals or [Refusal(verdict.reason, verdict.message)])
    lowered = lowered_cap(record, job, context.action)
    if lowered:
        found.append(Refusal("", f"spec.maxCostUSD: {lowered}"))
    return found + column_refusals(job, context) + model_volume_refusals(job, context)


def _known_runtimes(context: AdmissionContext) -> set[ResourceKey]:
    """Every runtime a job could name: the plan's, the store's and the managed catalog's (for "did you mean")."""
    catalog, _ = read_catalog()
    return set(context.planned.of_kinds("TrainingRuntime")) | set(catalog)


def lowered_cap(record: ResourceRecord | None, job: JSONObject, action: str) -> str | None:
    """Why a cap change is refused (a spending cap can only be raised), or None. A replacement starts afresh."""
    if record is None or action == "replace":
        return None
    before = record.spec.get("spec", {}).get("maxCostUSD")
    after = job.get("spec", {}).get("maxCostUSD")
    if before is None:
        return None
    if after is None:
        # Removing the cap on a capped job would lift every limit at once: say so rather than guess.
        return f"a spending cap can only be raised, not removed (it is {before})"
    if Decimal(str(after)) < Decimal(str(before)):
        return f"a spending cap can only be raised (it is {before}; asked for {after})"
    return None


def agent_group_refusals(group: JSONObject, context: AdmissionContext) -> list[Refusal]:
    """The AgentGroup controller's `admit`: an evaluation group's Environment, against the plan's and the store's."""
    verdict = admit_agent_group(group, context.planned.of_kinds("Environment", "Volume"))
    return [] if verdict.admitted else [Refusal(verdict.reason, verdict.message)]


DEFAULT_HELD_OUT_TASKS = 64
"""`spec.environment.heldOutTasks` when left out (the TrainingJob's documented default)."""
DEFAULT_MIN_COMPARISON_TASKS = 16


def _too_few_held_out(spec: JSONObject) -> tuple[str, str] | None:
    """(field, detail) when a training run that compares baseline and final holds out fewer tasks than the
    comparison needs: it would run to the end and only then say TooFewTasks, so it is refused before it starts."""
    evaluation = spec.get("evaluation") or {}
    if spec.get("mode", "Train") != "Train" or not (evaluation.get("baseline", True) and evaluation.get("final", True)):
        return None
    needed = int(evaluation.get("minComparisonTasks") or DEFAULT_MIN_COMPARISON_TASKS)
    given = (spec.get("environment") or {}).get("heldOutTasks")
    held_out = int(given or DEFAULT_HELD_OUT_TASKS)
    if held_out >= needed:
        return None
    comparison = "baseline and final could never be compared (TooFewTasks)"
    if given is None:
        detail = (
            f"{needed} is more than the {held_out} tasks the job holds out (spec.environment.heldOutTasks, default "
            f"{held_out}), so {comparison}; set heldOutTasks to at least {needed}, or lower minComparisonTasks"
        )
        return "spec.evaluation.minComparisonTasks", detail
    detail = (
        f"{held_out} held-out tasks are fewer than spec.evaluation.minComparisonTasks ({needed}), so {comparison}; "
        f"hold out at least {needed}, or lower evaluation.minComparisonTasks"
    )
    return "spec.environment.heldOutTasks", detail


def admit_agent_group(group: JSONObject, known: Mapping[ResourceKey, JSONObject]) -> Admission:
    """Refuse an evaluation AgentGroup whose `spec.evaluation.environment` names no Environment at that version
    (`known`: the store's and the plan's); any other group is admitted (nothing else of it is checked here)."""
    evaluation = (group.get("spec") or {}).get("evaluation")
    if not evaluation:
        return Admission(True)
    project = str((group.get("metadata") or {}).get("project") or DEFAULT_PROJECT)
    reference, _, version = str(evaluation["environment"]).partition("@")
    env_project, name = split_ref(reference, project)
    env_key = ResourceKey("Environment", env_project, name)
    missing = _environment_problem(env_key, version, known)
    if missing is not None:
        return _refused(missing[0], "spec.evaluation.environment", missing[1], environment=env_key)
    return Admission(True, environment=env_key)


def _environment_problem(
    env_key: ResourceKey, version: str, known: Mapping[ResourceKey, JSONObject]
) -> tuple[str, str] | None:
    """(reason, detail) when the Environment `env_key` is not known at `version`; None when it is."""
    found = known.get(env_key)
    if found is None:
        return "EnvironmentNotFound", f"Environment {env_key.project}/{env_key.name} does not exist"
    if found["spec"].get("version") != version:
        detail = f"Environment {env_key.name} is at version {found['spec'].get('version')}, not {version}"
        return "EnvironmentVersionNotFound", detail
    return None


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


def _schema_problems(schema: JSONObject, parameters: JSONObject) -> list[tuple[str, str]]:
    """Every schema violation as (`spec.parameters.<path>`, what is wrong), by path: an unknown name with "did
    you mean" the closest name the schema allows at its level."""
    import jsonschema

    found: list[tuple[str, str]] = []
    for error in jsonschema.Draft202012Validator(schema).iter_errors(parameters):
        path = ".".join(["spec.parameters", *(str(part) for part in error.absolute_path)])
        if error.validator == "additionalProperties" and isinstance(error.instance, Mapping):
            # jsonschema names the unexpected keys only in its message; each goes in a path of its own. The names
            # this level of the schema allows are the candidates for "did you mean".
            known = [str(name) for name in error.schema.get("properties", {})]
            for extra in sorted(set(error.instance) - set(known)):
                suggestion = suggest(str(extra), known)
                why = f"; did you mean {suggestion!r}?" if suggestion else " (the runtime's schema does not allow it)"
                found.append((f"{path}.{extra}", f"unknown parameter{why}"))
            continue
        found.append((path, error.message))
    return sorted(found)


def suggest_runtime(written: str, wanted: ResourceKey, runtimes: Collection[ResourceKey]) -> str | None:
    """The runtime `written` (`nodus/grpo-lor`) was probably meant to be (`nodus/grpo-lora`), spelt the way the
    job would write it (no project prefix for one of the job's own project, as `written` has none), or None.
    `runtimes`: the TrainingRuntimes that exist."""
    spelt = {
        (
            runtime.name
            if "/" not in written and runtime.project == wanted.project
            else f"{runtime.project}/{runtime.name}"
        )
        for runtime in runtimes
        if runtime != wanted
    }
    close = difflib.get_close_matches(written, sorted(spelt), n=1, cutoff=0.75)
    return close[0] if close else None


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
