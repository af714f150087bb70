"""One pass of `nodus controller`: fetch the branch, plan, apply when needed (under the apply lease), record.

Who calls it: `nodus.reconciler.gitops.loop.run`, once per interval. The planner, admission and apply are
the ones `nodus plan` and `nodus apply --yes` use (`planning.plan`, `apply.apply_operations` inside
`apply.holding_lease`), so a controller and a person never apply at once and apply the same way; the refresh
step (`nodus.reconciler.refresh`, under the lease) advances running jobs, and their supervisors enforce the caps.

When a pass applies: the plan has changes, or the revision (repository, branch, path) is not the one the last
pass applied in full. The second case re-applies a plan of no-ops, which still runs each kind's controller:
an Environment whose nodus.lock entry came with the new commit becomes Ready, a job waiting for it launches.

Why a controller killed at any point loses nothing: the summary says `Running` before the apply starts and
`Succeeded` only after it ended, so a restarted controller applies that revision again; apply is idempotent
(a spec already stored is not written twice, a launch is recorded under its key before the executor is asked,
and the executor starts nothing twice), and the lease a dead controller held is taken over (`take_lease`).
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from nodus.builder.store import LOCK_NAME
from nodus.errors import ConfigError, NodusError
from nodus.reconciler.apply import ApplyOptions, apply_operations, holding_lease, operations_of
from nodus.reconciler.controllers.blocking import NOT_BUILT
from nodus.reconciler.gitops import sync_status
from nodus.reconciler.gitops.source import GitSource, Revision
from nodus.reconciler.gitops.sync_status import SyncSummary
from nodus.reconciler.planning.desired import Desired
from nodus.reconciler.planning.diff import Plan, created_by_sdk, plan
from nodus.reconciler.planning.managed import read_desired as read_managed
from nodus.reconciler.project import Project
from nodus.reconciler.refresh import refresh_under_lease
from nodus.reconciler.state.records import LeaseHeld, StateStore, SyncRecord
from nodus.specs.status_names import Phase

Notify = Callable[[str, str], None]
"""`notify(event, text)`: `applying` before an apply starts, `resource` for each resource it changes."""

# What a pass did (PassReport.outcome).
SYNCED = "Synced"
"""Applied a revision in full."""
IN_SYNC = "InSync"
"""Nothing to apply."""
FAILED = "Failed"
LOCKED = "Locked"
"""Someone else holds the apply lease: tried again next interval."""


@dataclass(frozen=True)
class Target:
    """What the controller keeps the store in sync with."""

    source: GitSource
    path: str = "."
    """The folder of the specs inside the repository."""
    prune: bool = False
    """Destroy resources that are in the store but no longer in git (as `nodus apply --prune`)."""
    build: bool = False
    """Build Environments that are not built yet (as `nodus apply --build`)."""


@dataclass(frozen=True)
class PassReport:
    """One pass, for the log line and for `--once`'s exit status."""

    outcome: str
    revision: Revision | None
    message: str = ""
    hint: str | None = None
    reason: str = ""
    """Why it applied."""
    changed: int = 0
    launched: int = 0
    sync: dict[str, int] = field(default_factory=dict)
    """Resources per sync state (Synced, OutOfSync)."""
    health: dict[str, int] = field(default_factory=dict)
    """Resources per health (Healthy, Progressing, ...)."""
    elapsed_s: float = 0.0

    @property
    def ok(self) -> bool:
        return self.outcome != FAILED

    def line(self) -> str:
        """The pass in one line, as the controller logs it."""
        at = f" {self.revision.short}" if self.revision else ""
        states = ", ".join(f"{count} {name}" for name, count in {**self.sync, **self.health}.items() if count)
        tail = f"; {states}" if states else ""
        if self.outcome == SYNCED:
            subject = f' "{self.revision.subject}"' if self.revision and self.revision.subject else ""
            done = f"{self.changed} changed, {self.launched} launched"
            return f"synced{at}{subject}: {done}{tail} ({self.elapsed_s:.1f}s)"
        if self.outcome == IN_SYNC:
            return f"in sync at{at}{tail}"
        if self.outcome == LOCKED:
            return f"skipped{at}: {self.message}"
        return f"sync{at} failed: {self.message}"


def sync_pass(target: Target, home: Project, store: StateStore, notify: Notify | None = None) -> PassReport:
    """Bring the store to the branch's head once; a failure is reported (and recorded), never raised."""
    started = time.monotonic()
    told = notify or _quiet
    try:
        revision = target.source.update()
    except NodusError as error:
        return PassReport(FAILED, None, _first(error), error.hint, elapsed_s=time.monotonic() - started)
    try:
        return _sync(target, home, store, revision, told, started)
    except LeaseHeld as held:
        return PassReport(LOCKED, revision, f"{held.message}; trying again next interval", held.hint)
    except NodusError as error:
        message = _first(error, revision.folder)
        with contextlib.suppress(NodusError):  # the store itself may be what failed; the log still says why
            _save(store, target, revision, Phase.FAILED, message, started_at=time.time())
        return PassReport(FAILED, revision, message, error.hint, elapsed_s=time.monotonic() - started)


