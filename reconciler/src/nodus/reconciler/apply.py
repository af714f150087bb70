"""`nodus apply`: make observed state match a plan, under the apply lease, in dependency waves, idempotently.

Who calls it: the `nodus apply` command (`nodus.cli.apply_cmd`) with a plan made on the spot under the lease,
or a saved plan (`--out plan.json` of `nodus plan`), which is applied exactly or refused as stale.

Order of work, and why:
1. take the lease (`apply`): two applies never interleave; the second fails fast naming the holder;
2. for a saved plan, refuse it when anything it was made against has moved (`stale_reasons`);
3. admit every resource of the plan before writing anything, each by its kind's controller (`admit`: a
   TrainingJob's runtime, parameters and cap, an evaluation AgentGroup's Environment): a refused parameter
   costs nothing and leaves no half-applied state;
4. per wave (Secrets and Volumes, then Environments and runtimes, then jobs, then agent runs), write the
   specs in one transaction, then let each kind's controller act: an Environment becomes Ready (built
   first with `--build`), a TrainingJob is launched. A launch is recorded under an idempotency key
   (`<key>/gen<generation>/attempt1`) before the executor is asked, and the executor itself starts nothing
   twice, so an apply killed at any point and run again converges to one job per TrainingJob.
"""

from __future__ import annotations

import contextlib
import os
import re
import socket
import sys
import threading
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from nodus.errors import NodusError, PlanError, SpecError
from nodus.reconciler.controllers import registry
from nodus.reconciler.controllers.base import (
    AdmissionContext,
    Context,
    Done,
    Placement,
    PlannedState,
    Requeue,
    failure_status,
    silent,
)
from nodus.reconciler.controllers.base import ApplyOptions as ApplyOptions  # apply's options, as before
from nodus.reconciler.controllers.base import Reporter as Reporter
from nodus.reconciler.controllers.placement import placement_of
from nodus.reconciler.controllers.reference_checks import reference_refusals
from nodus.reconciler.controllers.status import write_status
from nodus.reconciler.planning.diff import Action, Plan, stale_reasons, wave_of
from nodus.reconciler.project import Project, holder
from nodus.reconciler.state.records import (
    Conflict,
    JSONObject,
    Lease,
    LeaseHeld,
    ResourceKey,
    ResourceRecord,
    StateStore,
)
from nodus.specs.status_names import Phase, Reason

LEASE_TTL_S = 300.0


@dataclass(frozen=True)
class Operation:
    """One step of a plan as apply carries it out."""

    action: str
    """create, update, replace, delete or noop."""
    key: ResourceKey
    document: JSONObject | None
    """The desired document (None for delete)."""
    source: str | None = None
    """`file:line` of the spec, for messages and for building Environments."""


@dataclass
class ApplyReport:
    written: list[tuple[str, ResourceKey]] = field(default_factory=list)
    launched: list[str] = field(default_factory=list)
    statuses: dict[ResourceKey, JSONObject] = field(default_factory=dict)
    failed: list[tuple[ResourceKey, str, str]] = field(default_factory=list)
    """(key, reason, message) of every resource this apply left Failed: a build, a launch, a controller's refusal."""
    requeued: list[tuple[ResourceKey, float, str]] = field(default_factory=list)
    """(key, seconds, reason) of every resource its controller wants looked at again: a launch the host refused
    for now (also in `failed`), a job waiting on a dependency."""


def wave(kind: str) -> int:
    """The planner's dependency waves (Secrets and Volumes first, agent runs last)."""
    return wave_of(kind)


@contextlib.contextmanager
def holding_lease(store: StateStore, operation: str) -> Iterator[Lease]:
    """The apply lease, held for the `with` block (apply, delete, patch); released whatever happens.

    A thread renews it every third of its TTL, so an apply that outlasts the TTL (an Environment built with
    `--build`, a slow image push) keeps it: another nodus, here or on another host, would otherwise take over an
    expired lease and apply at the same time."""
    lease = take_lease(store, operation)
    renewer = _LeaseRenewer(store, lease)
    renewer.start()
    try:
        yield lease
    finally:
        renewer.stop()
        store.release_lease(renewer.lease)


class _LeaseRenewer(threading.Thread):
    """Renews a held lease until stopped; a lease broken meanwhile (`nodus unlock`) is said once, on stderr."""

    def __init__(self, store: StateStore, lease: Lease) -> None:
        super().__init__(name=f"renew {lease.name} lease", daemon=True)
        self.store = store
        self.lease = lease
        self._stopped = threading.Event()

    def run(self) -> None:
        while not self._stopped.wait(LEASE_TTL_S / 3):
            try:
                self.lease = self.store.renew_lease(self.lease, LEASE_TTL_S)
            except Conflict as exc:
                print(f"warning: {exc}; this apply goes on without it", file=sys.stderr, flush=True)
                return
            except Exception as exc:  # a store briefly unreachable: try again at the next renewal
                print(f"warning: could not renew the {self.lease.name} lease: {exc}", file=sys.stderr, flush=True)

    def stop(self) -> None:
        self._stopped.set()
        if self.is_alive():
            self.join()


