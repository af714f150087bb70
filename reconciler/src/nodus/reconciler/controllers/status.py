"""Writing a controller's status: conditions derived from it, and an event for every change people care about.

Who calls it: `nodus.reconciler.apply` after each controller pass and `nodus.reconciler.refresh` after
copying a running job's status. Events (`nodus describe` shows them) are added when the phase, the reason or
the stage changes (`stage_events`, from what the job itself reported, so no stage is missed between two
looks); a repeat of the same event only raises its count (the store deduplicates).
"""

from __future__ import annotations

from nodus.reconciler.controllers.coverage import UNSUPPORTED_PHASE
from nodus.reconciler.state.records import Event, JSONObject, ResourceRecord, StateStore

ADMISSION_REASONS = frozenset(
    {
        "RuntimeNotFound",
        "ModeNotSupported",
        "EnvironmentNotFound",
        "EnvironmentVersionNotFound",
        "RuntimeLacksAttemptAPI",
        "InvalidParameters",
        "ModelNotPinned",
        "VolumeNotFound",
        "VolumeNotWritable",
        "RuntimeLacksOutputs",
        "TooFewHeldOutTasks",
    }
)
WARNING_PHASES = frozenset({"Failed", "Suspended", UNSUPPORTED_PHASE})


def conditions(kind: str, status: JSONObject) -> list[JSONObject]:
    """kubectl-style conditions of a TrainingJob or Environment status (no timestamps: stable between passes)."""
    phase, reason = status.get("phase"), status.get("reason", "")
    message = status.get("message", "")
    if kind == "Environment":
        ready = phase == "Ready"
        return [_condition("Ready", ready, "" if ready else reason, "" if ready else message)]
    if kind != "TrainingJob":
        return []
    admitted = reason not in ADMISSION_REASONS
    found = [_condition("Admitted", admitted, "" if admitted else reason, "" if admitted else message)]
    if admitted:
        waiting = reason == "EnvironmentNotReady"
        found.append(_condition("EnvironmentReady", not waiting, reason if waiting else "", message if waiting else ""))
    found.append(_condition("Succeeded", phase == "Succeeded", reason if phase in ("Failed", "Cancelled") else "", ""))
    if phase == "Suspended":
        found.append(_condition("Suspended", True, reason, message))
    export = status.get("export")
    if isinstance(export, dict):
        # The seeds' `Exported` condition: the exact Volume revision the outputs were committed to.
        done = export.get("phase") == "Exported"
        what = f"Volume {export.get('volume')} revision {export.get('revision')}" if done else export.get("message", "")
        found.append(_condition("Exported", done, "" if done else str(export.get("reason", "")), str(what)))
    return found


def _condition(kind: str, value: bool, reason: str, message: str) -> JSONObject:
    condition: JSONObject = {"type": kind, "status": "True" if value else "False"}
    if reason:
        condition["reason"] = reason
    if message:
        condition["message"] = message
    return condition


def write_status(store: StateStore, record: ResourceRecord, status: JSONObject) -> bool:
    """Store `status` (with its conditions) if it changed, adding events for what changed; True if written."""
    status = {**status, "conditions": conditions(record.key.kind, status)}
    if status == record.status:
        return False
    store.set_status(record.key, status)
    before = record.status
    phase, reason = status.get("phase"), status.get("reason")
    if (phase, reason) != (before.get("phase"), before.get("reason")):
        kind = "Warning" if phase in WARNING_PHASES else "Normal"
        text = status.get("message") or f"{record.key.kind} is {phase}"
        store.add_event(Event(record.key, kind, str(reason or phase), str(text)))
    return True


def stage_events(store: StateStore, record: ResourceRecord, reported: list[JSONObject]) -> JSONObject:
    """An event per stage the job reported since the last look (`reported`: the executor's recent events),
    so a stage passed between two looks is not missed. Returns the watermark fields to keep in status."""
    seen_at = float(record.status.get("eventsSeenAt") or 0.0)
    stage = record.status.get("stageSeen")
    for event in sorted(reported, key=lambda item: float(item.get("at") or 0.0)):
        at = float(event.get("at") or 0.0)
        if at <= seen_at:
            continue
        seen_at = at
        if event.get("stage") and event["stage"] != stage:
            stage = event["stage"]
            store.add_event(Event(record.key, "Normal", "Stage", f"stage {stage}", at=at))
    return {"eventsSeenAt": seen_at, "stageSeen": stage} if stage else {"eventsSeenAt": seen_at}
