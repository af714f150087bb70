"""`nodus plan` and `nodus apply`: what would change, and making it so.

Who calls it: `nodus.cli.main` registers both. They read the specs under PATH (`nodus.specs.parse`), the
observed state from the project's store (`nodus.reconciler.project`), plan with the pure planner
(`nodus.reconciler.planning`) and apply with `nodus.reconciler.apply`.

`nodus plan` is a pure read, like `nodus get`: it plans from the stored status (no supervisor is restarted,
nothing exported, no status written) and says on stderr when a live job's status is older than its heartbeat.
`apply --wait` follows the jobs under the apply lease (`refresh_under_lease`), as `nodus wait` does.

Exit codes of `nodus plan`: 0 no changes, 2 changes, 1 an error (as `terraform plan -detailed-exitcode`).
A TrainingJob that apply would refuse (a parameter typo, a missing runtime) is an error of the plan too: one line
per problem naming the file, the job and the field, and nothing is shown as planned. A cap the file would lower below
its live value (raised by `nodus patch`) is drift, not a refusal: a `warning:` line with the edit that makes the file
agree, and the live cap stays.
Managed runtimes (`runtime: nodus/grpo-lora`) join the files' resources (`nodus.reconciler.planning.managed`).

Plans are priced (`nodus.reconciler.pricing`): each TrainingJob change gets its estimate, from the price table
(`catalog/prices.yaml`, `$NODUS_PRICES`, the project's `prices.yaml`, `--prices FILE`). `nodus apply --dry-run`
prints the Job each TrainingJob of the files would compile into, and each Job of the files, with `status.estimate`
and `status.blockingReasons`, and writes nothing; each blocking reason is also one line on stderr, and any exits 1.

Exit codes of `nodus apply`: 0 when everything applied; 1 when any resource failed (a build, a launch: the
others are still applied, and `Apply failed:` names each with its reason), and with `--wait` when anything
waited for ended other than Succeeded (Ready for an Environment) or can no longer get there (`Wait failed:`).
"""

from __future__ import annotations

import json
import sys
import time
from collections.abc import Sequence
from datetime import UTC, datetime
from pathlib import Path

import click

from nodus.cli.console import err_line, line
from nodus.errors import ConfigError, SpecError
from nodus.reconciler.controllers.coverage import stored_only_notes
from nodus.reconciler.planning.desired import Desired
from nodus.reconciler.planning.diff import Plan, drift_lines, plan
from nodus.reconciler.planning.render import render_json, render_markdown, render_table
from nodus.reconciler.pricing.costs import PlanCosts
from nodus.reconciler.project import Project
from nodus.reconciler.state.records import JSONObject, ResourceKey, ResourceRecord, StateStore
from nodus.reconciler.waiting import Outcome
from nodus.specs.status_names import Phase

RENDERERS = ("json", "markdown", "table")
PRICES_HELP = "A price table merged over the others (catalog, $NODUS_PRICES, the project's prices.yaml)."


def read_desired(path: Path | Sequence[Path]) -> list[Desired]:
    """Every resource under `path` (or several paths), with the managed runtimes they name."""
    from nodus.reconciler.planning.managed import read_desired as read

    return read(
        [path] if isinstance(path, Path) else path,
        hint="point PATH at your spec files or folder",
        note=lambda text: err_line(f"note: {text}", dim=True),
    )


def warn_stale_sources(desired: list[Desired], project: Project) -> None:
    """Say which Environments' code changed without a version bump (the plan itself cannot see it)."""
    from nodus.reconciler.planning.stale_lock import stale_sources

    for text in stale_sources(desired, project.lock_path):
        err_line(f"warning: {text}")


def refuse_pruning_a_file(paths: Sequence[Path], prune: bool) -> None:
    """`--prune` with a file would destroy every resource that file leaves out: `-f FILE` creates and updates only
    (kubectl's `apply -f`); pruning is for the repository's folder, which holds every resource."""
    files = [path for path in paths if path.is_file()]
    if prune and files:
        raise ConfigError(
            f"{files[0]}: --prune with a file would destroy every resource that is not in it; prune from the "
            "repository's folder",
            hint="nodus apply --prune . (or nodus plan . --prune to see what it destroys)",
        )


def _make_plan(desired: list[Desired], store: StateStore, *, prune: bool, refresh_only: bool) -> Plan:
    """The plan, with a `warning:` line on stderr for each live value it keeps over the file's (a cap raised by
    `nodus patch`): drift, shown with the edit that makes the file agree, not a refusal of the whole repository."""
    made = plan(desired, store.list(), prune=prune, refresh_only=refresh_only, observed_serial=store.serial())
    for text in drift_lines(made):
        err_line(f"warning: {text}")
    return made


