"""`nodus run`: a command run as a Job from flags, with no file to write first.

Who calls it: `nodus.cli.main` registers it. The flags become a `kind: Job` (`nodus.reconciler.run_job`, validated
by nodus.specs like any file); `--dry-run` prints it priced through the dry run `nodus apply --dry-run` uses
(`nodus.reconciler.dry_run`) and writes nothing (no store is created, no lease taken); otherwise it is applied to
the project found from here (`--path DIR`, `--state` as the other commands take them) through the path `nodus
apply` takes (`nodus.reconciler.apply.apply_plan`: the lease, the Job controller, the executor), as a plan of that
one Job, so no other resource of the store is touched. Then the Job's name and the next commands are printed;
`--wait` follows it as `nodus apply --wait` does and exits 1 unless it Succeeded (`--detach`, the default, returns
once it launched).

A Job of that name already in the store (made by a file, an earlier `nodus run`, or owned by a TrainingJob) is
refused, not replaced: `nodus run` starts something new, and replacing a run someone else started would stop it.
The Job it makes carries `nodus.dev/created-by: nodus-run`, so `nodus apply --prune` of the folder keeps it
(`nodus.reconciler.planning.diff.made_by_run`). Every refusal is one line naming the flag (`RunFlagError`), exit 1,
nothing written; click's own usage errors (an unknown flag, `--nodes two`) are turned into that one line too.
"""

from __future__ import annotations

import sys
import time
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any

import click

from nodus.cli.console import err_line, line
from nodus.errors import ConfigError
from nodus.reconciler.project import Project

if TYPE_CHECKING:
    from nodus.reconciler.planning.desired import Desired
    from nodus.reconciler.pricing.prices import PriceTable

PRICES_HELP = "A price table merged over the others (catalog, $NODUS_PRICES, the project's prices.yaml)."
NO_WAIT_LIMIT = "3650d"
"""`--wait` without `--wait-timeout`: follow the Job until it ends (Ctrl-C stops following, not the Job)."""


class RunCommand(click.Command):
    """`nodus run` with click's usage errors as the one line every other refusal is (exit 1, no usage text)."""

    def parse_args(self, ctx: click.Context, args: list[str]) -> list[str]:
        try:
            return super().parse_args(ctx, args)
        except click.UsageError as exc:
            raise ConfigError(exc.format_message()) from None


@click.command(
    "run",
    cls=RunCommand,
    context_settings={"allow_interspersed_args": False},
    short_help="Run a command as a Job (a gang with --nodes or --total-gpus).",
)
@click.argument("command", nargs=-1, type=click.UNPROCESSED)
@click.option("--name", help="The Job's name (default: run-<8 hex> from the command and the time).")
@click.option("-n", "--project", "project_name", help="The nodus project of the Job (default: default).")
@click.option("--gpu", "gpus", multiple=True, help="A GPU type: H100, A100, L4, RTX4090 or h100-sxm-80g; may repeat.")
@click.option("--gpus-per-node", type=click.IntRange(min=1, max=8), help="GPUs per machine: 1, 2, 4 or 8.")
@click.option("--nodes", type=int, help="Machines in the gang, 2 to 8.")
@click.option("--total-gpus", type=int, help="GPUs of the whole gang; nodus picks the machine shape.")
@click.option("--launcher", help="plain (default), torchrun, ray, verl, accelerate or deepspeed.")
@click.option("--network", help="Where a gang's members may be: colocated (default), regional or global.")
@click.option("--transport", help="Network paths a gang accepts: direct (default) or auto (relayed too).")
@click.option("--startup-timeout", help="How long a gang may take to assemble, 5m to 60m (default 15m).")
@click.option("--max-cost", help='The spending cap in US dollars, e.g. "2.00"; reached -> Suspended.')
@click.option("--timeout", help="Wall-clock limit of one attempt, e.g. 2h; also bounds the estimate.")
@click.option("--env", "env", multiple=True, metavar="K=V", help="An environment variable; may repeat.")
@click.option("--image", help="The image to run in (pinned by digest); the host's environment when left out.")
@click.option("--working-dir", help="The directory the command starts in.")
@click.option("--output", "outputs", multiple=True, metavar="NAME=PATH", help="A folder collected as an output.")
@click.option("--dry-run", is_flag=True, help="Apply nothing: print the Job with its estimate and blocking reasons.")
@click.option(
    "-o", "output_format", type=click.Choice(["yaml", "json"]), help="With --dry-run: yaml (default) or json."
)
@click.option("--wait/--detach", default=False, help="Follow the Job until it ends (exit 1 unless it Succeeded).")
@click.option("--wait-timeout", help="With --wait: how long to follow it (default: until it ends).")
@click.option("--path", type=click.Path(exists=True, file_okay=False, path_type=Path), help="Project folder.")
@click.option("--state", help="State store: a SQLite path or postgresql://... (default: .nodus/state.db).")
@click.option("--prices", "prices_file", type=click.Path(exists=True, dir_okay=False, path_type=Path), help=PRICES_HELP)
def run(
    command: tuple[str, ...],
    project_name: str | None,
    gpus: tuple[str, ...],
    env: tuple[str, ...],
    outputs: tuple[str, ...],
    dry_run: bool,
    output_format: str | None,
    wait: bool,
    wait_timeout: str | None,
    path: Path | None,
    state: str | None,
    prices_file: Path | None,
    **flags: Any,
) -> None:
    """Run COMMAND (everything after `--`) as a Job.

    \b
    nodus run --name torchrun-2-node --gpu H100 --nodes 2 --launcher torchrun --max-cost 2.00 -- torchrun train.py
    nodus run --dry-run --gpu H100 --total-gpus 16 --launcher torchrun -- torchrun train.py
    nodus run --wait -- python -c "print('hi')"
    """
    from nodus.reconciler.pricing.prices import load_prices
    from nodus.reconciler.run_job import RunRequest, compile_job, marked, validated

    if output_format is not None and not dry_run:
        raise ConfigError("-o: only with --dry-run (a run prints the Job's name and the next commands)")
    if wait_timeout is not None and not wait:
        raise ConfigError("--wait-timeout: only with --wait")
    project = Project.find(path or Path.cwd(), state=state)
    table = load_prices(project_root=project.root, prices_file=prices_file)
    now = datetime.now(UTC).replace(microsecond=0)
    request = RunRequest(command=command, project=project_name, gpus=gpus, env=env, outputs=outputs, **flags)
    job = validated(marked(compile_job(request, list(table.gpu), now=now)))
    if dry_run:
        _dry_run(job, project, table, now, output_format or "yaml")
        return
    _run(job, project, wait=wait, wait_timeout=wait_timeout or NO_WAIT_LIMIT)


