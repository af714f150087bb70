"""`nodus get`, `nodus describe`, `nodus wait` and `nodus unlock`: reading observed state, and the lease.

Who calls it: `nodus.cli.main` registers the commands. They open the project's state store
(`nodus.reconciler.project`) and print through `nodus.reconciler.views`. `get` and `describe` are pure reads:
they start nothing, export nothing and write no status; they show how old each job's last heartbeat is (read
through its kind's controller, `Controller.heartbeat_at`) and say when the status is older than it (`nodus
refresh` moves it). `wait` is where the reconcile loop runs: it refreshes (`nodus.reconciler.refresh`) under
the apply lease, and skips a refresh while an apply holds the lease.
"""

from __future__ import annotations

import re
import sys
import time
from pathlib import Path
from typing import TYPE_CHECKING

import click

from nodus.cli.console import err_line, line, print_json, rich_console
from nodus.errors import ConfigError, NodusError
from nodus.reconciler.controllers.base import Heartbeat
from nodus.reconciler.controllers.coverage import has_controller, stored_only_note
from nodus.reconciler.controllers.registry import REGISTRY
from nodus.reconciler.project import Project
from nodus.reconciler.refresh import refresh_under_lease
from nodus.reconciler.state.records import (
    DEFAULT_PROJECT,
    LeaseHeld,
    ResourceKey,
    ResourceRecord,
    StateStore,
    missing_record,
)
from nodus.reconciler.views import attempts as attempts_view
from nodus.reconciler.views import columns, jsonpath
from nodus.reconciler.views import results as results_view
from nodus.reconciler.views.times import readable
from nodus.reconciler.waiting import Requeues
from nodus.specs.status_names import ENDED_PHASES, LIVE_PHASES, Phase

if TYPE_CHECKING:
    from nodus.reconciler.views.catalogs import Catalog

_OUTPUT = click.STRING


def resolve_kind(name: str) -> str:
    """`tj`, `trainingjobs`, `TrainingJob` -> `TrainingJob`; an unknown name is a one-line error with the kinds."""
    from nodus.specs.registry import KINDS, kind_for_name

    found = kind_for_name(name)
    if found is None:
        known = ", ".join(cls.KIND for cls in KINDS)
        raise ConfigError(f"unknown kind {name!r}", hint=f"kinds: {known} (short names such as tj, env, ep)")
    return found.KIND


def split_target(target: str, name: str | None = None) -> tuple[str, str | None]:
    """`tj/NAME` or (`tj`, NAME) -> (kind, name)."""
    kind, slash, rest = target.partition("/")
    if slash:
        if name:
            raise ConfigError(f"give the name once: {target} or {kind} {name}")
        return resolve_kind(kind), rest
    return resolve_kind(kind), name


_NO_STATUS = {"phase": Phase.UNKNOWN.value}
"""What `describe` shows of a resource nothing wrote a status for (plain strings: YAML knows no enums)."""


def _open(path: Path | None, state: str | None) -> tuple[Project, StateStore]:
    project = Project.find(path, state=state)
    store = project.open_state(create=False)  # a read: no .nodus/ where there is none
    return project, store


SILENT_AFTER_S = 30.0
"""A live job whose supervisor has not heartbeated for this long may be lost (supervisors beat every 5 s)."""


def read_heartbeats(project: Project, store: StateStore, records: list[ResourceRecord]) -> dict[ResourceKey, Heartbeat]:
    """Each record's job's last heartbeat, for the kinds whose controller runs jobs (read only).

    Reads need no executor: a job whose stored status says it ended, or that never launched,
    is shown from the store alone, and an executor that cannot be reached (a Ray cluster down, no token) is one
    line on stderr, after which the stored status is shown as it is."""
    found: dict[ResourceKey, Heartbeat] = {}
    for record in records:
        controller = REGISTRY.for_kind(record.key.kind)
        if not controller.heartbeats or record.missing or record.status.get("phase") in ENDED_PHASES:
            continue
        if not store.launches(record.key):  # nothing launched yet: no job, no heartbeat to ask an executor for
            continue
        try:
            beat = controller.heartbeat(record, project)
        except NodusError as exc:
            err_line(f"note: live state could not be read ({exc.message}); showing the stored status")
            return found
        if beat is not None:
            found[record.key] = beat
    return found


def _ago(at: float, now: float) -> str:
    return f"{columns.age(max(0.0, now - at))} ago"


