"""A TrainingJob's model (and teacher) from a Volume revision, checked at plan time: a revision that holds nothing a
trainer can load is refused before anything runs, naming the file, the resource and the field.

Who calls it: the TrainingJob controller's admission (`trainingjob_refusals`: `nodus plan`, `apply` and the dry run
before anything is written), with the project's folder. It reads only: the Volume's record (the revision named, else
its latest) and that revision's folder (`nodus.reconciler.volume_models`). A revision not there yet (a run of the same
plan exports it) is not refused here. A LoRA adapter is a model (its base plus the adapter, merged by the trainer);
as a distillation's teacher it is refused, since only `spec.model` is merged.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from nodus.reconciler import volume_models
from nodus.reconciler.controllers.base import AdmissionContext, Refusal
from nodus.reconciler.project import Project
from nodus.reconciler.state.records import DEFAULT_PROJECT, ResourceKey
from nodus.specs.status_names import Reason


def model_volume_refusals(job: Mapping[str, Any], context: AdmissionContext) -> list[Refusal]:
    """Why `spec.model.volume` or `spec.teacher.volume` names a revision no trainer can use; empty when they can."""
    spec = job.get("spec") or {}
    if context.project_root is None:
        return []
    project_name = str((job.get("metadata") or {}).get("project") or DEFAULT_PROJECT)
    found = []
    for field in ("model", "teacher"):
        named = spec.get(field)
        volume = named.get("volume") if isinstance(named, Mapping) else None
        if not isinstance(volume, Mapping) or not volume.get("name"):
            continue
        refusal = _refusal(field, volume, project_name, context)
        if refusal is not None:
            found.append(refusal)
    return found


def _refusal(field: str, volume: Mapping[str, Any], project_name: str, context: AdmissionContext) -> Refusal | None:
    name = str(volume["name"])
    stored = context.planned.store.get(ResourceKey("Volume", project_name, name))
    revision = int(volume.get("revision") or (stored.status.get("revision") if stored else 0) or 0)
    if not revision:
        return None
    project = Project.find(context.project_root)
    where = f"spec.{field}.volume"
    try:
        resolved = volume_models.resolve(project, project_name, name, revision)
    except volume_models.UnusableModelError as exc:
        return Refusal(exc.reason, f"{where}: {exc.message}" + (f"; {exc.hint}" if exc.hint else ""))
    if field == "teacher" and resolved is not None and resolved.adapters:
        return Refusal(
            Reason.MODEL_NOT_FOUND,
            f"{where}: Volume {name} revision {revision} holds a LoRA adapter over {resolved.base_name}; a teacher "
            "must be a full model: train the teacher with full fine-tuning, or export a merged model",
        )
    return None
