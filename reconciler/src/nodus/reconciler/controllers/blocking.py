"""Why a Pending resource can never leave Pending by itself: the `blocked_by` hooks of the controllers.

Who calls it: the Environment, TrainingJob and Job controllers' `blocked_by` (`controllers/*_controller.py`),
which `nodus.reconciler.waiting` asks through the registry, so a wait ends at once rather than at its timeout
when only another apply could move the resource on.
"""

from __future__ import annotations

from nodus.reconciler.controllers.producers import blocked_producer
from nodus.reconciler.references import environment_ref
from nodus.reconciler.state.records import ResourceKey, ResourceRecord, StateStore
from nodus.specs.status_names import Phase, Reason

NOT_BUILT = frozenset({Reason.IMAGE_NOT_BUILT, Reason.IMAGE_MISSING})
"""An Environment's reasons that only a build clears (`nodus apply --build` or nodus-build; a wait builds nothing)."""


def phase_of(record: ResourceRecord) -> str:
    return str(record.status.get("phase") or Phase.PENDING)


def environment_not_built(record: ResourceRecord) -> str | None:
    """An Environment Pending on a build nothing will run while waiting."""
    if phase_of(record) != Phase.PENDING or record.status.get("reason") not in NOT_BUILT:
        return None
    message = str(record.status.get("message") or record.status.get("reason") or "")
    return f"{message} (nothing builds it while waiting)"


def run_blocked(record: ResourceRecord, store: StateStore) -> str | None:
    """A TrainingJob or Job Pending on a model not in the local cache (nodus never downloads weights), on a Budget its
    first hold would pass, on an Environment or Volume that Failed or that nothing builds, or on the export of a
    TrainingJob that failed or is Suspended."""
    if phase_of(record) != Phase.PENDING:
        return None
    reason = record.status.get("reason")
    message = str(record.status.get("message") or reason or "")
    if reason in (Reason.MODEL_NOT_CACHED, Reason.BUDGET_EXCEEDED):  # a cache or a Budget only a person changes
        return message
    if reason == Reason.ENVIRONMENT_NOT_READY:
        return _dependency(store, _environment_key(record))
    if reason == Reason.VOLUME_NOT_READY:
        return _dependency(store, _volume_key(record))
    if reason == Reason.WAITING_FOR:  # on another job's export: blocked once that job failed or was suspended
        return blocked_producer(record, store)
    return None


def _dependency(store: StateStore, key: ResourceKey | None) -> str | None:
    """Why the dependency `key` will not become Ready (Failed, or not built), or None."""
    found = None if key is None else store.get(key)
    if found is None:
        return None
    phase = phase_of(found)
    reason = found.status.get("reason")
    detail = str(found.status.get("message") or "")
    if phase == Phase.FAILED:
        return f"{key} is Failed" + (f" ({reason}: {detail})" if reason else f" ({detail})" if detail else "")
    if phase == Phase.PENDING and reason in NOT_BUILT:
        return f"{key} is not built ({reason}): {detail}" if detail else f"{key} is not built ({reason})"
    return None


def _environment_key(record: ResourceRecord) -> ResourceKey | None:
    reference = environment_ref(record.spec)
    return None if reference is None else reference[0]


def _volume_key(record: ResourceRecord) -> ResourceKey | None:
    model = (record.spec.get("spec") or {}).get("model") or {}
    volume = model.get("volume") if isinstance(model, dict) else None
    if not isinstance(volume, dict) or not volume.get("name"):
        return None
    return ResourceKey("Volume", record.key.project, str(volume["name"]))
