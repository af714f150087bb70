"""When a wait is over: a resource that reached its end, or one that can no longer get there.

Who calls it: `nodus apply --wait` (`nodus.cli.plan_apply`) and `nodus wait` (`nodus.cli.resources`), after
each refresh. Both end as soon as what they wait for can no longer happen, rather than at their timeout:

- a job (TrainingJob, Job) whose generation ended (Succeeded, Failed, Cancelled) never changes phase again;
  `apply --wait` also stops at Suspended (a cap reached or `state: Suspended`: only a patch resumes it);
- an Environment whose build failed is Failed; one that is not built (ImageNotBuilt, ImageMissing) stays so,
  since nothing but `nodus apply --build` or nodus-build builds it, and a wait builds nothing;
- a resource of a kind no controller runs yet (phase Unsupported) never changes: nothing runs it;
- a TrainingJob Pending on such an Environment (EnvironmentNotReady), on a model that is not in the local cache
  (ModelNotCached: nodus never downloads weights), on a Volume that Failed, or on the export of a TrainingJob that
  failed or is Suspended (WaitingFor) is blocked: only another apply, after the cause is fixed, can start it.

`Outcome.line()` is the one line the summaries print: `TrainingJob/NAME: Failed: Reason: message`.

A job Pending on a dependency that may still become ready (an Environment being built elsewhere, a Volume
being uploaded) is one its controller asked to look at again after a delay (`Requeue`). `Requeues` is what
`nodus wait` and `nodus controller` (`gitops/loop.py`) do with it: say what it waits on, once each time that
changes, and reconcile it again under the apply lease once the delay is over (never more often: no spinning).
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field

from nodus.reconciler.apply import holding_lease
from nodus.reconciler.controllers import registry
from nodus.reconciler.controllers.base import Context, Requeue
from nodus.reconciler.controllers.blocking import phase_of
from nodus.reconciler.controllers.coverage import UNSUPPORTED_PHASE
from nodus.reconciler.controllers.status import write_status
from nodus.reconciler.controllers.trainingjob_controller import REQUEUE_AFTER_S, WAITING_REASONS, requeue_after
from nodus.reconciler.project import Project
from nodus.reconciler.state.records import LeaseHeld, ResourceKey, ResourceRecord, StateStore
from nodus.specs.status_names import Phase

SUCCESS = frozenset({Phase.SUCCEEDED, Phase.READY, Phase.RUNNING, Phase.STOPPED})
"""The phases a wait for a resource to be done counts as success: jobs (whose waits end only once their generation
ended), Environments, Volumes and runtimes, and services (an InferenceEndpoint serving, or stopped as asked)."""
ENDED = frozenset({Phase.SUCCEEDED, Phase.FAILED, Phase.CANCELLED})
"""Phases a job's generation never leaves."""


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


def outcome(record: ResourceRecord, store: StateStore, *, suspended_ends: bool) -> Outcome | None:
    """The record's outcome when it reached an end (or is blocked); None while it may still progress.

    `suspended_ends`: a Suspended job counts as ended (`apply --wait`: it was asked to finish, not to pause)."""
    phase = phase_of(record)
    reason = str(record.status.get("reason") or "")
    message = str(record.status.get("message") or "")
    is_job = runs_a_job(record.key.kind)
    ended = (ENDED | ({Phase.SUSPENDED} if suspended_ends else set())) if is_job else SUCCESS | {Phase.FAILED}
    if phase in ended or phase == UNSUPPORTED_PHASE:
        return Outcome(record.key, phase, reason, message)
    why = blocked_by(record, store)
    if why is not None:
        return Outcome(record.key, phase, reason, message, blocked=why)
    return None


def blocked_by(record: ResourceRecord, store: StateStore) -> str | None:
    """Why a Pending resource can never leave Pending by itself, or None: its kind's controller says
    (`Controller.blocked_by`: an Environment nothing builds, a job on a dependency that failed or is not built)."""
    return registry.REGISTRY.for_kind(record.key.kind).blocked_by(record, store)


