"""The pure planner: desired documents against observed records, into a serialisable `Plan`.

Who calls it: `nodus plan` (prints the plan, `--out plan.json` saves `Plan.to_json()`), `nodus apply` (plans,
or reads a saved plan with `Plan.from_json` and refuses it when `stale_reasons` is not empty), and the
renderers in `nodus.reconciler.planning.render`. No I/O: everything comes in as arguments.

What a resource gets:
- create `+`: not in the store;
- update in place `~`: changed only in fields its kind's `UPDATABLE_IN_PLACE` lists (and labels,
  annotations, apiVersion);
- replace `-/+`: any other field changed (`forced_by` names the first one), or the stored one is being
  deleted;
- delete `-`: in the store, not in the files, and `prune` asked for it; otherwise it is listed as
  unmanaged and kept. Never a Job `nodus run` made (labelled `nodus.dev/created-by: nodus-run`): listed as kept,
  whatever `prune` says (`made_by_run`, below, says why);
- no-op: the normalised documents are the same.

Drift: a spending cap (a kind's `RAISE_ONLY` field) that is higher live than in the file (raised by `nodus patch`)
stays live; the action carries it as `drift` (the plan's warnings name the edit that makes the file agree) and is
planned as if the file said the live value, so the rest of the resource, and of the repository, still applies.

Order: the dependency waves of `WAVES` (a Secret before the TrainingJob that reads it); inside a wave, a resource
after those of the plan it waits for (`Action.waits_for`, from `planning.dependencies`: the SFT job whose export a
DPO job trains on comes first); deletes after everything else and in reverse, so nothing is deleted while something
still depends on it.
"""

from __future__ import annotations

import dataclasses
import json
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field, replace
from decimal import Decimal, InvalidOperation
from typing import Any, Literal, cast, get_args

from nodus.errors import PlanError
from nodus.reconciler.planning.dependencies import cycle, depth, waits_for
from nodus.reconciler.planning.desired import Desired, key_of, normalise_observed
from nodus.reconciler.state.records import JSONObject, ResourceKey, ResourceRecord, spec_hash
from nodus.specs.registry import BY_KIND
from nodus.specs.status_names import Phase

PLAN_FORMAT = "nodus-plan"
PLAN_FORMAT_VERSION = 1
"""Bumped when plan.json changes incompatibly; a plan of another version is refused, never guessed at."""

ActionType = Literal["create", "update", "replace", "delete", "noop"]
ACTION_TYPES: tuple[ActionType, ...] = get_args(ActionType)
SYMBOLS: dict[ActionType, str] = {"create": "+", "update": "~", "replace": "-/+", "delete": "-", "noop": " "}

WAVES: tuple[str, ...] = (
    "Secret",
    "Volume",
    "Environment",
    "TrainingRuntime",
    "Budget",
    "TrainingJob",
    "Job",
    "InferenceEndpoint",
    "Agent",
    "AgentGroup",
    "AgentRun",
)
"""Kinds in dependency order: each may refer to the kinds before it, never to those after."""

Path = tuple[str | int, ...]
FieldOp = Literal["add", "remove", "change"]
FIELD_OPS: tuple[FieldOp, ...] = get_args(FieldOp)

# Fields every kind may change in place: selection and notes, and the document's API version (a newer
# nodus reading an older stored document must not replace every resource of that kind).
ALWAYS_IN_PLACE: tuple[Path, ...] = (("metadata", "labels"), ("metadata", "annotations"), ("apiVersion",))


class _Missing:
    """A field absent on one side of a comparison (distinct from a JSON null)."""

    def __repr__(self) -> str:
        return "<missing>"


MISSING: Any = _Missing()


def wave_of(kind: str) -> int:
    """The wave a kind is created in; kinds this nodus no longer knows go last (and are deleted first)."""
    return WAVES.index(kind) if kind in WAVES else len(WAVES)


