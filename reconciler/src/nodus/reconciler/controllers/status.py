"""Writing a controller's status: conditions derived from it, and an event for every change people care about.

Who calls it: `nodus.reconciler.apply` after each controller pass and `nodus.reconciler.refresh` after
copying a running job's status. Events (`nodus describe` shows them) are added when the phase, the reason or
the stage changes: the stage from what the job itself reported (`reported`, the executor's recent events), so
no stage is missed between two looks.

Once per change, whichever command looks: the job's events already recorded are marked by a watermark in the
record's status (`eventsSeenAt`, `stageSeen`) that `write_status` owns. It reads the stored status again, adds
only what is newer than the stored watermark and writes the events, the status and the moved watermark in one
transaction that fails if another writer moved the status meanwhile (and is then tried again on what that one
wrote). So a caller that builds a status without the watermark (an apply pass), or two commands looking at once
(`nodus get` beside `nodus controller`), never record a stage twice.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

from nodus.reconciler.session.summary import GRADING_FAILURES, failures_message
from nodus.reconciler.state.records import Conflict, Event, JSONObject, ResourceRecord, StateStore
from nodus.specs.status_names import ADMISSION_REASONS, ConditionType, Phase, Reason

WARNING_PHASES = frozenset({Phase.FAILED, Phase.SUSPENDED, Phase.UNSUPPORTED})
WARNING_CONDITIONS = frozenset({(ConditionType.CONTAINER_SANDBOX, "False"), (ConditionType.GRADING_FAILURES, "True")})
"""Conditions whose turning to this value is a Warning event of its own (once per change, like a phase)."""


def conditions(kind: str, status: JSONObject) -> list[JSONObject]:
    """kubectl-style conditions of a status (no timestamps: stable between passes), by its kind's function in
    `CONDITIONS`; a kind with none has no conditions."""
    found = CONDITIONS.get(kind)
    return found(status) if found is not None else []


def environment_conditions(status: JSONObject) -> list[JSONObject]:
    """An Environment's one condition: Ready, or why not."""
    reason, message = status.get("reason", ""), status.get("message", "")
    ready = status.get("phase") == Phase.READY
    return [_condition(ConditionType.READY, ready, "" if ready else reason, "" if ready else message)]


def trainingjob_conditions(status: JSONObject) -> list[JSONObject]:
    """A TrainingJob's conditions: Admitted, EnvironmentReady, Succeeded, Suspended, ContainerSandbox,
    GradingFailures and Exported, each only once it means something."""
    phase, reason = status.get("phase"), status.get("reason", "")
    message = status.get("message", "")
    admitted = reason not in ADMISSION_REASONS
    found = [_condition(ConditionType.ADMITTED, admitted, "" if admitted else reason, "" if admitted else message)]
    if admitted:
        waiting = reason == Reason.ENVIRONMENT_NOT_READY
        found.append(
            _condition(
                ConditionType.ENVIRONMENT_READY, not waiting, reason if waiting else "", message if waiting else ""
            )
        )
    succeeded = phase == Phase.SUCCEEDED
    ended_badly = phase in (Phase.FAILED, Phase.CANCELLED)
    found.append(_condition(ConditionType.SUCCEEDED, succeeded, reason if ended_badly else "", ""))
    if phase == Phase.SUSPENDED:
        found.append(_condition(ConditionType.SUSPENDED, True, reason, message))
    sandbox = status.get("sandbox")
    if isinstance(sandbox, dict) and sandbox.get("mode"):
        # Graders outside the Environment's image are said out loud, once (an event when this condition turns).
        contained = sandbox.get("mode") == "container"
        found.append(
            _condition(
                ConditionType.CONTAINER_SANDBOX,
                contained,
                str(sandbox.get("reason") or ""),
                str(sandbox.get("message") or ""),
            )
        )
    failures = (status.get("summary") or {}).get(GRADING_FAILURES)
    if isinstance(failures, dict) and failures.get("failed"):
        # A run that succeeds with replies never scored says so (the seeds: unscored, never a reward of 0).
        grading_failures = _condition(
            ConditionType.GRADING_FAILURES, True, Reason.INFRASTRUCTURE_FAILURE, failures_message(failures)
        )
        found.append(grading_failures)
    export = status.get("export")
    if isinstance(export, dict):
        # The seeds' `Exported` condition: the exact Volume revision the outputs were committed to.
        done = export.get("phase") == Phase.EXPORTED
        what = f"Volume {export.get('volume')} revision {export.get('revision')}" if done else export.get("message", "")
        found.append(_condition(ConditionType.EXPORTED, done, "" if done else str(export.get("reason", "")), str(what)))
    return found


def inferenceendpoint_conditions(status: JSONObject) -> list[JSONObject]:
    """An InferenceEndpoint's one condition, the seeds' `Ready`: whether its model can serve now, or why not."""
    ready = status.get("phase") == Phase.RUNNING
    reason, message = str(status.get("reason") or ""), str(status.get("message") or "")
    if status.get("phase") == Phase.STOPPED:
        reason, message = reason or Reason.STOP_REQUESTED, message or "stopped: it answers 503 until started"
    return [_condition(ConditionType.READY, ready, "" if ready else reason, "its model answers" if ready else message)]


