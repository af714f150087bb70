"""What every controller is: one signature, `reconcile(record, context) -> Done | Requeue`, and the context it gets.

Who uses it: each per-kind controller module (`controllers/*_controller.py`, `controllers/stored_only.py`)
implements `Controller`; `nodus.reconciler.controllers.registry` holds them by kind; `nodus.reconciler.apply`
and `nodus.reconciler.refresh` call them through the registry and write the status they return.

The shape follows controller-runtime's `Reconcile -> (Result{RequeueAfter}, error)`: a controller decides and
returns what the resource's status is now (`Done`), or that it must be looked at again after a delay
(`Requeue`). A `TemporaryError` raised below a controller becomes a `Requeue` with the error's delay, a
`PermanentError` a `Done` whose status is Failed (`registry.reconcile` does both), so a controller never has
to catch them itself.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Protocol

from nodus.errors import NodusError
from nodus.reconciler.executors.protocol import HostGpus
from nodus.reconciler.pricing.prices import PriceTable
from nodus.reconciler.project import Project
from nodus.reconciler.state.records import JSONObject, ResourceKey, ResourceRecord, StateStore
from nodus.specs.status_names import Phase, Reason

Reporter = Callable[[str, str], None]
"""`report(resource, what happened)`: progress lines of the CLI."""


def silent(resource: str, message: str) -> None:
    return None


@dataclass
class ApplyOptions:
    build: bool = False
    """Build Environments that are not in nodus.lock or the store (nodus-build) instead of waiting."""
    network: str = "host"
    """The build's freeze-step network (`nodus-build --network`)."""
    keep_going: bool = False
    """A resource whose controller raises (a launch the executor refused) is recorded Failed in `failed` and the
    apply goes on with the others (`nodus apply`); without it the error ends the apply (the controller's pass)."""


@dataclass(frozen=True)
class Context:
    """What a controller may use besides the record: where it runs and how it reports."""

    project: Project
    store: StateStore
    options: ApplyOptions = field(default_factory=ApplyOptions)
    report: Reporter = silent
    source: str | None = None
    """`file:line` of the spec this operation came from (None for a refresh, or a resource with no file)."""
    action: str = "noop"
    """The plan's action for the resource (create, update, replace, noop); `refresh` for a refresh."""


@dataclass(frozen=True)
class Done:
    """The resource's status after this pass; nothing more to do until something changes."""

    status: JSONObject
    launched: str | None = None
    """The launch key when this pass launched the resource's job (apply reports and counts it)."""
    notes: Sequence[str] = ()
    """Lines apply reports after the resource (after `launched`): a fall back said out loud, a build not Ready."""
    events: Sequence[JSONObject] = ()
    """Events the executor reported since the last look (stage reports), written with the status."""
    failed: bool | None = None
    """Whether this pass failed the resource; None: it did when the status is Failed. A job whose run had
    already failed before this pass says False: that failure is history, not this apply's."""
    error: NodusError | None = None
    """The PermanentError this status records, if any (an apply without keep_going still raises it)."""

    def failed_now(self) -> bool:
        return self.status.get("phase") == Phase.FAILED if self.failed is None else self.failed


@dataclass(frozen=True)
class Requeue:
    """The resource must be reconciled again after `after_s` seconds (a host busy, a launch refused for now)."""

    status: JSONObject
    after_s: float
    reason: str
    error: NodusError | None = None
    """The TemporaryError this came from, if any (an apply without keep_going still raises it)."""

    launched = None
    notes: Sequence[str] = ()
    events: Sequence[JSONObject] = ()

    def failed_now(self) -> bool:
        return self.status.get("phase") == Phase.FAILED


Result = Done | Requeue


@dataclass(frozen=True)
class Heartbeat:
    """A job's last sign of life as its executor has it, for the pure reads (`nodus get`, `describe`)."""

    at: float
    """Epoch seconds of the supervisor's last heartbeat."""
    phase: str
    step: object = None

    def ahead_of(self, status: JSONObject) -> bool:
        """Whether the job has moved on from the stored status (nothing refreshed it since)."""
        return (self.phase, self.step) != (status.get("phase"), status.get("step"))


@dataclass(frozen=True)
class Refusal:
    """Why a resource of a plan would not be admitted. `message` starts with the field it is about
    (`spec.parameters.learning_rate: unknown parameter; ...`)."""

    reason: str
    """The admission reason (InvalidParameters, RuntimeNotFound, ...); empty for a lowered cap."""
    message: str