@dataclass(frozen=True)
class FieldChange:
    """One field that differs: `path` is dotted from the document root (`spec.parameters.steps`)."""

    path: str
    op: FieldOp
    before: Any = None
    """The stored value (None when `op` is add)."""
    after: Any = None
    """The desired value (None when `op` is remove)."""
    forces_replacement: bool = False

    def to_dict(self) -> JSONObject:
        out: JSONObject = {"path": self.path, "op": self.op}
        if self.op != "add":
            out["before"] = self.before
        if self.op != "remove":
            out["after"] = self.after
        out["forcesReplacement"] = self.forces_replacement
        return out


@dataclass(frozen=True)
class Kept:
    """What the replacement of a launched job keeps of the run it replaces: the new generation starts in a fresh
    folder and sets the old one aside, its outputs (a run that succeeded) or at least its logs."""

    generation: int
    what: Literal["outputs", "logs"]

    def to_dict(self) -> JSONObject:
        return {"generation": self.generation, "what": self.what}


@dataclass(frozen=True)
class Drift:
    """A field the plan keeps at its live value over the file's: a spending cap raised live (`nodus patch`) that the
    file would lower or remove, which a cap that can only be raised must not be."""

    path: str
    """Dotted from the document root: `spec.maxCostUSD`."""
    live: Any
    file: Any = None
    """What the file says; None when it leaves the field out."""

    def to_dict(self) -> JSONObject:
        return {"path": self.path, "live": self.live, "file": self.file}

    def line(self, action: Action) -> str:
        """`job.yaml: TrainingJob/NAME: spec.maxCostUSD is 40.00 live (...); the file says 2.00 ...: set ...`."""
        source = (action.source or "").rsplit(":", 1)[0]
        where = f"{source}: " if source else ""
        return f"{where}{action.key.kind}/{action.key.name}: {self.detail(source)}"

    def detail(self, source: str) -> str:
        """The line without the file and resource: `spec.maxCostUSD is 40.00 live (...); ...` (`source`: the file)."""
        says = "leaves it out" if self.file is None else f"says {self.file}"
        field_name = self.path.rsplit(".", 1)[-1]
        edit = f'set {field_name}: "{self.live}"' + (f" in {source}" if source else "")
        return (
            f"{self.path} is {self.live} live (raised by nodus patch or an earlier apply); the file {says} and a cap "
            f"can only be raised, so {self.live} stays: {edit} to keep it"
        )


JOB_KINDS = frozenset({"TrainingJob", "Job"})
"""Kinds whose records run as jobs in generations (a replacement is the next one)."""


@dataclass(frozen=True)
class Action:
    """What apply does to one resource, with everything it needs to do exactly that later."""

    type: ActionType
    key: ResourceKey
    reason: str
    desired: JSONObject | None = None
    """The normalised document apply stores (None for delete)."""
    desired_hash: str | None = None
    expected_hash: str | None = None
    """The spec_hash the store held when planned (None for create): a saved plan is stale when it moved."""
    expected_generation: int | None = None
    expected_deleting: bool = False
    changes: tuple[FieldChange, ...] = ()
    forced_by: str | None = None
    """For a replace: the first changed field its kind cannot change in place."""
    source: str | None = None
    """`file:line` of the desired document."""
    keeps: Kept | None = None
    """For the replace of a launched job: which generation's outputs (or logs) stay reachable."""
    drift: tuple[Drift, ...] = ()
    """Live values kept over the file's (a cap raised by `nodus patch`); `desired` holds the live value."""
    waits_for: tuple[ResourceKey, ...] = ()
    """The resources of the same plan this one waits for (the job whose export it reads): applied after them."""

    @property
    def symbol(self) -> str:
        return SYMBOLS[self.type]

    def to_dict(self) -> JSONObject:
        expected = None
        if self.expected_hash is not None:
            expected = {
                "specHash": self.expected_hash,
                "generation": self.expected_generation,
                "deleting": self.expected_deleting,
            }
        out: JSONObject = {
            "action": self.type,
            "symbol": self.symbol,
            "ref": str(self.key),
            "kind": self.key.kind,
            "project": self.key.project,
            "name": self.key.name,
            "source": self.source,
            "reason": self.reason,
            "forcedBy": self.forced_by,
            "expected": expected,
            "desiredHash": self.desired_hash,
            "desired": self.desired,
            "changes": [change.to_dict() for change in self.changes],
        }
        if self.keeps is not None:
            out["keeps"] = self.keeps.to_dict()
        if self.drift:
            out["drift"] = [drift.to_dict() for drift in self.drift]
        if self.waits_for:  # only when there are any: the plan.json of a plan without them reads as before
            out["waitsFor"] = [_key_dict(key) for key in self.waits_for]
        return out