def _sync(
    target: Target,
    home: Project,
    store: StateStore,
    revision: Revision,
    notify: Notify,
    started: float,
) -> PassReport:
    specs = spec_root(revision, target.path, target.source.shown)
    project = checkout_project(revision.folder, specs, home)
    _refresh(project, store)
    where = f"{target.source.shown}@{revision.short}" + ("" if target.path in (".", "") else f" ({target.path})")
    desired = read_desired(specs, shown=where)
    made = _plan(desired, store, target.prune)
    reason = why_sync(made, sync_status.last_summary(store), revision, target, unbuilt(desired, store))
    if reason is None:
        sync, health = counts(desired, store)
        return PassReport(IN_SYNC, revision, sync=sync, health=health, elapsed_s=time.monotonic() - started)
    with holding_lease(store, f"nodus controller: sync {revision.short} of {target.source.shown}"):
        made = _plan(desired, store, target.prune)  # again under the lease: nothing can move under it now
        now = time.time()
        with store.transaction():
            _save(store, target, revision, Phase.RUNNING, reason, started_at=now)
            store.record_sync(sync_records(revision.sha, desired, made, store, pending=True))
        notify("applying", f"applying {revision.short} ({reason}): {made.summary}")
        try:
            applied = apply_operations(
                operations_of(made.actions),
                project=project,
                store=store,
                options=ApplyOptions(build=target.build),
                reporter=lambda resource, message: notify("resource", f"{resource}: {message}"),
            )
        except NodusError as error:
            lines = _lines(error, revision.folder)
            message = lines[0] + (f" (and {len(lines) - 1} more)" if len(lines) > 1 else "")
            with store.transaction():
                store.record_sync(sync_records(revision.sha, desired, made, store, failure=lines))
                _save(store, target, revision, Phase.FAILED, message, started_at=now)
            sync, health = counts(desired, store)
            elapsed = time.monotonic() - started
            return PassReport(
                FAILED, revision, message, error.hint, reason, sync=sync, health=health, elapsed_s=elapsed
            )
        with store.transaction():
            store.record_sync(sync_records(revision.sha, desired, made, store))
            _save(
                store,
                target,
                revision,
                Phase.SUCCEEDED,
                reason,
                started_at=now,
                changed=len(applied.written),
                launched=len(applied.launched),
            )
    _refresh(project, store)
    sync, health = counts(desired, store)
    return PassReport(
        SYNCED,
        revision,
        reason=reason,
        changed=len(applied.written),
        launched=len(applied.launched),
        sync=sync,
        health=health,
        elapsed_s=time.monotonic() - started,
    )


def unbuilt(desired: list[Desired], store: StateStore) -> list[str]:
    """`Kind/name (Reason)` of each resource of the revision waiting on a build that only an apply with --build
    runs (`controllers.blocking.NOT_BUILT`): a revision synced without --build, or whose nodus.lock entry was
    reset, is not in sync for a controller that builds."""
    found = []
    for item in desired:
        record = store.get(item.key)
        status = record.status if record is not None else {}
        if status.get("phase") == Phase.PENDING and status.get("reason") in NOT_BUILT:
            found.append(f"{item.key.kind}/{item.key.name} is not built ({status['reason']})")
    return found


def why_sync(
    made: Plan, last: SyncSummary | None, revision: Revision, target: Target, unbuilt: Sequence[str] = ()
) -> str | None:
    """Why this pass must apply, or None when the store already holds the revision in full (`unbuilt`: what
    waits on a build, which a target with --build runs)."""
    if made.has_changes:
        return "the plan has changes"
    if last is None:
        return "first sync"
    if (last.repo, last.branch, last.path) != (target.source.repo, target.source.branch, target.path):
        return "another repository, branch or path"
    if last.revision != revision.sha:
        return f"new revision, was {last.revision[:7]}"
    if last.outcome == Phase.RUNNING:
        return "the last sync was interrupted"
    if last.outcome != Phase.SUCCEEDED:
        return "the last sync failed"
    if target.build and unbuilt:
        return f"{unbuilt[0]} and --build builds it" + (f" (and {len(unbuilt) - 1} more)" if len(unbuilt) > 1 else "")
    return None


