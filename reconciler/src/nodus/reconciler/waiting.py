"""When a wait is over: a resource that reached its end, or one that can no longer get there.

Who calls it: `nodus apply --wait` (`nodus.cli.plan_apply`) and `nodus wait` (`nodus.cli.resources`), after
each refresh. Both end as soon as what they wait for can no longer happen, rather than at their timeout:

- a job (TrainingJob, Job) whose generation ended (Succeeded, Failed, Cancelled) never changes phase again;
  `apply --wait` also stops at Suspended (a cap reached or `state: Suspended`: only a patch resumes it);
- an Environment whose build failed is Failed; one that is not built (ImageNotBuilt, ImageMissing) stays so,
  since nothing but `nodus apply --build` or nodus-build builds it, and a wait builds nothing;
- a resource of a kind no controller runs yet (phase Unsupported) never changes: nothing runs it;
- a TrainingJob Pending on such an Environment (EnvironmentNotReady), on a model that is not in the local cache
  (ModelNotCached: nodus never downloads weights) or on a Volume that Failed is blocked: only another apply,
  after the cause is fixed, can start it.

`Outcome.line()` is the one line the summaries print: `TrainingJob/NAME: Failed: Reason: message`.
"""

from __future__ import annotations

from dataclasses import dataclass

from nodus.reconciler.controllers.coverage import UNSUPPORTED_PHASE
from nodus.reconciler.references import environment_ref
from nodus.reconciler.state.records import ResourceKey, ResourceRecord, StateStore

SUCCESS = frozenset({"Succeeded", "Ready"})
"""The phases a wait for a resource to be done counts as success (jobs, then Environments, Volumes, runtimes)."""
ENDED = frozenset({"Succeeded", "Failed", "Cancelled"})
"""Phases a job's generation never leaves."""
JOB_KINDS = frozenset({"TrainingJob", "Job"})
NOT_BUILT = frozenset({"ImageNotBuilt", "ImageMissing"})
"""An Environment's reasons that only a build clears."""


@dataclass(frozen=True)
class Outcome:
    """Where a resource ended up, or why it cannot move on (`blocked`)."""

    key: ResourceKey
    phase: str
    reason: str = ""
    message: str = ""
    blocked: str = ""
    """Why it can no longer progress (a dependency that failed or that nothing will build); empty otherwise."""

    @property
    def succeeded(self) -> bool:
        return self.phase in SUCCESS and not self.blocked

    def line(self) -> str:
        """`Kind/name: Phase: Reason: message` (the cause of a block last, as the most specific part)."""
        parts = [str(self.key), self.phase]
        if self.reason:
            parts.append(self.reason)
        detail = self.blocked or self.message
        if detail:
            parts.append(detail)
        return ": ".join(parts)


def phase_of(record: ResourceRecord) -> str:
    return str(record.status.get("phase") or "Pending")


def outcome(record: ResourceRecord, store: StateStore, *, suspended_ends: bool) -> Outcome | None:
    """The record's outcome when it reached an end (or is blocked); None while it may still progress.

    `suspended_ends`: a Suspended job counts as ended (`apply --wait`: it was asked to finish, not to pause)."""
    phase = phase_of(record)
    reason = str(record.status.get("reason") or "")
    message = str(record.status.get("message") or "")
    is_job = record.key.kind in JOB_KINDS
    ended = (ENDED | ({"Suspended"} if suspended_ends else set())) if is_job else SUCCESS | {"Failed"}
    if phase in ended or phase == UNSUPPORTED_PHASE:
        return Outcome(record.key, phase, reason, message)
    why = blocked_by(record, store)
    if why is not None:
        return Outcome(record.key, phase, reason, message, blocked=why)
    return None


def blocked_by(record: ResourceRecord, store: StateStore) -> str | None:
    """Why a Pending resource can never leave Pending by itself, or None."""
    if phase_of(record) != "Pending":
        return None
    reason = record.status.get("reason")
    message = str(record.status.get("message") or reason or "")
    if record.key.kind == "Environment":
        return f"{message} (nothing builds it while waiting)" if reason in NOT_BUILT else None
    if record.key.kind not in JOB_KINDS:
        return None
    if reason == "ModelNotCached":
        return message
    if reason == "EnvironmentNotReady":
        return _dependency(store, _environment_key(record))
    if reason == "VolumeNotReady":
        return _dependency(store, _volume_key(record))
    return None


def _dependency(store: StateStore, key: ResourceKey | None) -> str | None:
    """Why the dependency `key` will not become Ready (Failed, or not built), or None."""
    found = None if key is None else store.get(key)
    if found is None:
        return None
    phase = phase_of(found)
    reason = found.status.get("reason")
    detail = str(found.status.get("message") or "")
    if phase == "Failed":
        return f"{key} is Failed" + (f" ({reason}: {detail})" if reason else f" ({detail})" if detail else "")
    if phase == "Pending" and reason in NOT_BUILT:
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