def _dry_run(job: Desired, project: Project, table: PriceTable, now: datetime, output: str) -> None:
    """The Job priced by the dry run `nodus apply --dry-run` uses; the store only read, never created."""
    from nodus.cli.plan_apply import print_dry_run, read_records
    from nodus.reconciler.dry_run import dry_run, inputs_of_job

    documents = dry_run(inputs_of_job(job, read_records(project)), project=project, prices=table, now=now)
    print_dry_run(documents, output)


def _run(job: Desired, project: Project, *, wait: bool, wait_timeout: str) -> None:
    """Apply the one Job under the apply lease, print what to do next, and with `wait` follow it."""
    from nodus.cli.plan_apply import one_line, wait_for
    from nodus.reconciler.apply import ApplyOptions, apply_plan
    from nodus.reconciler.planning.diff import Plan, plan
    from nodus.reconciler.state.records import ResourceKey, StateStore

    key = job.key

    def make_plan(store: StateStore) -> Plan:
        # Under the lease: a Job of this name made meanwhile by another apply is seen here, not overwritten.
        for kind in ("Job", "TrainingJob"):
            taken = store.get(ResourceKey(kind, key.project, key.name))
            if taken is not None:
                raise ConfigError(
                    f"--name {key.name}: {kind}/{key.name} exists already in project {key.project}; pick another "
                    f"--name, or remove it with `nodus delete {kind.lower()}/{key.name}`"
                )
        return plan([job], [])

    store = project.open_state()
    try:
        started = time.monotonic()
        _, report = apply_plan(
            make_plan,
            project=project,
            store=store,
            options=ApplyOptions(keep_going=True),
            reporter=lambda resource, message: err_line(f"{resource}: {message}"),
            operation=f"run {key.name}",
        )
        took = f"{time.monotonic() - started:.1f}s"
        if report.failed:
            failures = "; ".join(
                one_line(f"{failed}: {reason}: {message}") for failed, reason, message in report.failed
            )
            err_line(f"Run failed: {failures} ({took})")
            sys.exit(1)
        _say_next(key.name, key.project)
        unfinished = wait_for(project, store, [key], wait_timeout) if wait else []
    finally:
        store.close()
    if unfinished:
        err_line("Wait failed: " + "; ".join(one_line(outcome.line()) for outcome in unfinished))
        sys.exit(1)


def _say_next(name: str, project: str) -> None:
    """The Job's name on stdout's first line (for scripts), then the commands that follow it."""
    where = "" if project == "default" else f" -n {project}"
    line(name)
    line(f"  nodus logs job/{name}{where} -f")
    line(f"  nodus get job {name}{where}")