def take_lease(store: StateStore, operation: str) -> Lease:
    """The apply lease; one left by a process of this host that has died is taken over (an apply killed
    mid-way must not block the next one until the lease expires). A live holder fails fast (LeaseHeld)."""
    try:
        return store.acquire_lease("apply", holder(), operation, LEASE_TTL_S)
    except LeaseHeld as exc:
        if not holder_is_dead(exc.lease.holder):
            raise
        store.break_lease(exc.lease.id)
        return store.acquire_lease("apply", holder(), operation, LEASE_TTL_S)


def holder_is_dead(text: str) -> bool:
    """True when `user@host pid N` names this host and no process N runs here."""
    match = re.fullmatch(r"[^@]*@(?P<host>\S+) pid (?P<pid>\d+)", text)
    if match is None or match.group("host") != socket.gethostname():
        return False
    try:
        os.kill(int(match.group("pid")), 0)
    except ProcessLookupError:
        return True
    except PermissionError:
        return False
    return False


def operations_of(actions: Iterable[Action]) -> list[Operation]:
    """A plan's actions as apply carries them out."""
    return [Operation(action.type, action.key, action.desired, action.source) for action in actions]


def apply_plan(
    make_plan: Callable[[StateStore], Plan],
    *,
    project: Project,
    store: StateStore,
    options: ApplyOptions | None = None,
    reporter: Reporter | None = None,
    saved: bool = False,
    operation: str = "apply",
) -> tuple[Plan, ApplyReport]:
    """Take the lease, make (or check) the plan under it, and carry it out.

    `make_plan(store)` runs under the lease, so a plan made on the spot cannot be overtaken by another apply;
    for a saved plan (`saved=True`) it returns the saved plan and `stale_reasons` must be empty.
    """
    with holding_lease(store, operation):
        plan = make_plan(store)
        if saved:
            reasons = stale_reasons(plan, store.list())
            if reasons:
                raise PlanError(
                    "the saved plan is stale: " + "; ".join(reasons), hint="run nodus plan again and apply the new plan"
                )
        result = apply_operations(
            operations_of(plan.actions), project=project, store=store, options=options, reporter=reporter
        )
        return plan, result


def apply_operations(
    operations: Sequence[Operation],
    *,
    project: Project,
    store: StateStore,
    options: ApplyOptions | None = None,
    reporter: Reporter | None = None,
) -> ApplyReport:
    """Carry out `operations` (the caller holds the lease): admission, then writes and controllers per wave."""
    options = options or ApplyOptions()
    report = reporter or silent
    _admit_all(operations, store, project)
    result = ApplyReport()
    for number in sorted({wave(op.key.kind) for op in operations}):
        batch = [op for op in operations if wave(op.key.kind) == number]
        _write(batch, store, result, report)
        for op in batch:
            if op.action != "delete":
                _reconcile(op, project=project, store=store, options=options, result=result, report=report)
    for op in sorted((o for o in operations if o.action == "delete"), key=lambda o: -wave(o.key.kind)):
        _delete(op, project=project, store=store, result=result, report=report)
    return result


@dataclass(frozen=True)
class PlanRefusal:
    """Why a resource of a plan (a TrainingJob, an evaluation AgentGroup) would not be admitted, as its kind's
    controller said it (`Controller.admit`): `message` starts with the field it is about."""

    operation: Operation
    reason: str
    """The admission reason (InvalidParameters, RuntimeNotFound, ...); empty for a lowered cap."""
    message: str

    def line(self) -> str:
        """As apply prints it: `file:line: TrainingJob/NAME: Reason: field: what is wrong`."""
        where = f"{self.operation.source}: " if self.operation.source else ""
        reason = f"{self.reason}: " if self.reason else ""
        return f"{where}{self.operation.key.kind}/{self.operation.key.name}: {reason}{self.message}"

    def plan_line(self) -> str:
        """As `nodus plan` prints it: `file: TrainingJob/NAME: field: what is wrong`."""
        source = self.operation.source
        where = f"{source.rsplit(':', 1)[0]}: " if source else ""
        return f"{where}{self.operation.key.kind}/{self.operation.key.name}: {self.message}"


ADMITTED_ACTIONS = frozenset({"create", "update", "replace"})
"""The actions whose desired document is admitted (a noop was admitted when it was written; a delete writes none)."""