def heartbeat_note(record: ResourceRecord, beat: Heartbeat, now: float) -> str | None:
    """Why the status shown is behind the job, or None: a live job that stopped heartbeating (its supervisor
    may be lost), or a job that moved on since its status was written (nothing refreshed it since)."""
    if record.status.get("phase") in LIVE_PHASES and now - beat.at > SILENT_AFTER_S:
        return "no heartbeat since: its supervisor may be lost; nodus refresh recovers it"
    if beat.ahead_of(record.status):
        written = f" from {_ago(record.updated_at, now)}" if record.updated_at else ""
        return f"the status below is{written}, older than the heartbeat: run nodus refresh"
    return None


def _records(store: StateStore, kind: str, name: str | None, namespace: str | None) -> list[ResourceRecord]:
    records = store.list(kind, namespace)
    records += _missing(store, kind, namespace, {record.key for record in records})
    if name is not None:
        records = [r for r in records if r.key.name == name]
        if not records:
            raise not_found(store, kind, name, namespace)
    return records


def not_found(store: StateStore, kind: str, name: str, namespace: str | None) -> ConfigError:
    """The one line for a resource the store does not hold: `TrainingJob/echo-rn not found in project default (did
    you mean echo-run?)`, with the command that lists what there is (or that creates it, when there is nothing)."""
    from nodus.specs.parse import suggest

    where = f" in project {namespace}" if namespace else ""
    known = sorted({record.key.name for record in store.list(kind, namespace)})
    close = suggest(name, known)
    meant = f" (did you mean {close}?)" if close else ""
    listing = f"nodus get {kind.lower()}" + (f" -n {namespace}" if namespace else "")
    hint = f"{listing} lists them" if known else f"nodus apply creates it from its file; {listing} lists what there is"
    return ConfigError(f"{kind}/{name} not found{where}{meant}", hint=hint)


def _missing(store: StateStore, kind: str, namespace: str | None, stored: set[ResourceKey]) -> list[ResourceRecord]:
    """Rows for resources of `kind` in git at the controller's last revision that the store does not hold (an
    apply that failed for them, or one under way): Argo CD's Missing, so they are not silently absent."""
    found = [
        missing_record(sync)
        for sync in store.sync_records()
        if sync.key.kind == kind
        and sync.desired_hash
        and sync.key not in stored
        and (namespace is None or sync.key.project == namespace)
    ]
    return sorted(found, key=lambda record: (record.key.project, record.key.name))


def _print(
    kind: str,
    records: list[ResourceRecord],
    output: str,
    heartbeats: dict[ResourceKey, Heartbeat],
    view: list[columns.Column] | None = None,
) -> None:
    if output.startswith("jsonpath="):
        template = output.removeprefix("jsonpath=")
        for record in records:
            line(jsonpath.evaluate(template, columns.document(record)))
        return
    if output == "json":
        documents = [columns.document(r) for r in records]
        print_json(documents[0] if len(documents) == 1 else {"items": documents})
        return
    if output == "yaml":
        import yaml

        documents = [columns.document(r) for r in records]
        line(yaml.safe_dump_all(documents, sort_keys=False).rstrip())
        return
    if output not in ("table", "wide"):
        raise ConfigError(f"-o {output!r} is not table, wide, yaml, json or jsonpath=TEMPLATE")
    if not records:
        line(f"No {kind} resources found.")
        return
    titles, values = columns.rows(kind, records, wide=output == "wide", base=view)
    if output == "wide" and REGISTRY.for_kind(kind).heartbeats:
        now = time.time()
        titles.append("HEARTBEAT")
        for record, row in zip(records, values, strict=True):
            beat = heartbeats.get(record.key)
            row.append("-" if beat is None else _ago(beat.at, now))
    _table(titles, values)


def _table(titles: list[str], values: list[list[str]]) -> None:
    """A table on a terminal; whole rows, never cut to a terminal's width, into a pipe."""
    if not sys.stdout.isatty():
        line(columns.plain(titles, values))
        return
    from rich.table import Table

    table = Table(box=None, header_style="bold", pad_edge=False)
    for title in titles:
        table.add_column(title, no_wrap=True)
    for row in values:
        table.add_row(*row)
    rich_console().print(table)