def price(made: Plan, project: Project, store: StateStore, prices_file: Path | None) -> PlanCosts:
    """The plan's costs, with the price table in force and what the store and this host know."""
    from nodus.reconciler.pricing.facts import Context
    from nodus.reconciler.pricing.plan_prices import price_plan
    from nodus.reconciler.pricing.prices import load_prices

    table = load_prices(project_root=project.root, prices_file=prices_file)
    context = Context(now=_now(), prices=table, project=project, records=tuple(store.list()))
    return price_plan(made, context)


def _now() -> datetime:
    return datetime.now(UTC).replace(microsecond=0)


def render(output: str, made: Plan, costs: PlanCosts | None, next_command: str) -> str:
    if output == "json":
        return render_json(made, costs)
    if output == "markdown":
        return render_markdown(made, costs=costs, next_command=next_command, stored_only=stored_only_notes(made))
    return render_table(made, costs, stored_only=stored_only_notes(made))


@click.command("plan")
@click.argument("path", required=False, type=click.Path(exists=True, path_type=Path))
@click.option("-o", "--output", type=click.Choice(RENDERERS), default="table", show_default=True)
@click.option("--out", "out_file", type=click.Path(path_type=Path), help="Save the plan for `nodus apply FILE`.")
@click.option("--refresh-only", is_flag=True, help="Plan no changes: show the stored status (nodus refresh moves it).")
@click.option("--prune", is_flag=True, help="Destroy resources in the store that are no longer in the files.")
@click.option("--prices", "prices_file", type=click.Path(exists=True, dir_okay=False, path_type=Path), help=PRICES_HELP)
@click.option("--state", help="State store: a SQLite path or postgresql://... (default: .nodus/state.db).")
def plan_command(
    path: Path | None,
    output: str,
    out_file: Path | None,
    refresh_only: bool,
    prune: bool,
    prices_file: Path | None,
    state: str | None,
) -> None:
    """Show what `nodus apply` would change and what it costs (exit 0: nothing, 2: changes, 1: error)."""
    where = path or Path.cwd()
    refuse_pruning_a_file([where], prune)
    desired = read_desired(where)
    project = Project.find(where, state=state)
    warn_stale_sources(desired, project)
    store = project.open_state(create=False)  # planning reads: no .nodus/ where there is none
    try:
        # A pure read, like `nodus get`: the plan is made from the stored status (refreshing would restart a lost
        # supervisor or export outside the apply lease); it says when a job has moved on since that status.
        _note_statuses_behind(project, store)
        result = _make_plan(desired, store, prune=prune, refresh_only=refresh_only)
        _refuse_what_apply_would(result, store, project, prices_file)
        costs = None if refresh_only else price(result, project, store, prices_file)
    finally:
        store.close()
    next_command = "nodus apply" + (f" {path}" if path is not None else "")
    sys.stdout.write(render(output, result, costs, next_command).rstrip("\n") + "\n")
    if out_file is not None:
        out_file.write_text(render_json(result, costs), encoding="utf-8")
        err_line(f"saved to {out_file}: apply it exactly with `nodus apply {out_file}`", dim=True)
    sys.exit(result.exit_code)


def _note_statuses_behind(project: Project, store: StateStore) -> None:
    """On stderr, as `nodus get` says it: the live jobs whose stored status is older than their heartbeat (or
    whose supervisor stopped heartbeating); read only, nothing is started or written."""
    from nodus.cli.resources import heartbeat_note, read_heartbeats
    from nodus.reconciler.controllers.registry import REGISTRY
    from nodus.specs.status_names import LIVE_PHASES

    now = time.time()
    live = [
        record
        for controller in REGISTRY
        if controller.heartbeats
        for record in store.list(controller.kind)
        if record.status.get("phase") in LIVE_PHASES
    ]
    beats = read_heartbeats(project, store, live)  # an executor out of reach is one note line: a plan needs none
    behind = [
        str(record.key) for record in live if record.key in beats and heartbeat_note(record, beats[record.key], now)
    ]
    if behind:
        err_line(f"note: the status of {', '.join(behind)} is older than its job's heartbeat: run nodus refresh")


def _refuse_what_apply_would(made: Plan, store: StateStore, project: Project, prices_file: Path | None) -> None:
    """The admission apply runs first, run at plan time: a typo fails the plan, not only the apply."""
    from nodus.reconciler.apply import operations_of, refusals
    from nodus.reconciler.controllers.placement import placement_of
    from nodus.reconciler.pricing.prices import load_prices

    placement = placement_of(project, load_prices(project_root=project.root, prices_file=prices_file), _now())
    found = refusals(operations_of(made.actions), store, project.root, placement=placement)
    problems = [refusal.plan_line() for refusal in found]
    if problems:
        raise SpecError(problems, hint="nothing was planned; fix the specs and plan again")