@dataclass(frozen=True)
class Plan:
    """Every action of one plan, in apply order, and what it was planned against."""

    actions: tuple[Action, ...]
    unmanaged: tuple[ResourceKey, ...] = ()
    """In the store, not in the files, kept because prune was off."""
    run_made: tuple[ResourceKey, ...] = ()
    """Made by `nodus run`, in no file: kept whatever prune says (`made_by_run`)."""
    observed_serial: int = 0
    """The store's serial when planned: unchanged means the saved plan is certainly still valid."""
    prune: bool = False
    refresh_only: bool = False
    observed_count: int = 0

    @property
    def changes(self) -> tuple[Action, ...]:
        """The actions that do something (no-ops left out)."""
        return tuple(action for action in self.actions if action.type != "noop")

    @property
    def has_changes(self) -> bool:
        return any(action.type != "noop" for action in self.actions)

    @property
    def exit_code(self) -> int:
        """What `nodus plan` exits with: 0 no changes, 2 changes (1, an error, is the CLI's)."""
        return 2 if self.has_changes else 0

    def counts(self) -> dict[ActionType, int]:
        counted = dict.fromkeys(ACTION_TYPES, 0)
        for action in self.actions:
            counted[action.type] += 1
        return counted

    @property
    def summary(self) -> str:
        """One line, worded the same way every time (scripts and golden files read it)."""
        if self.refresh_only:
            noun = "resource" if self.observed_count == 1 else "resources"
            return f"Refresh only: {self.observed_count} {noun} observed, no changes planned."
        counted = self.counts()
        if self.has_changes:
            line = (
                f"Plan: {counted['create']} to add, {counted['update']} to change, {counted['replace']} to replace, "
                f"{counted['delete']} to destroy, {counted['noop']} unchanged."
            )
        else:
            line = f"No changes: {counted['noop']} unchanged."
        if self.unmanaged:
            line += f" {len(self.unmanaged)} unmanaged kept (in the store, not in the files; --prune destroys them)."
        if self.run_made:
            line += f" {len(self.run_made)} made by nodus run kept (--prune leaves them; nodus delete removes them)."
        return line

    def to_dict(self) -> JSONObject:
        return {
            "format": PLAN_FORMAT,
            "version": PLAN_FORMAT_VERSION,
            "summary": self.summary,
            "observedSerial": self.observed_serial,
            "observedCount": self.observed_count,
            "prune": self.prune,
            "refreshOnly": self.refresh_only,
            "counts": dict(self.counts()),
            "actions": [action.to_dict() for action in self.actions],
            "unmanaged": [_key_dict(key) for key in self.unmanaged],
            # Only when there are any: the plan.json of a project nodus run never touched reads as before.
            **({"runMade": [_key_dict(key) for key in self.run_made]} if self.run_made else {}),
        }

    def to_json(self) -> str:
        """plan.json: stable text (same plan, same bytes), with the documents apply will store."""
        return json.dumps(self.to_dict(), indent=2, ensure_ascii=False) + "\n"

    @classmethod
    def from_json(cls, text: str, origin: str = "plan.json") -> Plan:
        """Read a saved plan; PlanError naming `origin` and the field when it is not one this nodus wrote."""
        return _PlanReader(origin).plan(text)


# --- planning ------------------------------------------------------------------------------------------