@click.command("get")
@click.argument("kind")
@click.argument("name", required=False)
@click.option("-o", "--output", default="table", help="table, wide, yaml, json or jsonpath=TEMPLATE.")
@click.option("-w", "--watch", is_flag=True, help="Keep printing as the status changes (Ctrl-C stops).")
@click.option("-n", "--project", "namespace", help="Only this project (default: all).")
@click.option("-l", "--selector", help="Only those whose labels match: key=value,key!=value.")
@click.option("--state", help="State store: a SQLite path or postgresql://... (default: .nodus/state.db).")
@click.option("--path", type=click.Path(path_type=Path), help="Project folder (default: found from here).")
def get(
    kind: str,
    name: str | None,
    output: str,
    watch: bool,
    namespace: str | None,
    selector: str | None,
    state: str | None,
    path: Path | None,
) -> None:
    """List resources of KIND (or one, NAME) with their status; `attempts`: each rank's attempts of the jobs."""
    terms = attempts_view.parse_selector(selector)
    if kind in ATTEMPTS:
        _get_attempts(path, state, name, output, namespace, terms)
        return
    kind, name = split_target(kind, name)
    project, store = _open(path, state)
    try:
        records = _selected(_listed(project, store, kind, name, namespace), terms)
        shown = _render_key(records)
        _show(project, store, kind, records, output, namespace)
        while watch:  # what the loop writes (apply, wait, nodus controller, nodus refresh) as it lands
            time.sleep(2)
            records = _selected(_listed(project, store, kind, name, namespace), terms)
            if _render_key(records) != shown:
                shown = _render_key(records)
                _show(project, store, kind, records, output, namespace)
    except KeyboardInterrupt:
        pass
    finally:
        store.close()


ATTEMPTS = frozenset({"attempts", "attempt"})
"""Not a kind: the attempts of the jobs' ranks, read from their status (`views.attempts`)."""


def _selected(records: list[ResourceRecord], terms: attempts_view.Selector) -> list[ResourceRecord]:
    """The records whose `metadata.labels` match `-l`."""
    if not terms:
        return records
    return [r for r in records if attempts_view.matches((r.spec.get("metadata") or {}).get("labels") or {}, terms)]


def _get_attempts(
    path: Path | None,
    state: str | None,
    name: str | None,
    output: str,
    namespace: str | None,
    terms: attempts_view.Selector,
) -> None:
    """`nodus get attempts [-l ...]`: every attempt of the TrainingJobs' and Jobs' ranks that matches (a pure read)."""
    _, store = _open(path, state)
    try:
        records = [*store.list("TrainingJob", namespace), *store.list("Job", namespace)]
    finally:
        store.close()
    found = [a for a in attempts_view.attempts(records) if attempts_view.matches(a.labels, terms)]
    if name is not None:
        found = [a for a in found if a.name == name]
    if output in ("json", "yaml"):
        documents = [a.document() for a in found]
        if output == "json":
            print_json(documents[0] if len(documents) == 1 and name else {"items": documents})
        else:
            import yaml

            line(yaml.safe_dump_all(documents, sort_keys=False).rstrip())
        return
    if output.startswith("jsonpath="):
        for attempt in found:
            line(jsonpath.evaluate(output.removeprefix("jsonpath="), attempt.document()))
        return
    if output not in ("table", "wide"):
        raise ConfigError(f"-o {output!r} is not table, wide, yaml, json or jsonpath=TEMPLATE")
    if not found:
        line("No attempts found.")
        return
    titles, values = attempts_view.table(found, wide=output == "wide")
    _table(titles, values)


def _listed(
    project: Project, store: StateStore, kind: str, name: str | None, namespace: str | None
) -> list[ResourceRecord]:
    """The rows of `get`: the store's, or for a catalog of project nodus (its Environments, its managed runtimes)
    every entry, the store's record when it has one (`views.catalogs`)."""
    from nodus.reconciler.views.catalogs import catalog_for

    catalog = catalog_for(kind, namespace)
    if catalog is None:
        return _records(store, kind, name, namespace)
    records, problems = catalog.rows(project, store.list(kind, namespace))
    for problem in problems:
        err_line(f"warning: {problem}")
    if name is not None:
        records = [record for record in records if record.key.name == name]
        if not records:
            catalog.describe(project, name, None)  # raises: not in the catalog, naming what it has
    return records


def _show(
    project: Project, store: StateStore, kind: str, records: list[ResourceRecord], output: str, namespace: str | None
) -> None:
    """The records as asked, then, on stderr for a table, a line when a job's status is behind its heartbeat."""
    heartbeats = read_heartbeats(project, store, records)
    from nodus.reconciler.views.catalogs import catalog_for

    catalog = catalog_for(kind, namespace)
    _print(kind, records, output, heartbeats, catalog.columns if catalog else None)
    if output not in ("table", "wide"):
        return
    now = time.time()
    behind = [r.key.name for r in records if r.key in heartbeats and heartbeat_note(r, heartbeats[r.key], now)]
    if behind:
        err_line(f"note: the status of {', '.join(behind)} is older than its job's heartbeat: run nodus refresh")