def runs_a_job(kind: str) -> bool:
    """Whether resources of `kind` run a job (a supervised generation that ends): their controller heartbeats."""
    return registry.REGISTRY.for_kind(kind).heartbeats


def requeued_keys(store: StateStore) -> list[ResourceKey]:
    """Every job that waits on a dependency (what `nodus controller` looks at again between its passes)."""
    kinds = sorted(controller.kind for controller in registry.REGISTRY if controller.heartbeats)
    return [record.key for kind in kinds for record in store.list(kind) if requeued(record)]


def requeued(record: ResourceRecord) -> bool:
    """Whether the record waits on a dependency its controller looks at again after a delay."""
    return phase_of(record) == Phase.PENDING and record.status.get("reason") in WAITING_REASONS


def waiting_line(record: ResourceRecord) -> str:
    """`TrainingJob/x: Pending (EnvironmentNotReady: Environment e is not Ready)`: what a wait reports."""
    reason, message = record.status.get("reason"), record.status.get("message")
    detail = f"{reason}: {message}" if reason and message else str(reason or message or "")
    return f"{record.key}: {phase_of(record)}" + (f" ({detail})" if detail else "")


@dataclass
class Requeues:
    """The requeued resources of one waiting process: when each is due again (by `clock`, monotonic seconds)
    and the line last said about it. A resource this process has not reconciled yet was requeued by whoever did
    (an apply, a sync pass): it is due `first_after_s` after this process first sees it."""

    clock: Callable[[], float] = time.monotonic
    first_after_s: float = REQUEUE_AFTER_S
    due: dict[ResourceKey, float] = field(default_factory=dict)
    said: dict[ResourceKey, str] = field(default_factory=dict)

    def look(
        self, project: Project, store: StateStore, keys: Iterable[ResourceKey], operation: str = "wait"
    ) -> list[str]:
        """Reconcile each of `keys` that is requeued and due (under the lease; skipped while an apply holds it),
        and the lines to report: a key's `waiting_line` each time it changes while it was requeued."""
        asked = list(keys)
        followed = [*asked, *(key for key in self.due if key not in asked)]  # those requeued before, too
        records = [record for record in (store.get(key) for key in followed) if record is not None]
        now = self.clock()
        for record in records:
            if requeued(record):
                first = min(self.first_after_s, requeue_after(record.status.get("reason")))
                self.due.setdefault(record.key, now + first)
        due = [record for record in records if requeued(record) and self.due[record.key] <= now]
        lines: list[str] = []
        if due:
            try:
                with holding_lease(store, operation):
                    for record in due:
                        launched = self._reconcile(project, store, record, now)
                        if launched:
                            lines.append(f"{record.key}: launched {launched}")
            except LeaseHeld:
                pass  # an apply is reconciling them now; the next look goes on
        for key in followed:
            found = store.get(key)
            waiting = found is not None and requeued(found)
            if found is not None and (waiting or key in self.said):
                text = waiting_line(found)
                if self.said.get(key) != text:
                    lines.append(text)
                self.said[key] = text
            if not waiting:  # launched, failed or gone: the wait's other lines follow it from now on
                self.said.pop(key, None)
                self.due.pop(key, None)
        return lines

    def next_due(self) -> float | None:
        """Seconds until the earliest requeued resource is due (0 when one is), None when none is waiting."""
        if not self.due:
            return None
        return max(0.0, min(self.due.values()) - self.clock())

    def _reconcile(self, project: Project, store: StateStore, record: ResourceRecord, now: float) -> str | None:
        """The record's controller run again, its status written; the launch key if it launched."""
        fresh = store.get(record.key)  # under the lease now: what an apply may have written meanwhile
        if fresh is None or not requeued(fresh):
            return None
        result = registry.reconcile(fresh, Context(project, store, action="requeue"))
        status = dict(result.status)
        if fresh.status.get("source") and "source" not in status:
            status["source"] = fresh.status["source"]
        write_status(store, fresh, status)
        if isinstance(result, Requeue):
            self.due[record.key] = now + result.after_s
        else:
            self.due.pop(record.key, None)
        return result.launched