def sync_records(
    revision: str,
    desired: list[Desired],
    made: Plan,
    store: StateStore,
    *,
    pending: bool = False,
    failure: list[str] | None = None,
) -> list[SyncRecord]:
    """The sync record of every resource of the revision, and of those in the store but not in git.

    A resource the plan left alone (no-op) is recorded with its stored hash: the planner found it equal to
    git's once normalised (a document an older nodus stored), so it is in sync. After a failed apply (`failure`:
    the error's lines) a resource is Failed when its stored spec is not git's or a line of the error names it."""
    noops = {action.key for action in made.actions if action.type == "noop"}
    wanted = {item.key for item in desired}
    found: list[SyncRecord] = []
    for item in desired:
        record = store.get(item.key)
        desired_hash = record.spec_hash if record is not None and item.key in noops else item.spec_hash
        outcome, message = sync_status.APPLIED, ""
        if pending:
            outcome = sync_status.PENDING
        else:
            about = [line for line in failure or [] if f"{item.key}:" in line]
            if record is None or record.spec_hash != desired_hash or about:
                outcome = sync_status.FAILED
                message = (about or failure or ["not applied"])[0]
        found.append(SyncRecord(item.key, revision, desired_hash, outcome, message))
    for record in store.list():
        if record.key not in wanted and not created_by_sdk(record):
            message = "in the store, not in git: nodus controller --prune destroys it"
            found.append(SyncRecord(record.key, revision, "", sync_status.NOT_IN_GIT, message))
    return found


def spec_root(revision: Revision, path: str, shown: str) -> Path:
    """The folder of the specs inside the checkout (ConfigError outside it, or when the commit lacks it)."""
    folder = revision.folder.resolve()
    root = (folder / path).resolve()
    if not root.is_relative_to(folder):
        raise ConfigError(f"--path {path} is outside the repository", hint="give a folder inside the repository")
    if not root.exists():
        raise ConfigError(f"--path {path}: not in {shown} at {revision.short}")
    return root


def checkout_project(folder: Path, specs: Path, home: Project) -> Project:
    """The project the checkout's specs are applied in: nodus.lock from the checkout (the nearest one above the
    specs, never one outside the repository), everything else (images, jobs, the store) from the home project."""
    top = folder.resolve()
    for candidate in [specs, *specs.parents]:
        if not candidate.is_relative_to(top):
            break
        if (candidate / LOCK_NAME).exists():
            return Project(candidate, candidate / LOCK_NAME, home.files, home.state_url)
    return Project(top, top / LOCK_NAME, home.files, home.state_url)


def read_desired(root: Path, *, shown: str | None = None) -> list[Desired]:
    """The resources under `root` as `nodus plan` reads them (managed runtimes joined); SpecError whole.
    `shown`: how messages name `root`."""
    return read_managed([root], shown=shown, hint="check --path")


def _plan(desired: list[Desired], store: StateStore, prune: bool) -> Plan:
    return plan(desired, store.list(), prune=prune, observed_serial=store.serial())


def _refresh(project: Project, store: StateStore) -> None:
    """Follow running jobs (recovery, exports) under the lease; skipped while a person's apply holds it."""
    with contextlib.suppress(LeaseHeld):
        refresh_under_lease(project, store, "nodus controller: refresh")


def counts(desired: list[Desired], store: StateStore) -> tuple[dict[str, int], dict[str, int]]:
    """Resources of the revision per sync state and per health (one missing from the store: OutOfSync, Missing)."""
    sync: dict[str, int] = dict.fromkeys((sync_status.SYNCED, sync_status.OUT_OF_SYNC), 0)
    health: dict[str, int] = dict.fromkeys(sync_status.HEALTH_STATES, 0)
    stored = {record.key: record for record in store.list()}
    for item in desired:
        record = stored.get(item.key)
        health[sync_status.health_of(record)] += 1
        state = sync_status.OUT_OF_SYNC if record is None else sync_status.sync_state(record)
        if state in sync:
            sync[state] += 1
    return sync, health


def _save(
    store: StateStore,
    target: Target,
    revision: Revision,
    outcome: str,
    message: str,
    *,
    started_at: float,
    changed: int = 0,
    launched: int = 0,
) -> None:
    summary = SyncSummary(
        repo=target.source.repo,
        branch=target.source.branch,
        path=target.path,
        revision=revision.sha,
        outcome=outcome,
        message=message,
        started_at=started_at,
        finished_at=None if outcome == Phase.RUNNING else time.time(),
        changed=changed,
        launched=launched,
    )
    sync_status.save_summary(store, summary)


def _lines(error: NodusError, checkout: Path) -> list[str]:
    """The error's lines, with paths in the checkout shown relative to the repository (`jobs/a.yaml:3`)."""
    lines = error.message.splitlines() or [error.message]
    prefixes = (f"{checkout.resolve()}/", f"{checkout}/")
    cleaned = []
    for line in lines:
        for prefix in prefixes:
            line = line.replace(prefix, "")
        cleaned.append(line)
    return cleaned


def _first(error: NodusError, checkout: Path | None = None) -> str:
    """The error's first line (and how many more follow)."""
    lines = _lines(error, checkout) if checkout is not None else (error.message.splitlines() or [error.message])
    return lines[0] + (f" (and {len(lines) - 1} more)" if len(lines) > 1 else "")


def _quiet(event: str, text: str) -> None:
    return None