def plan(
    desired: Iterable[Desired],
    observed: Iterable[ResourceRecord],
    *,
    prune: bool = False,
    refresh_only: bool = False,
    observed_serial: int = 0,
) -> Plan:
    """Compare the files with the store. PlanError when two desired documents share a key."""
    records = {record.key: record for record in observed}
    if refresh_only:
        return Plan((), observed_serial=observed_serial, refresh_only=True, observed_count=len(records))
    wanted = _by_key(desired)
    actions = _with_waits([_action_for(item, records.get(key)) for key, item in wanted.items()], records)
    outside = [key for key, record in records.items() if key not in wanted and not record.deleting]
    gone = sorted(key for key in outside if not created_by_sdk(records[key]) and not made_by_run(records[key]))
    if prune:
        actions += [_delete(records[key]) for key in gone]
    return Plan(
        tuple(_apply_order(actions)),
        unmanaged=() if prune else tuple(gone),
        run_made=tuple(sorted(key for key in outside if made_by_run(records[key]))),
        observed_serial=observed_serial,
        prune=prune,
        observed_count=len(records),
    )


CREATED_BY = "nodus.dev/created-by"
SDK = "sdk"
"""The label `nodus.recipes` puts on what it creates (`rl.train` Environments and TrainingJobs). Those live in
no file of the repository, so they are neither "unmanaged" nor destroyed by `--prune`; `nodus delete` removes them."""


def created_by_sdk(record: ResourceRecord) -> bool:
    labels = (record.spec.get("metadata") or {}).get("labels") or {}
    return bool(labels.get(CREATED_BY) == SDK)


NODUS_RUN = "nodus-run"
"""The label value `nodus run` (`nodus.reconciler.run_job`) puts on the Job it makes."""
NODUS_CREATE = "nodus-create"
"""The label value `nodus create` (`nodus.cli.endpoints`) puts on what it makes: kept by prune as `nodus run`'s."""


def made_by_run(record: ResourceRecord) -> bool:
    """Whether `nodus run` made this record, so no file declares it and `--prune` must not destroy it.

    Why kept rather than shown as a destroy: a Terraform user's prune destroys what the configuration once made
    and no longer has, never what was made beside it (`terraform import` is how outside things join), and
    `kubectl apply --prune` deletes only objects that carry apply's own last-applied annotation, never those of
    `kubectl run` or `kubectl create`. A run started from the command line is of that second sort: it was never
    in the folder, so the folder leaving it out says nothing about it. Destroying it would also stop a paid job
    mid-run and remove its logs and outputs. The plan names it instead ("N made by nodus run kept"), and
    `nodus delete job/NAME` removes it."""
    labels = (record.spec.get("metadata") or {}).get("labels") or {}
    return labels.get(CREATED_BY) in (NODUS_RUN, NODUS_CREATE)


def stale_reasons(saved: Plan, observed: Iterable[ResourceRecord]) -> list[str]:
    """Why a saved plan no longer applies exactly, one line per resource that moved; empty when it does.

    Only what the plan relies on counts: the records of its actions (and, for a pruning plan, any record it
    would not have destroyed). Status writes bump the serial but do not make a plan stale.
    """
    records = {record.key: record for record in observed}
    reasons = []
    for action in saved.actions:
        moved = _moved(action, records.get(action.key))
        if moved:
            reasons.append(f"{action.key} {moved}")
    if saved.prune:
        planned = {action.key for action in saved.actions}
        for key in sorted(records):
            record = records[key]
            if key in planned or record.deleting or created_by_sdk(record) or made_by_run(record):
                continue  # a pruning plan destroys neither, so one made since leaves the plan as it was
            reasons.append(f"{key} was created since the plan")
    return reasons


def _by_key(desired: Iterable[Desired]) -> dict[ResourceKey, Desired]:
    out: dict[ResourceKey, Desired] = {}
    for item in desired:
        earlier = out.get(item.key)
        if earlier is not None:
            raise PlanError(f"{item.source}: {item.key}: defined twice: here and at {earlier.source}")
        out[item.key] = item
    return out


def drift_lines(made: Plan) -> list[str]:
    """One line per live value the plan keeps over the file's (`Drift.line`), for `warning:` lines on stderr."""
    return [drift.line(action) for action in made.actions for drift in action.drift]


