"""A run's input Volume that another TrainingJob is still to write: the run waits for it, or fails with it.

Who calls it: the TrainingJob controller (`controllers/trainingjob.py`: the model, teacher and data Volumes of a
generation not launched yet) and `controllers/blocking.py` (a wait ends at once when the producer can no longer
export). A producer is a TrainingJob of the project whose `spec.exportTo.volume` is that Volume
(`nodus.reconciler.references.produced`). While its current generation has not committed its export, the consumer is
Pending with reason `WaitingFor`, naming it; once it failed (or was cancelled, or its export failed) the consumer is
Failed with `DependencyFailed`, naming it and why. A pinned revision the Volume already has waits for nothing.
"""

from __future__ import annotations

from dataclasses import dataclass

from nodus.reconciler.controllers.admission import suggest
from nodus.reconciler.references import produced, references
from nodus.reconciler.state.records import JSONObject, ResourceKey, ResourceRecord, StateStore
from nodus.specs.status_names import Phase, Reason

ENDED_BADLY = frozenset({Phase.FAILED, Phase.CANCELLED})
ROUTINE = frozenset({Reason.LAUNCHED, Reason.REPLACED, Reason.RESUMED})


@dataclass(frozen=True)
class Producer:
    """A TrainingJob that exports into a Volume, and where its current generation's export stands."""

    record: ResourceRecord
    state: str
    """`exported` (its export is committed), `failed` (it or its export failed: it will not export) or `pending`."""
    why: str = ""
    """For `failed`: `Failed (TrainerFailed: ...)`; for `pending`: its phase (and stage)."""


def producers(store: StateStore, volume: ResourceKey, consumer: ResourceKey | None = None) -> list[Producer]:
    """The TrainingJobs of the Volume's project (other than `consumer`) that export into `volume`, sorted by name."""
    found = []
    for record in store.list("TrainingJob", volume.project):
        if record.key != consumer and volume in produced(record.spec):
            found.append(export_state(record))
    return sorted(found, key=lambda producer: producer.record.key.name)


def export_state(record: ResourceRecord) -> Producer:
    """Where a producer's current generation stands: exported, failed (the run or its export), or still to come."""
    status = record.status
    phase = str(status.get("phase") or Phase.PENDING)
    detail = ": ".join(str(part) for part in (status.get("reason"), status.get("message")) if part)
    if phase in ENDED_BADLY:
        return Producer(record, "failed", f"{phase}" + (f" ({detail})" if detail else ""))
    if phase == Phase.SUCCEEDED:
        generation = int(status.get("launchGeneration") or record.generation)
        export = status.get("export")
        if isinstance(export, dict) and export.get("generation") == generation:
            if export.get("phase") == Phase.EXPORTED:
                return Producer(record, "exported")
            if export.get("phase") == Phase.FAILED:
                return Producer(record, "failed", f"Succeeded, but its export failed ({export.get('message', '')})")
        return Producer(record, "pending", "Succeeded, exporting")
    # `Running, Training`; `Pending, ModelNotCached` (why it has not started; not the routine Launched or Replaced)
    said = status.get("stage") or (status.get("reason") if status.get("reason") not in ROUTINE else None)
    return Producer(record, "pending", f"{phase}, {said}" if said else phase)


def producer_status(
    record: ResourceRecord, store: StateStore, field: str, name: str, revision: int | None
) -> JSONObject | None:
    """The status that holds `record` (a generation not launched yet) while the Volume `name` it reads through `field`
    is still to be written by a producer: Pending `WaitingFor`, or Failed `DependencyFailed` once a producer failed.
    None when nothing is awaited (no producer, every one exported, or the pinned `revision` is there already)."""
    key = ResourceKey("Volume", record.key.project, name)
    volume = store.get(key)
    ready = volume is not None and volume.status.get("phase") == Phase.READY
    if revision is not None and ready and volume is not None and revision <= int(volume.status.get("revision") or 0):
        return None
    found = producers(store, key, record.key)
    wanted = f"Volume {name}" + (f" revision {revision}" if revision is not None else "")
    pending = [producer for producer in found if producer.state == "pending"]
    if pending:
        first = pending[0]
        message = f"{field}: waits for TrainingJob {first.record.key.name} to export {wanted} (it is {first.why})"
        return {"phase": Phase.PENDING, "reason": Reason.WAITING_FOR, "message": message}
    failed = [producer for producer in found if producer.state == "failed"]
    if failed and not any(producer.state == "exported" for producer in found):
        first = failed[0]
        message = (
            f"{field}: TrainingJob {first.record.key.name}, which was to export {wanted}, is {first.why}; fix it and "
            "apply again (or pin a revision the Volume has)"
        )
        return {"phase": Phase.FAILED, "reason": Reason.DEPENDENCY_FAILED, "message": message}
    return None


def missing_volume_status(record: ResourceRecord, store: StateStore, field: str, name: str) -> JSONObject:
    """Failed `VolumeNotFound` for a Volume the run names that no resource is (deleted since the plan checked it),
    with the name it was probably meant to be."""
    names = [volume.key.name for volume in store.list("Volume", record.key.project)]
    meant = suggest(name, names)
    message = f"{field}: Volume {name} does not exist" + (f"; did you mean {meant}?" if meant else "")
    return {"phase": Phase.FAILED, "reason": Reason.VOLUME_NOT_FOUND, "message": message}


def blocked_producer(record: ResourceRecord, store: StateStore) -> str | None:
    """Why a consumer Pending `WaitingFor` can never launch by itself: its producer failed (the next reconcile fails
    it, DependencyFailed) or is Suspended (only a patch resumes it); None while the producer still goes on."""
    for key in _awaited_volumes(record):
        for producer in producers(store, key, record.key):
            phase = producer.record.status.get("phase")
            if producer.state == "failed" or phase == Phase.SUSPENDED:
                why = (
                    producer.why
                    if producer.state == "failed"
                    else f"Suspended ({producer.record.status.get('reason')})"
                )
                return f"TrainingJob {producer.record.key.name}, which was to export Volume {key.name}, is {why}"
    return None


def _awaited_volumes(record: ResourceRecord) -> list[ResourceKey]:
    return [reference.key for reference in references(record.spec) if reference.field.waits_on == "producers"]