def refusals(
    operations: Sequence[Operation],
    store: StateStore,
    project_root: Path | None = None,
    *,
    placement: Placement | None = None,
) -> list[PlanRefusal]:
    """What the controllers of the resources that `operations` create, change or replace would refuse
    (`Controller.admit`, through the registry), against the store as it would be after them (a runtime or
    Environment of the same plan counts). Only reads the store (`get` and `list`).

    Who calls it: apply, before writing anything, `nodus plan`, so a typo fails the plan too, the SDK's preview
    and `nodus apply --dry-run`, each with the project's `placement` (`controllers.placement.placement_of`), so a
    GPU request the host cannot meet or a cap below the first hold blocks all of them alike."""
    pending = {op.key: op.document for op in operations if op.document is not None}
    planned = PlannedState(store, pending)
    found: list[PlanRefusal] = []
    for op in operations:
        if op.document is None or op.action not in ADMITTED_ACTIONS:
            continue
        controller = registry.REGISTRY.for_kind(op.key.kind)
        context = AdmissionContext(planned, op.action, project_root, placement)
        # What the document names, for every kind (a missing Volume, Secret or TrainingJob), then its kind's own.
        said = reference_refusals(op.document, context) + controller.admit(store.get(op.key), op.document, context)
        found += [PlanRefusal(op, refusal.reason, refusal.message) for refusal in said]
    return found


def _admit_all(operations: Sequence[Operation], store: StateStore, project: Project) -> None:
    """Refuse the whole apply if any resource it writes would not be admitted (nothing written yet)."""
    found = refusals(operations, store, project.root, placement=placement_of(project))
    problems = [refusal.line() for refusal in found]
    if problems:
        raise SpecError(problems, hint="nothing was applied; fix the specs and apply again")


def _write(batch: Sequence[Operation], store: StateStore, result: ApplyReport, report: Reporter) -> None:
    """Write every spec of a wave in one transaction (all of them or none)."""
    with store.transaction():
        for op in batch:
            if op.action in ("create", "update") and op.document is not None:
                store.put(op.key, op.document)
            elif op.action == "replace" and op.document is not None:
                # A replacement is a new generation with a fresh status: its launch key is new, so the
                # controller starts the replacement, and the old job is stopped first (below).
                record = store.put(op.key, op.document)
                replaced = {"phase": Phase.PENDING, "reason": Reason.REPLACED, "launchGeneration": record.generation}
                store.set_status(op.key, replaced)
            else:
                continue
            result.written.append((op.action, op.key))
            report(str(op.key), {"create": "created", "update": "updated", "replace": "replaced"}[op.action])


def _reconcile(
    op: Operation, *, project: Project, store: StateStore, options: ApplyOptions, result: ApplyReport, report: Reporter
) -> None:
    """One resource through its kind's controller (`controllers.registry`): its status written, its launch and
    notes reported, a failure of this pass added to `failed`. An error the controller raised is recorded as the
    resource's status; without keep_going it then ends the apply."""
    record = store.get(op.key)
    if record is None:
        return
    context = Context(project, store, options, report, op.source, op.action)
    try:
        outcome = registry.reconcile(record, context)
    except NodusError as exc:  # a build that could not start, a store that refused: the others still go ahead
        if not options.keep_going:
            raise
        outcome = Done(failure_status(registry.REGISTRY.for_kind(op.key.kind), exc), error=exc)
    status = {**outcome.status, "source": op.source} if op.source else dict(outcome.status)
    if outcome.error is not None:
        _record_failure(op, record, status, outcome.error, store=store, result=result, report=report)
        if not options.keep_going:
            raise outcome.error
        if isinstance(outcome, Requeue):
            result.requeued.append((op.key, outcome.after_s, outcome.reason))
        return
    if outcome.launched:
        result.launched.append(outcome.launched)
        report(str(op.key), f"launched {outcome.launched}")
    write_status(store, record, status)
    result.statuses[op.key] = status
    for note in outcome.notes:
        report(str(op.key), note)
    if isinstance(outcome, Requeue):
        result.requeued.append((op.key, outcome.after_s, outcome.reason))
    if outcome.failed_now():
        result.failed.append((op.key, str(status.get("reason") or ""), str(status.get("message") or "")))


def _record_failure(
    op: Operation,
    record: ResourceRecord,
    status: JSONObject,
    error: NodusError,
    *,
    store: StateStore,
    result: ApplyReport,
    report: Reporter,
) -> None:
    """A controller that raised (a launch the executor refused, a build that could not start): the resource is
    Failed with its controller's failure reason (LaunchFailed, BuildFailed), and the next apply tries again. A
    store that cannot take even that leaves the controller's error to be said, not the store's."""
    reason = str(status.get("reason") or "")
    with contextlib.suppress(NodusError):
        write_status(store, record, status)
    result.failed.append((op.key, reason, error.message))
    report(str(op.key), f"Failed: {reason}: {error.message}")


def _delete(op: Operation, *, project: Project, store: StateStore, result: ApplyReport, report: Reporter) -> None:
    record = store.mark_deleting(op.key)
    if record is None:
        return
    registry.REGISTRY.for_kind(op.key.kind).finalize(record, Context(project, store, action="delete"))
    store.delete(op.key)
    result.written.append(("delete", op.key))
    report(str(op.key), "deleted")