def _action_for(item: Desired, record: ResourceRecord | None) -> Action:
    if record is None:
        common: dict[str, Any] = {"desired": item.document, "desired_hash": item.spec_hash, "source": item.source}
        return Action("create", item.key, "not in the state store", **common)
    item, drift = _keep_raised(item, record)
    common = {"desired": item.document, "desired_hash": item.spec_hash, "source": item.source, "drift": drift}
    common |= {"expected_hash": record.spec_hash, "expected_generation": record.generation}
    if record.spec_hash == item.spec_hash and not record.deleting:
        return Action("noop", item.key, "matches the state store", **common)
    before = normalise_observed(record)
    if not record.deleting and spec_hash(before) == item.spec_hash:
        # Only formatting, or a default this nodus fills in and an older one did not, differs.
        return Action("noop", item.key, "matches the state store once normalised", **common)
    changes = diff_documents(before, item.document, _in_place_paths(item.key.kind))
    if record.deleting:
        reason = "the stored one is being deleted; created again once it is gone"
        return Action("replace", item.key, reason, expected_deleting=True, changes=changes, **common)
    forcing = next((change for change in changes if change.forces_replacement), None)
    if forcing is not None:
        reason = f"{forcing.path} cannot change in place"
        kept = _kept(record)
        return Action("replace", item.key, reason, changes=changes, forced_by=forcing.path, keeps=kept, **common)
    return Action("update", item.key, "changed in place", changes=changes, **common)


def _keep_raised(item: Desired, record: ResourceRecord) -> tuple[Desired, tuple[Drift, ...]]:
    """`item` with each cap of its kind's `RAISE_ONLY` that the file would lower (or remove) set to the live value,
    and the drift that says so. A record being deleted is created afresh: nothing of it is kept."""
    cls = BY_KIND.get(item.key.kind)
    if cls is None or not cls.RAISE_ONLY or record.deleting:
        return item, ()
    document = json.loads(json.dumps(item.document))  # a copy: the parsed document stays as the file wrote it
    found: list[Drift] = []
    for dotted in cls.RAISE_ONLY:
        *parents, name = dotted.split(".")
        live_parent, file_parent = record.spec.get("spec") or {}, document.get("spec")
        for part in parents:
            live_parent = live_parent.get(part) if isinstance(live_parent, dict) else None
            file_parent = file_parent.get(part) if isinstance(file_parent, dict) else None
        if not isinstance(live_parent, dict) or not isinstance(file_parent, dict):
            continue
        live, wanted = live_parent.get(name), file_parent.get(name)
        if live is None or not _lower(wanted, live):
            continue
        file_parent[name] = live
        found.append(Drift(f"spec.{dotted}", live, wanted))
    if not found:
        return item, ()
    return dataclasses.replace(item, document=document, spec_hash=spec_hash(document)), tuple(found)


def _lower(wanted: Any, live: Any) -> bool:
    """Whether the file's cap (`wanted`, None when left out) is below the live one; a value that is not a number
    is not compared (validation refuses it elsewhere)."""
    if wanted is None:
        return True
    try:
        return Decimal(str(wanted)) < Decimal(str(live))
    except InvalidOperation:
        return False


def _kept(record: ResourceRecord) -> Kept | None:
    """What replacing `record` keeps, from its observed status: a launched job's generation, with its outputs when
    it succeeded (outputs are collected then), else its logs. None for other kinds and jobs never launched."""
    if record.key.kind not in JOB_KINDS or "launchGeneration" not in record.status:
        return None
    generation = record.status.get("launchGeneration")
    if isinstance(generation, bool) or not isinstance(generation, int) or generation < 1:
        return None
    return Kept(generation, "outputs" if record.status.get("phase") == Phase.SUCCEEDED else "logs")


CHANGING = frozenset({"create", "update", "replace"})