def _render_key(records: list[ResourceRecord]) -> list[tuple[str, int, int]]:
    return [(str(r.key), r.generation, r.status_version) for r in records]


@click.command("describe")
@click.argument("target")
@click.argument("name", required=False)
@click.option("-n", "--project", "namespace", default=None, help="The project (default: default).")
@click.option("--state", help="State store: a SQLite path or postgresql://...")
@click.option("--path", type=click.Path(path_type=Path), help="Project folder (default: found from here).")
def describe(target: str, name: str | None, namespace: str | None, state: str | None, path: Path | None) -> None:
    """Show one resource: its spec in brief, status, conditions and events (KIND/NAME)."""
    kind, name = split_target(target, name)
    if name is None:
        raise ConfigError("describe needs KIND/NAME", hint="nodus describe tj/my-run")
    project, store = _open(path, state)
    try:
        from nodus.reconciler.views.catalogs import catalog_for

        record = store.get(ResourceKey(kind, namespace or DEFAULT_PROJECT, name))
        catalog = catalog_for(kind, namespace)
        if catalog is not None:
            _describe_catalog(project, store, catalog, name, record)
            return
        if record is None:
            raise not_found(store, kind, name, namespace)
        import yaml

        line(f"Name:        {record.key.name}")
        line(f"Project:     {record.key.project}")
        line(f"Kind:        {kind}")
        line(f"Generation:  {record.generation}")
        beat = read_heartbeats(project, store, [record]).get(record.key)
        if beat is not None:
            now = time.time()
            note = heartbeat_note(record, beat, now)
            line(f"Heartbeat:   {_ago(beat.at, now)}" + (f" ({note})" if note else ""))
        if not has_controller(kind):
            # Its spec may say `state: Running`: that is what was asked for, and nothing runs it.
            line(f"Warning:     {stored_only_note(kind)}; the spec below is what was asked for")
        line("Spec:")
        line(_indent(yaml.safe_dump(record.spec.get("spec", {}), sort_keys=False)))
        line("Status:")
        line(_indent(yaml.safe_dump(readable(record.status) or _NO_STATUS, sort_keys=False)))
        conditions = [c for c in (record.status or {}).get("conditions") or [] if isinstance(c, dict)]
        if conditions:
            line("Conditions:")
            line(_indent("\n".join(_condition(c) for c in conditions)))
        results = results_view.result_lines(record.status or {}, record.key.name)
        if results:
            line("Results:")
            line(_indent("\n".join(results)))
        events = store.events(record.key)
        line("Events:" if events else "Events:      <none>")
        for event in events:
            stamp = time.strftime("%H:%M:%S", time.localtime(event.at))
            times = f" (x{event.count})" if event.count > 1 else ""
            line(f"  {stamp}  {event.type:<7}  {event.reason:<22}  {event.message}{times}")
    finally:
        store.close()


def _describe_catalog(
    project: Project, store: StateStore, catalog: Catalog, name: str, record: ResourceRecord | None
) -> None:
    """`describe KIND/NAME -n nodus`: the catalog entry (an Environment's summary, splits, sample task, graders and
    examples; a runtime's tasks, parameters, presets and step times), then the store's status and events when a
    job of this project has named it."""
    from nodus.reconciler.planning.managed_files import MANAGED_PROJECT
    from nodus.reconciler.views.catalogs import current_record

    lines = catalog.describe(project, name, record)
    shown = current_record(project, catalog, name, record)
    line(f"Name:        {name}")
    line(f"Project:     {MANAGED_PROJECT}")
    line(f"Kind:        {catalog.kind}")
    for text in lines:
        line(text)
    phase = (shown.status or {}).get("phase", "-")
    reason = (shown.status or {}).get("message") or (shown.status or {}).get("reason")
    line(f"Phase:       {phase}" + (f" ({reason})" if reason and phase != Phase.READY else ""))
    events = store.events(shown.key) if record is not None else []
    line("Events:" if events else "Events:      <none>")
    for event in events:
        stamp = time.strftime("%H:%M:%S", time.localtime(event.at))
        line(f"  {stamp}  {event.type:<7}  {event.reason:<22}  {event.message}")


def _condition(condition: dict[str, object]) -> str:
    """`GradingFailures  True   InfrastructureFailure  5 of 960 training gradings failed ...`"""
    reason, message = condition.get("reason") or "", condition.get("message") or ""
    return f"{condition.get('type', '?'):<17}{condition.get('status', '?'):<7}{reason!s:<23}{message}".rstrip()