@click.command("apply")
@click.argument("target", required=False, type=click.Path(exists=True, path_type=Path))
@click.option(
    "-f",
    "--filename",
    "file_options",
    multiple=True,
    type=click.Path(exists=True, path_type=Path),
    help="Same as TARGET; may repeat (files or folders).",
)
@click.option("--yes", "-y", is_flag=True, help="Do not ask before applying.")
@click.option("--wait", is_flag=True, help="Wait until every resource applied is Ready, Succeeded or Failed.")
@click.option("--build", is_flag=True, help="Build Environments that are not built yet (nodus-build).")
@click.option("--prune", is_flag=True, help="Destroy resources in the store that are no longer in the files.")
@click.option("--timeout", default="30m", show_default=True, help="With --wait: how long.")
@click.option(
    "--dry-run",
    is_flag=True,
    help="Apply nothing: print each Job (and the Job each TrainingJob would compile into), with its estimate and "
    "blocking reasons.",
)
@click.option(
    "-o", "--output", type=click.Choice(["yaml", "json"]), default=None, help="With --dry-run: yaml (default) or json."
)
@click.option("--prices", "prices_file", type=click.Path(exists=True, dir_okay=False, path_type=Path), help=PRICES_HELP)
@click.option("--state", help="State store: a SQLite path or postgresql://... (default: .nodus/state.db).")
def apply_command(
    target: Path | None,
    file_options: tuple[Path, ...],
    yes: bool,
    wait: bool,
    build: bool,
    prune: bool,
    timeout: str,
    dry_run: bool,
    output: str | None,
    prices_file: Path | None,
    state: str | None,
) -> None:
    """Apply the specs under TARGET (default: here), or a saved plan file exactly."""
    from nodus.reconciler.apply import ApplyOptions, apply_plan

    paths = [*file_options, *([target] if target is not None else [])] or [Path.cwd()]
    if dry_run:
        _dry_run(paths, output or "yaml", prices_file, state)
        return
    if output is not None:
        raise ConfigError("-o is for --dry-run", hint="nodus apply -f FILE --dry-run -o yaml")
    chosen = paths[0]
    saved = len(paths) == 1 and chosen.is_file() and chosen.suffix == ".json"
    project = Project.find(chosen, state=state)
    if saved:
        saved_plan = Plan.from_json(chosen.read_text(encoding="utf-8"), origin=str(chosen))

        def make_plan(store: StateStore) -> Plan:
            return saved_plan
    else:
        refuse_pruning_a_file(paths, prune)
        desired = read_desired(paths)
        warn_stale_sources(desired, project)

        def make_plan(store: StateStore) -> Plan:
            made = _make_plan(desired, store, prune=prune, refresh_only=False)
            costs = price(made, project, store, prices_file)
            sys.stdout.write(render_table(made, costs, stored_only=stored_only_notes(made)).rstrip("\n") + "\n")
            if made.has_changes and not yes:
                if not sys.stdin.isatty():
                    raise ConfigError("apply needs confirmation", hint="pass --yes (or apply a saved plan file)")
                if not click.confirm("Apply these changes?", default=False):
                    raise ConfigError("apply cancelled; nothing changed")
            return made

    store = project.open_state()
    try:
        started = time.monotonic()
        _, report = apply_plan(
            make_plan,
            project=project,
            store=store,
            options=ApplyOptions(build=build, keep_going=True),
            reporter=lambda resource, message: err_line(f"{resource}: {message}"),
            saved=saved,
            operation=f"apply {' '.join(str(path) for path in paths)}",
        )
        done = f"{len(report.written)} changed, {len(report.launched)} launched"
        took = f"{time.monotonic() - started:.1f}s"
        if report.failed:
            failures = "; ".join(one_line(f"{key}: {reason}: {message}") for key, reason, message in report.failed)
            err_line(f"Apply failed: {failures} ({done}, {took})")
        else:
            line(f"Apply complete: {done} ({took}).")
        unfinished = wait_for(project, store, list(report.statuses), timeout) if wait else []
    finally:
        store.close()
    if unfinished:
        err_line("Wait failed: " + "; ".join(one_line(outcome.line()) for outcome in unfinished))
    if report.failed or unfinished:
        sys.exit(1)


def one_line(text: str) -> str:
    """A message as one line of a summary (a build's log excerpt may span several)."""
    return " ".join(text.split())


def _dry_run(paths: list[Path], output: str, prices_file: Path | None, state: str | None) -> None:
    """Print the compiled Job of every TrainingJob under `paths`, and every Job, priced; nothing is written, no
    lease taken."""
    from nodus.reconciler.dry_run import dry_run, read_inputs
    from nodus.reconciler.pricing.prices import load_prices

    project = Project.find(paths[0], state=state)
    table = load_prices(project_root=project.root, prices_file=prices_file)
    records = read_records(project)
    inputs = read_inputs(paths, records)
    for note in inputs.notes:
        err_line(f"note: {note}")
    print_dry_run(dry_run(inputs, project=project, prices=table, now=_now()), output)