def _with_waits(actions: list[Action], records: Mapping[ResourceKey, ResourceRecord]) -> list[Action]:
    """Each create, update or replace with the resources of the plan it waits for (`waits_for`); PlanError when some
    wait for each other (each would wait for the other's export for ever)."""
    changing = {action.key: action.desired for action in actions if action.type in CHANGING and action.desired}
    ready = {
        key: int(record.status.get("revision") or 0)
        for key, record in records.items()
        if key.kind == "Volume" and record.status.get("phase") == Phase.READY
    }
    waits = waits_for(changing, ready)
    loop = cycle(waits)
    if loop is not None:
        source = next((action.source for action in actions if action.key == loop[0]), None)
        chain = " -> ".join(str(key) for key in loop)
        raise PlanError(
            f"{source + ': ' if source else ''}{loop[0]}: waits for itself ({chain}): each would wait for the other's "
            "export for ever",
            hint="let one of them read a revision that exists (model.volume.revision, data.revision) or another Volume",
        )
    return [replace(action, waits_for=waits[action.key]) if action.key in waits else action for action in actions]


def _delete(record: ResourceRecord) -> Action:
    return Action(
        "delete",
        record.key,
        "not in the files (--prune)",
        expected_hash=record.spec_hash,
        expected_generation=record.generation,
    )


def _apply_order(actions: list[Action]) -> list[Action]:
    """Creates and changes wave by wave; deletes last, in reverse waves (dependents go first)."""

    waits = {action.key: action.waits_for for action in actions if action.waits_for}

    def forward(action: Action) -> tuple[int, int, ResourceKey]:
        return wave_of(action.key.kind), depth(action.key, waits), action.key

    def backward(action: Action) -> tuple[int, ResourceKey]:
        return -wave_of(action.key.kind), action.key

    kept = sorted((action for action in actions if action.type != "delete"), key=forward)
    deleted = sorted((action for action in actions if action.type == "delete"), key=backward)
    return kept + deleted


def _moved(action: Action, record: ResourceRecord | None) -> str | None:
    if action.expected_hash is None:
        return None if record is None else "was created since the plan"
    if record is None:
        return "was deleted since the plan"
    if record.spec_hash != action.expected_hash:
        return f"changed since the plan (generation {action.expected_generation} -> {record.generation})"
    if record.deleting and not action.expected_deleting:
        return "was marked for deletion since the plan"
    return None


# --- field differences ---------------------------------------------------------------------------------


def _in_place_paths(kind: str) -> tuple[Path, ...]:
    cls = BY_KIND.get(kind)
    declared = cls.UPDATABLE_IN_PLACE if cls is not None else ()
    return ALWAYS_IN_PLACE + tuple(("spec", *dotted.split(".")) for dotted in declared)


def diff_documents(before: JSONObject, after: JSONObject, in_place: tuple[Path, ...] = ()) -> tuple[FieldChange, ...]:
    """Field-level differences, leaf by leaf, in the desired document's field order.

    A field under one of `in_place` may change without replacing the resource; any other is marked
    `forces_replacement`. Lists of equal length are compared item by item, others as a whole.
    """
    found: list[tuple[Path, Any, Any]] = []
    _walk((), before, after, found)
    return tuple(_field_change(path, old, new, in_place) for path, old, new in found)


def _walk(path: Path, before: Any, after: Any, found: list[tuple[Path, Any, Any]]) -> None:
    # An object added or removed as a whole is shown field by field, so that adding `tracking` to a job
    # names the fields (and each may be in place or not); an empty one is shown as itself.
    if isinstance(after, dict) and (isinstance(before, dict) or (before is MISSING and after)):
        _walk_object(path, before if isinstance(before, dict) else {}, after, found)
    elif isinstance(before, dict) and after is MISSING and before:
        _walk_object(path, before, {}, found)
    elif isinstance(before, list) and isinstance(after, list) and len(before) == len(after):
        for index, (old, new) in enumerate(zip(before, after, strict=True)):
            _walk((*path, index), old, new, found)
    elif not _same(before, after):
        found.append((path, before, after))