def _indent(text: str) -> str:
    return "\n".join(f"  {row}" for row in text.rstrip().splitlines())


_FOR = re.compile(r"jsonpath=(?P<path>\{[^}]*\}|[^=]+)=(?P<value>.*)")


@click.command("wait")
@click.argument("target")
@click.option("--for", "condition", required=True, help="jsonpath='{.status.phase}'=Succeeded")
@click.option("--timeout", default="5m", show_default=True, help="How long to wait (30s, 8m, 1h).")
@click.option("-n", "--project", "namespace", default=None)
@click.option("--state", help="State store: a SQLite path or postgresql://...")
@click.option("--path", type=click.Path(path_type=Path), help="Project folder (default: found from here).")
def wait(
    target: str, condition: str, timeout: str, namespace: str | None, state: str | None, path: Path | None
) -> None:
    """Wait until a resource matches a condition (exit 1 on timeout, or once it can no longer match: a job that
    ended otherwise, or one whose Environment failed or is not built)."""
    from nodus.specs.types import parse_duration

    kind, name = split_target(target)
    if name is None:
        raise ConfigError(
            "wait needs KIND/NAME", hint="nodus wait tj/my-run --for=jsonpath='{.status.phase}'=Succeeded"
        )
    match = _FOR.fullmatch(condition)
    if match is None:
        raise ConfigError(f"--for {condition!r} is not jsonpath='{{.path}}'=VALUE")
    deadline = time.monotonic() + parse_duration(timeout).total_seconds()
    project, store = _open(path, state)
    key = ResourceKey(kind, namespace or DEFAULT_PROJECT, name)
    requeues = Requeues()  # a job waiting on a dependency: said, and reconciled again after its delay
    try:
        if store.get(key) is None:  # nothing to wait for: said at once, not at the timeout
            raise not_found(store, kind, name, namespace)
        _refresh(project, store, f"nodus wait {target}")
        while True:
            for text in requeues.look(project, store, [key], f"nodus wait {target}"):
                err_line(text)
            record = store.get(key)
            if record is None:  # deleted while waited for
                raise not_found(store, kind, name, namespace)
            value = jsonpath.evaluate(match.group("path"), columns.document(record))
            if value == match.group("value"):
                line(f"{kind.lower()}/{name} condition met")
                return
            never = cannot_become_true(record, store, match.group("path"))
            if never is not None:
                wanted = f"{match.group('path')}={match.group('value')}"
                raise ConfigError(f"{kind}/{name} will not reach {wanted}: {never}")
            if time.monotonic() >= deadline:
                raise ConfigError(f"timed out waiting for {kind}/{name}: {match.group('path')} is {value or '<none>'}")
            time.sleep(1)
            _refresh(project, store, f"nodus wait {target}")
    finally:
        store.close()


def _refresh(project: Project, store: StateStore, operation: str) -> None:
    """Follow running jobs under the lease; while an apply holds it, this look is skipped (the next one goes)."""
    try:
        refresh_under_lease(project, store, operation)
    except LeaseHeld:
        return


def cannot_become_true(record: ResourceRecord, store: StateStore, path: str) -> str | None:
    """Why a condition on `path` that `record` does not meet never will, or None while it still may.

    A job that Failed or was Cancelled, or that is blocked (a dependency failed or nothing will build it),
    changes no more: no condition it does not meet now can become true. One that Succeeded still changes its
    status (an export, a measured timing), so only a wait on its phase is over."""
    from nodus.reconciler.waiting import outcome

    ended = outcome(record, store, suspended_ends=False)
    if ended is None:
        return None
    on_phase = path.strip("{}").strip() == ".status.phase"
    if ended.blocked or on_phase or ended.phase in (Phase.FAILED, Phase.CANCELLED):
        return ended.line().split(": ", 1)[1]
    return None


@click.command("unlock")
@click.argument("lease_id")
@click.option("--state", help="State store: a SQLite path or postgresql://...")
@click.option("--path", type=click.Path(path_type=Path), help="Project folder (default: found from here).")
def unlock(lease_id: str, state: str | None, path: Path | None) -> None:
    """Break the apply lease LEASE_ID (after its holder died; the error that named it gave the ID)."""
    store = Project.find(path, state=state).open_state()
    try:
        broken = store.break_lease(lease_id)
        if broken is None:
            raise ConfigError(f"no lease {lease_id}", hint="the lease may have been released or expired already")
        line(f"unlocked: lease {broken.id} of {broken.holder} ({broken.operation})")
    finally:
        store.close()