CONDITIONS: dict[str, Callable[[JSONObject], list[JSONObject]]] = {
    "Environment": environment_conditions,
    "TrainingJob": trainingjob_conditions,
    "InferenceEndpoint": inferenceendpoint_conditions,
}
"""The conditions of each kind that has some: a kind that grows conditions adds its function here."""


def _condition(kind: ConditionType, value: bool, reason: str, message: str) -> JSONObject:
    condition: JSONObject = {"type": kind, "status": "True" if value else "False"}
    if reason:
        condition["reason"] = reason
    if message:
        condition["message"] = message
    return condition


WATERMARK = ("eventsSeenAt", "stageSeen")
"""The status fields that say which of the job's own events are recorded already (owned by `write_status`)."""
WRITE_ATTEMPTS = 20
"""How often a status write is tried again when another writer moved the status between reading and writing."""


def write_status(
    store: StateStore, record: ResourceRecord, status: JSONObject, reported: Sequence[JSONObject] = ()
) -> bool:
    """Store `status` (with its conditions and the events watermark) if it changed, adding an event for each
    change since the stored status: the phase or reason, and each stage in `reported` newer than the watermark.
    True if written."""
    for _ in range(WRITE_ATTEMPTS):
        current = store.get(record.key) or record
        new = {**status, **_watermark(current.status, status)}
        new, stages = _stages(record, new, reported)
        new["conditions"] = conditions(record.key.kind, new)
        if new == current.status:
            return False
        try:
            with store.transaction():
                # The status first: when it lost the race, nothing of this attempt was written.
                store.set_status(record.key, new, expected_version=current.status_version)
                for event in stages:
                    store.add_event(event)
                _phase_event(store, record, current.status, new)
                _condition_events(store, record, current.status, new)
        except Conflict:
            continue  # another command wrote the status meanwhile: look again at what it wrote
        return True
    raise Conflict(f"the status of {record.key} kept changing while it was written", hint="try again")


def _watermark(stored: JSONObject, status: JSONObject) -> JSONObject:
    """The stored watermark, unless `status` carries a later one: no writer can move it back."""
    if float(status.get("eventsSeenAt") or 0.0) > float(stored.get("eventsSeenAt") or 0.0):
        return {name: status[name] for name in WATERMARK if name in status}
    return {name: stored[name] for name in WATERMARK if name in stored}


def _stages(
    record: ResourceRecord, status: JSONObject, reported: Sequence[JSONObject]
) -> tuple[JSONObject, list[Event]]:
    """`status` with the watermark moved past `reported`, and an event for each stage change reported since."""
    seen_at = float(status.get("eventsSeenAt") or 0.0)
    stage = status.get("stageSeen")
    found: list[Event] = []
    for event in sorted(reported, key=lambda item: float(item.get("at") or 0.0)):
        at = float(event.get("at") or 0.0)
        if at <= seen_at:
            continue
        seen_at = at
        if event.get("stage") and event["stage"] != stage:
            stage = event["stage"]
            found.append(Event(record.key, "Normal", "Stage", f"stage {stage}", at=at))
    if not reported:
        return status, found
    moved = {**status, "eventsSeenAt": seen_at}
    if stage:
        moved["stageSeen"] = stage
    return moved, found


def _condition_events(store: StateStore, record: ResourceRecord, before: JSONObject, status: JSONObject) -> None:
    """A Warning event for each condition of WARNING_CONDITIONS that took its value in this write."""
    had = {(c.get("type"), c.get("status")) for c in before.get("conditions") or [] if isinstance(c, dict)}
    for condition in status.get("conditions") or []:
        turned = (condition.get("type"), condition.get("status"))
        if turned in WARNING_CONDITIONS and turned not in had:
            reason = str(condition.get("reason") or condition.get("type"))
            store.add_event(Event(record.key, "Warning", reason, str(condition.get("message") or reason)))


def _launched(status: JSONObject) -> str:
    """`generation 2 launched (attempt 1)`: what a Launched event says, rather than that the job is Pending (empty
    once it runs: an executor may keep the reason, and `TrainingJob is Running` says that better)."""
    if status.get("phase") != Phase.PENDING:
        return ""
    generation, attempt = status.get("launchGeneration"), status.get("attempt")
    what = f"generation {generation} launched" if generation else "launched"
    return what + (f" (attempt {attempt})" if attempt else "")


EVENT_TEXTS: dict[str, Callable[[JSONObject], str]] = {Reason.LAUNCHED: _launched}
"""What the event of a reason says when its status carries no message (else, or when that is empty, `KIND is
PHASE`)."""


def _phase_event(store: StateStore, record: ResourceRecord, before: JSONObject, status: JSONObject) -> None:
    phase, reason = status.get("phase"), status.get("reason")
    if (phase, reason) != (before.get("phase"), before.get("reason")):
        kind = "Warning" if phase in WARNING_PHASES else "Normal"
        said = EVENT_TEXTS.get(str(reason))
        text = status.get("message") or (said(status) if said else "") or f"{record.key.kind} is {phase}"
        store.add_event(Event(record.key, kind, str(reason or phase), str(text)))