def _walk_object(path: Path, before: Mapping[str, Any], after: Mapping[str, Any], found: list[Any]) -> None:
    for name in _union(before, after):
        _walk((*path, name), before.get(name, MISSING), after.get(name, MISSING), found)


def _union(before: Mapping[str, Any], after: Mapping[str, Any]) -> list[str]:
    return list(after) + [name for name in before if name not in after]


def _same(before: Any, after: Any) -> bool:
    # JSON tells 1, 1.0 and true apart (their hashes differ); Python's == does not.
    return type(before) is type(after) and bool(before == after)


def _field_change(path: Path, before: Any, after: Any, in_place: tuple[Path, ...]) -> FieldChange:
    if before is MISSING:
        op: FieldOp = "add"
    elif after is MISSING:
        op = "remove"
    else:
        op = "change"
    forces = not any(path[: len(allowed)] == allowed for allowed in in_place)
    return FieldChange(
        format_path(path),
        op,
        None if before is MISSING else before,
        None if after is MISSING else after,
        forces_replacement=forces,
    )


_PLAIN_NAME = re.compile(r"^[A-Za-z0-9_-]+$")


def format_path(path: Path) -> str:
    """`spec.modes[1]`, `metadata.labels["nodus.dev/team"]`: a name with dots or spaces is quoted."""
    out = ""
    for part in path:
        if isinstance(part, int):
            out += f"[{part}]"
        elif _PLAIN_NAME.match(part):
            out += ("." if out else "") + part
        else:
            out += f"[{json.dumps(part, ensure_ascii=False)}]"
    return out


# --- reading plan.json ---------------------------------------------------------------------------------


def _key_dict(key: ResourceKey) -> JSONObject:
    return {"kind": key.kind, "project": key.project, "name": key.name}