class PlannedState:
    """The store as it would be after a plan: the plan's documents over the store's records, read lazily and once.

    Who makes it: `nodus.reconciler.apply.refusals`, one per plan, shared by every resource's admission (a job
    may name a runtime or an Environment of the same plan). It only reads (`get` and `list` of the store)."""

    def __init__(self, store: StateStore, pending: Mapping[ResourceKey, JSONObject]) -> None:
        self.store = store
        self.pending = pending
        """The documents the plan writes (creates, updates, replacements, and the unchanged ones)."""
        self._by_kind: dict[str, dict[ResourceKey, JSONObject]] = {}
        self._records: list[ResourceRecord] | None = None

    def records(self) -> list[ResourceRecord]:
        """Every record of the store as it is now (before the plan), read once: what estimates count as running."""
        if self._records is None:
            self._records = self.store.list()
        return self._records

    def document(self, key: ResourceKey) -> JSONObject | None:
        """The resource's document after the plan: the plan's, else the store's, else None."""
        if key in self.pending:
            return self.pending[key]
        record = self.store.get(key)
        return None if record is None else record.spec

    def of_kinds(self, *kinds: str) -> dict[ResourceKey, JSONObject]:
        """Every resource of these kinds after the plan, by key (the plan's documents win over the store's)."""
        found: dict[ResourceKey, JSONObject] = {}
        for kind in kinds:
            if kind not in self._by_kind:
                stored = {record.key: record.spec for record in self.store.list(kind)}
                self._by_kind[kind] = {**stored, **{k: d for k, d in self.pending.items() if k.kind == kind}}
            found.update(self._by_kind[kind])
        return found


@dataclass
class Placement:
    """Where and at what price a plan's jobs would launch, which admission checks a run against (a GPU request
    the host cannot meet, a cap below the first hold), the same for the dry run, `nodus plan` and `apply`.

    Who makes it: `nodus.reconciler.controllers.placement.placement_of`, once per plan."""

    host_gpus: Callable[[], HostGpus | None]
    """The GPUs of the one host the project's executor places jobs on (None: a cluster places them at launch);
    called only for a job that asks for GPUs."""
    prices: PriceTable
    project: Project
    now: datetime


@dataclass(frozen=True)
class AdmissionContext:
    """What a controller's `admit` may use besides the record and the desired document."""

    planned: PlannedState
    action: str
    """The plan's action for the resource: create, update or replace (noop and delete are not admitted)."""
    project_root: Path | None = None
    """The project's folder (its own tables beside nodus.lock: models.yaml); None where the caller has no project."""
    placement: Placement | None = None
    """Where and at what price the plan's jobs would launch; None: nothing is checked against a host or a price."""


class Controller(Protocol):
    """One kind's controller. `reconcile` is the one decision; `admit` is asked before anything of a plan is
    written; the other three are what apply's delete, `refresh` and the pure reads (`nodus get`, `describe`)
    need, with the defaults of `ControllerBase`."""

    kind: str
    failure_reason: str
    """The reason recorded when the controller raised: LaunchFailed (BuildFailed for an Environment)."""
    heartbeats: bool
    """Whether resources of this kind run a job whose supervisor heartbeats (`nodus get -o wide` HEARTBEAT)."""

    def reconcile(self, record: ResourceRecord, context: Context) -> Result:
        """Act so the resource matches its spec; its status now."""
        ...

    def admit(self, record: ResourceRecord | None, desired: JSONObject, context: AdmissionContext) -> list[Refusal]:
        """Why `desired` (replacing `record`, None for a create) would be refused, before anything is written:
        `nodus plan` and `apply` refuse the whole plan on any. Pure: reads `context.planned`, changes nothing."""
        ...

    def observe(self, record: ResourceRecord, context: Context) -> Done | None:
        """`nodus refresh` and the waits: copy what the resource's running work reports (recovering a lost
        supervisor, exporting outputs); None when there is nothing to look at. Never launches anything new."""
        ...

    def finalize(self, record: ResourceRecord, context: Context) -> None:
        """Before the resource is deleted: stop what it runs."""
        ...

    def heartbeat(self, record: ResourceRecord, project: Project) -> Heartbeat | None:
        """The resource's job's last heartbeat and what it reported then, read without changing anything."""
        ...

    def blocked_by(self, record: ResourceRecord, store: StateStore) -> str | None:
        """Why the resource, as stored, can never leave Pending by itself (only another apply, after the cause is
        fixed, can move it on), or None. `nodus wait` and `apply --wait` end at once on it. A pure read."""
        ...


class ControllerBase:
    """Defaults for the hooks a kind does not need: nothing to refuse, observe, stop or heartbeat."""

    kind = ""
    failure_reason: str = Reason.LAUNCH_FAILED
    heartbeats = False

    def admit(self, record: ResourceRecord | None, desired: JSONObject, context: AdmissionContext) -> list[Refusal]:
        return []

    def observe(self, record: ResourceRecord, context: Context) -> Done | None:
        return None

    def finalize(self, record: ResourceRecord, context: Context) -> None:
        return None

    def heartbeat(self, record: ResourceRecord, project: Project) -> Heartbeat | None:
        return None

    def blocked_by(self, record: ResourceRecord, store: StateStore) -> str | None:
        return None


def failure_status(controller: Controller, error: NodusError) -> JSONObject:
    """The status of a resource whose controller raised: Failed with the controller's failure reason."""
    return {"phase": Phase.FAILED, "reason": controller.failure_reason, "message": error.message}
