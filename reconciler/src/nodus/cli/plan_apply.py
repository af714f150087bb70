"""`nodus plan` and `nodus apply`: what would change, and making it so.

Who calls it: `nodus.cli.main` registers both. They read the specs under PATH (`nodus.specs.parse`), the
observed state from the project's store (`nodus.reconciler.project`), plan with the pure planner
(`nodus.reconciler.planning`) and apply with `nodus.reconciler.apply`.

Exit codes of `nodus plan`: 0 no changes, 2 changes, 1 an error (as `terraform plan -detailed-exitcode`).
A TrainingJob that apply would refuse (a parameter typo, a missing runtime, a lowered cap) is an error of the
plan too: one line per problem naming the file, the job and the field, and nothing is shown as planned.
Managed runtimes (`runtime: nodus/grpo-lora`) join the files' resources (`nodus.reconciler.planning.managed`).
"""

from __future__ import annotations

import sys
import time
from pathlib import Path

import click

from nodus.cli.console import err_line, line
from nodus.errors import ConfigError, SpecError
from nodus.reconciler.planning.desired import Desired, desired_from
from nodus.reconciler.planning.diff import Plan, plan
from nodus.reconciler.planning.render import render_json, render_markdown, render_table
from nodus.reconciler.project import Project
from nodus.reconciler.state.records import ResourceKey, StateStore

RENDERERS = {"table": render_table, "json": render_json, "markdown": render_markdown}
TERMINAL = {"Succeeded", "Failed", "Cancelled", "Suspended", "Ready"}


def read_desired(path: Path) -> list[Desired]:
    """Every resource under `path`; a spec error is raised whole (one line per problem)."""
    from nodus.specs.parse import parse_resources

    result = parse_resources([path])
    result.raise_for_errors()
    if not result.resources:
        raise ConfigError(f"{path}: no nodus resources found", hint="point PATH at your spec files or folder")
    from nodus.reconciler.planning.managed import with_managed_runtimes

    return with_managed_runtimes(desired_from(result.resources))


def _make_plan(desired: list[Desired], store: StateStore, *, prune: bool, refresh_only: bool) -> Plan:
    return plan(desired, store.list(), prune=prune, refresh_only=refresh_only, observed_serial=store.serial())


@click.command("plan")
@click.argument("path", required=False, type=click.Path(exists=True, path_type=Path))
@click.option("-o", "--output", type=click.Choice(sorted(RENDERERS)), default="table", show_default=True)
@click.option("--out", "out_file", type=click.Path(path_type=Path), help="Save the plan for `nodus apply FILE`.")
@click.option("--refresh-only", is_flag=True, help="Only refresh observed status; plan no changes.")
@click.option("--prune", is_flag=True, help="Destroy resources in the store that are no longer in the files.")
@click.option("--state", help="State store: a SQLite path or postgresql://... (default: .nodus/state.db).")
def plan_command(
    path: Path | None, output: str, out_file: Path | None, refresh_only: bool, prune: bool, state: str | None
) -> None:
    """Show what `nodus apply` would change (exit 0: nothing, 2: changes, 1: error)."""
    where = path or Path.cwd()
    desired = read_desired(where)
    project = Project.find(where, state=state)
    store = project.open_state()
    try:
        from nodus.reconciler.refresh import refresh

        refresh(project, store)
        result = _make_plan(desired, store, prune=prune, refresh_only=refresh_only)
        _refuse_what_apply_would(result, store)
    finally:
        store.close()
    sys.stdout.write(RENDERERS[output](result).rstrip("\n") + "\n")
    if out_file is not None:
        out_file.write_text(result.to_json(), encoding="utf-8")
        err_line(f"saved to {out_file}: apply it exactly with `nodus apply {out_file}`", dim=True)
    sys.exit(result.exit_code)


def _refuse_what_apply_would(made: Plan, store: StateStore) -> None:
    """The admission apply runs first, run at plan time: a typo fails the plan, not only the apply."""
    from nodus.reconciler.apply import operations_of, refusals

    problems = [refusal.plan_line() for refusal in refusals(operations_of(made.actions), store)]
    if problems:
        raise SpecError(problems, hint="nothing was planned; fix the specs and plan again")


@click.command("apply")
@click.argument("target", required=False, type=click.Path(exists=True, path_type=Path))
@click.option("-f", "--filename", "file_option", type=click.Path(exists=True, path_type=Path), help="Same as TARGET.")
@click.option("--yes", "-y", is_flag=True, help="Do not ask before applying.")
@click.option("--wait", is_flag=True, help="Wait until every resource applied is Ready, Succeeded or Failed.")
@click.option("--build", is_flag=True, help="Build Environments that are not built yet (nodus-build).")
@click.option("--prune", is_flag=True, help="Destroy resources in the store that are no longer in the files.")
@click.option("--timeout", default="30m", show_default=True, help="With --wait: how long.")
@click.option("--state", help="State store: a SQLite path or postgresql://... (default: .nodus/state.db).")
def apply_command(
    target: Path | None,
    file_option: Path | None,
    yes: bool,
    wait: bool,
    build: bool,
    prune: bool,
    timeout: str,
    state: str | None,
) -> None:
    """Apply the specs under TARGET (default: here), or a saved plan file exactly."""
    from nodus.reconciler.apply import ApplyOptions, apply_plan

    chosen = file_option or target or Path.cwd()
    saved = chosen.is_file() and chosen.suffix == ".json"
    project = Project.find(chosen, state=state)
    if saved:
        saved_plan = Plan.from_json(chosen.read_text(encoding="utf-8"), origin=str(chosen))

        def make_plan(store: StateStore) -> Plan:
            return saved_plan
    else:
        desired = read_desired(chosen)

        def make_plan(store: StateStore) -> Plan:
            made = _make_plan(desired, store, prune=prune, refresh_only=False)
            sys.stdout.write(render_table(made).rstrip("\n") + "\n")
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
            options=ApplyOptions(build=build),
            reporter=lambda resource, message: err_line(f"{resource}: {message}"),
            saved=saved,
            operation=f"apply {chosen}",
        )
        line(
            f"Apply complete: {len(report.written)} changed, {len(report.launched)} launched "
            f"({time.monotonic() - started:.1f}s)."
        )
        if wait:
            _wait(project, store, list(report.statuses), timeout)
    finally:
        store.close()


def _wait(project: Project, store: StateStore, keys: list[ResourceKey], timeout: str) -> None:
    from nodus.reconciler.refresh import refresh
    from nodus.specs.types import parse_duration

    deadline = time.monotonic() + parse_duration(timeout).total_seconds()
    shown: dict[str, str] = {}
    while True:
        refresh(project, store)
        pending = []
        for key in keys:
            record = store.get(key)
            if record is None:
                continue
            phase = str(record.status.get("phase", "Pending"))
            stage = record.status.get("stage")
            text = f"{phase}" + (
                f" ({stage}, step {record.status.get('step', 0)})" if stage and phase == "Running" else ""
            )
            if shown.get(str(key)) != text:
                shown[str(key)] = text
                err_line(f"{key}: {text}")
            if phase not in TERMINAL:
                pending.append(key)
        if not pending:
            return
        if time.monotonic() > deadline:
            raise ConfigError(f"timed out waiting for {', '.join(str(k) for k in pending)}")
        time.sleep(1)