@dataclass
class _PlanReader:
    """Reads plan.json back, field by field, so a damaged file is named precisely instead of half-applied."""

    origin: str
    where: list[str] = field(default_factory=list)

    def fail(self, message: str) -> PlanError:
        at = ".".join(self.where)
        return PlanError(
            f"{self.origin}: {at + ': ' if at else ''}{message}",
            hint="make a new plan with `nodus plan --out plan.json`",
        )

    def plan(self, text: str) -> Plan:
        try:
            data = json.loads(text)
        except json.JSONDecodeError as exc:
            raise self.fail(f"not a nodus plan: invalid JSON at line {exc.lineno} column {exc.colno}") from None
        if not isinstance(data, dict) or data.get("format") != PLAN_FORMAT:
            raise self.fail(f'not a nodus plan (no "format": "{PLAN_FORMAT}")')
        version = data.get("version")
        if version != PLAN_FORMAT_VERSION:
            readable = f"this nodus reads {PLAN_FORMAT_VERSION}"
            raise self.fail(f"plan format version {json.dumps(version)} is not readable here ({readable})")
        actions = tuple(self.action(item, index) for index, item in enumerate(self.get(data, "actions", list)))
        unmanaged = tuple(
            self.key(item, f"unmanaged[{index}]") for index, item in enumerate(self.get(data, "unmanaged", list))
        )
        run_made = tuple(
            self.key(item, f"runMade[{index}]")
            for index, item in enumerate(self.get(data, "runMade", list, optional=True) or [])
        )
        return Plan(
            actions,
            unmanaged=unmanaged,
            run_made=run_made,
            observed_serial=self.get(data, "observedSerial", int),
            prune=self.get(data, "prune", bool),
            refresh_only=self.get(data, "refreshOnly", bool),
            observed_count=self.get(data, "observedCount", int),
        )

    def get(self, data: Mapping[str, Any], name: str, kind: type, *, optional: bool = False) -> Any:
        value = data.get(name)
        if value is None and optional:
            return None
        # bool is an int in Python; a count must not be `true`.
        if not isinstance(value, kind) or (kind is int and isinstance(value, bool)):
            raise self.fail(f"{name}: must be {_KIND_WORDS[kind]} (got {json.dumps(value)[:40]})")
        return value

    def key(self, data: Any, where: str) -> ResourceKey:
        self.where.append(where)
        if not isinstance(data, dict):
            raise self.fail("must be an object with kind, project and name")
        key = ResourceKey(self.get(data, "kind", str), self.get(data, "project", str), self.get(data, "name", str))
        self.where.pop()
        return key

    def action(self, data: Any, index: int) -> Action:
        key = self.key(data, f"actions[{index}]")
        self.where.append(f"actions[{index}] ({key})")
        kind = self.get(data, "action", str)
        if kind not in ACTION_TYPES:
            raise self.fail(f"action: must be one of {', '.join(ACTION_TYPES)} (got {kind!r})")
        desired = self.get(data, "desired", dict, optional=True)
        desired_hash = self.get(data, "desiredHash", str, optional=True)
        self.check_desired(kind, key, desired, desired_hash)
        expected = self.get(data, "expected", dict, optional=True)
        changes = tuple(self.change(item, i) for i, item in enumerate(self.get(data, "changes", list)))
        action = Action(
            cast(ActionType, kind),
            key,
            self.get(data, "reason", str),
            desired=desired,
            desired_hash=desired_hash,
            expected_hash=None if expected is None else self.get(expected, "specHash", str),
            expected_generation=None if expected is None else self.get(expected, "generation", int),
            expected_deleting=False if expected is None else self.get(expected, "deleting", bool),
            changes=changes,
            forced_by=self.get(data, "forcedBy", str, optional=True),
            source=self.get(data, "source", str, optional=True),
            keeps=self.kept(self.get(data, "keeps", dict, optional=True)),
            drift=tuple(self.drift(item) for item in self.get(data, "drift", list, optional=True) or ()),
            waits_for=tuple(
                self.key(item, f"waitsFor[{index}]")
                for index, item in enumerate(self.get(data, "waitsFor", list, optional=True) or [])
            ),
        )
        if (action.expected_hash is None) != (kind == "create"):
            raise self.fail("expected: a create expects nothing in the store, every other action a spec hash")
        self.where.pop()
        return action

    def drift(self, data: Any) -> Drift:
        if not isinstance(data, dict):
            raise self.fail("drift: each entry must be an object with path, live and file")
        return Drift(self.get(data, "path", str), data.get("live"), data.get("file"))

    def kept(self, data: Mapping[str, Any] | None) -> Kept | None:
        if data is None:
            return None
        what = self.get(data, "what", str)
        if what not in ("outputs", "logs"):
            raise self.fail(f"keeps.what: must be outputs or logs (got {what!r})")
        return Kept(self.get(data, "generation", int), cast(Literal["outputs", "logs"], what))

    def check_desired(self, kind: str, key: ResourceKey, desired: JSONObject | None, desired_hash: str | None) -> None:
        if kind == "delete":
            if desired is not None:
                raise self.fail("desired: a delete has no desired document")
            return
        if desired is None or desired_hash is None:
            raise self.fail("desired and desiredHash are required")
        if spec_hash(desired) != desired_hash:
            raise self.fail("desired: the document does not match desiredHash (edited after planning?)")
        try:
            matches = key_of(desired) == key
        except (KeyError, TypeError, AttributeError):
            matches = False
        if not matches:
            raise self.fail("desired: the document's kind, project and name are not the action's")

    def change(self, data: Any, index: int) -> FieldChange:
        self.where.append(f"changes[{index}]")
        if not isinstance(data, dict):
            raise self.fail("must be an object with path and op")
        op = self.get(data, "op", str)
        if op not in FIELD_OPS:
            raise self.fail(f"op: must be one of {', '.join(FIELD_OPS)} (got {op!r})")
        change = FieldChange(
            self.get(data, "path", str),
            cast(FieldOp, op),
            data.get("before"),
            data.get("after"),
            forces_replacement=self.get(data, "forcesReplacement", bool),
        )
        self.where.pop()
        return change


_KIND_WORDS: dict[type, str] = {
    str: "a string",
    int: "an integer",
    bool: "true or false",
    list: "a list",
    dict: "an object",
}