def print_dry_run(documents: list[JSONObject], output: str) -> None:
    """The dry run's documents on stdout, its notes and blocking reasons on stderr; exit 1 when anything blocks.
    Shared by `nodus apply --dry-run` and `nodus run --dry-run`."""
    from nodus.reconciler.dry_run import as_json_output, blocking_lines, note_lines

    if output == "json":
        sys.stdout.write(json.dumps(as_json_output(documents), indent=2, ensure_ascii=False) + "\n")
    else:
        import yaml

        sys.stdout.write(yaml.safe_dump_all(documents, sort_keys=False, allow_unicode=True, width=120))
    sys.stdout.flush()
    for text in note_lines(documents):
        err_line(one_line(text), dim=True)
    blocked = blocking_lines(documents)
    for text in blocked:
        err_line(one_line(text))
    if blocked:
        count = len(blocked)
        err_line(f"Dry run blocked: {count} blocking reason{'s' if count != 1 else ''}; nothing was applied")
        sys.exit(1)


def read_records(project: Project) -> list[ResourceRecord]:
    """The store's records, read without writing: no store file yet means nothing applied yet (none is created)."""
    from nodus.reconciler.state import open_store

    if not project.has_state():
        return []
    store = open_store(project.state_url, project_state_dir=project.files.root, migrate=False)
    try:
        return store.list()
    finally:
        store.close()


def wait_for(project: Project, store: StateStore, keys: list[ResourceKey], timeout: str) -> list[Outcome]:
    """Follow `keys` until each has ended (or can no longer progress); the outcomes that are not a success.

    Ends early, with those outcomes, as soon as nothing is left that can still change; a timeout is an error. A job
    that waits on a dependency (another job's export, an Environment) is reconciled again when due (`Requeues`), so
    a consumer launches in the same apply once its producer's export lands."""
    from nodus.reconciler.views.warnings import unseen as unseen_warnings
    from nodus.reconciler.waiting import Requeues, outcome
    from nodus.specs.types import parse_duration

    deadline = time.monotonic() + parse_duration(timeout).total_seconds()
    shown: dict[ResourceKey, list[str]] = {}
    warned: dict[str, str] = {}
    ended: dict[ResourceKey, Outcome] = {}
    requeues = Requeues()
    while True:
        _refresh_under_lease(project, store)
        for text in requeues.look(project, store, [key for key in keys if key not in ended], "apply --wait"):
            err_line(text)
        pending: list[ResourceRecord] = []
        for key in keys:
            record = store.get(key)
            if record is None or key in ended:
                continue
            lines = progress_lines(record)
            if shown.get(key) != lines:
                shown[key] = lines
                for text in lines:
                    err_line(text)
            for warning in unseen_warnings(record.status, warned, key.name):  # grading failures, flat rewards
                err_line(f"{key}: {warning}")
            result = outcome(record, store, suspended_ends=True)
            if result is None:
                pending.append(record)
            else:
                ended[key] = result
        if not pending:
            return [result for result in ended.values() if not result.succeeded]
        if time.monotonic() > deadline:
            waiting = ", ".join(f"{record.key} ({_progress(record)})" for record in pending)
            raise ConfigError(f"timed out after {timeout} waiting for {waiting}")
        time.sleep(1)


def _refresh_under_lease(project: Project, store: StateStore) -> None:
    """One look of `apply --wait` at the running jobs, under the apply lease (a lost supervisor is recovered,
    outputs exported, as `nodus refresh` does); while another apply holds the lease, this look is skipped."""
    from nodus.reconciler.refresh import refresh_under_lease
    from nodus.reconciler.state.records import LeaseHeld

    try:
        refresh_under_lease(project, store, "apply --wait")
    except LeaseHeld:
        return


def progress_lines(record: ResourceRecord) -> list[str]:
    """What `apply --wait` prints about a record, each time these lines change (one call per look)."""
    return [f"{record.key}: {_progress(record)}"]


def _progress(record: ResourceRecord) -> str:
    """`Running (Training, step 3)`, `Pending (EnvironmentNotReady)`, `Failed`."""
    phase = str(record.status.get("phase", Phase.PENDING))
    stage, reason = record.status.get("stage"), record.status.get("reason")
    if stage and phase == Phase.RUNNING:
        return f"{phase} ({stage}, step {record.status.get('step', 0)})"
    if reason and phase == Phase.PENDING:
        return f"{phase} ({reason})"
    return phase
