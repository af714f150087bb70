"""Every resource a document names, checked at plan time: a missing Volume, Secret or TrainingJob (or a pinned Volume
revision nothing will make) is a refusal naming the field, with "did you mean" and the command that makes it exist.

Who calls it: `nodus.reconciler.apply.refusals` for every kind, so `nodus plan`, `apply` and the dry run refuse the
same names before anything is written. The fields are `nodus.reconciler.references.REFERENCE_FIELDS`; the runtime
and the Environment are admission's own (`controllers/admission.py`, with their versions). A name another resource
of the same plan makes is not missing: a Volume declared in the repo, a revision a TrainingJob exports.
"""

from __future__ import annotations

from collections.abc import Mapping

from nodus.reconciler.controllers.admission import suggest
from nodus.reconciler.controllers.base import AdmissionContext, Refusal
from nodus.reconciler.references import Reference, produced, references
from nodus.reconciler.state.records import JSONObject, ResourceKey
from nodus.specs.status_names import Phase, Reason

MAKES: Mapping[str, str] = {
    "Volume": "add a Volume {name} (kind: Volume) to the repo, nodus apply it and upload: nodus cp -r DIR vol/{name}:",
    "Secret": "add a Secret {name} (kind: Secret, spec.keys) to the repo and nodus apply it",
    "TrainingJob": "add a TrainingJob {name} to the repo and nodus apply it",
}
"""How a user makes a resource of each kind exist (the end of a refusal's line)."""
NOT_FOUND: Mapping[str, str] = {
    "Volume": Reason.VOLUME_NOT_FOUND,
    "Secret": Reason.SECRET_NOT_FOUND,
    "TrainingJob": Reason.TRAINING_JOB_NOT_FOUND,
}


def reference_refusals(document: JSONObject, context: AdmissionContext) -> list[Refusal]:
    """Why the names in `document` cannot be found, one refusal per field (`spec.data.volume: Volume chatz does not
    exist; did you mean chats?`), against the plan's and the store's resources."""
    found: list[Refusal] = []
    for reference in references(document):
        if not reference.field.checked:
            continue
        target = context.planned.document(reference.key)
        if target is None:
            found.append(_missing(reference, context))
        elif reference.revision is not None:
            found += _missing_revision(reference, document, context)
    return found


def _missing(reference: Reference, context: AdmissionContext) -> Refusal:
    key = reference.key
    names = [other.name for other in context.planned.of_kinds(key.kind) if other.project == key.project]
    meant = suggest(key.name, [name for name in names if name != key.name])
    detail = f"{reference.path}: {key.kind} {key.name} does not exist"
    make = MAKES.get(key.kind, "add it to the repo and nodus apply it").format(name=key.name)
    text = f"{detail}; did you mean {meant}? (or {make})" if meant else f"{detail}: {make}"
    return Refusal(NOT_FOUND.get(key.kind, f"{key.kind}NotFound"), text)


def _missing_revision(reference: Reference, document: JSONObject, context: AdmissionContext) -> list[Refusal]:
    """A pinned revision the stored, Ready Volume does not have yet, that no TrainingJob (of the plan or the store)
    exports into it: nothing but an upload could make it."""
    key, wanted = reference.key, reference.revision
    record = context.planned.store.get(key)
    if record is None or record.status.get("phase") != Phase.READY or wanted is None:
        return []
    latest = int(record.status.get("revision") or 0)
    if wanted <= latest or _producers(key, document, context):
        return []
    path = reference.field.revision or reference.field.path
    detail = (
        f"{path}: Volume {key.name} has no revision {wanted} (its latest is {latest}) and no TrainingJob exports to "
        f"it (spec.exportTo.volume): upload one with nodus cp -r DIR vol/{key.name}:, or pin revision {latest}"
    )
    return [Refusal(Reason.VOLUME_REVISION_NOT_FOUND, detail)]


def _producers(volume: ResourceKey, document: JSONObject, context: AdmissionContext) -> list[ResourceKey]:
    """The other TrainingJobs, of the plan or the store, whose export writes into `volume`."""
    jobs = context.planned.of_kinds("TrainingJob")
    own = document.get("metadata") or {}
    return [
        key
        for key, job in jobs.items()
        if volume in produced(job) and not (key.name == own.get("name") and key.kind == document.get("kind"))
    ]
