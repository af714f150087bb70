"""`nodus controller`: keep the state in sync with a git branch, as a service (the GitOps loop).

Who calls it: `nodus.cli.main` registers it. Every interval it fetches the branch, plans, applies when needed
(under the apply lease, as `nodus apply --yes` does), advances running jobs, and records what it synced per
resource, which `nodus get KIND -o wide` shows (SYNC, HEALTH, REVISION). The work is in
`nodus.reconciler.gitops`; this module parses the options and logs one line per sync.

The controller's home is the project of the folder it is started in (or NODUS_HOME): its state folder holds
the checkout (`controller/`), the images, the jobs and, unless --state names another, the state store, so
`nodus get` run in the same folder reads what the controller wrote.
"""

from __future__ import annotations

import sys
import time
from pathlib import Path

import click

from nodus.cli.console import rich_console
from nodus.errors import ConfigError


def _log(text: str, style: str = "") -> None:
    """One timestamped line on stdout, flushed (a service's log is read as it is written)."""
    from rich.markup import escape

    stamp = time.strftime("%Y-%m-%dT%H:%M:%S%z")
    body = f"[{style}]{escape(text)}[/]" if style else escape(text)
    rich_console().print(f"[dim]{stamp}[/] {body}")
    sys.stdout.flush()


STYLES = {"applying": "bold", "resource": "dim", "stopped": "yellow", "ready": "dim"}


@click.command("controller")
@click.option("--repo", required=True, help="The git repository: a local folder or a URL git can fetch.")
@click.option("--branch", default="main", show_default=True, help="The branch to follow.")
@click.option("--path", "spec_path", default=".", show_default=True, help="The specs' folder in the repository.")
@click.option("--interval", default="60s", show_default=True, help="How often to sync (30s, 5m).")
@click.option("--prune", is_flag=True, help="Destroy resources that are in the store but no longer in git.")
@click.option("--build", is_flag=True, help="Build Environments that are not built yet (nodus-build).")
@click.option("--once", is_flag=True, help="Sync once and exit (1 when the sync failed).")
@click.option("-v", "--verbose", is_flag=True, help="Also log each resource an apply changes.")
@click.option("--state", help="State store: a SQLite path or postgresql://... (default: .nodus/state.db).")
def controller(
    repo: str,
    branch: str,
    spec_path: str,
    interval: str,
    prune: bool,
    build: bool,
    once: bool,
    verbose: bool,
    state: str | None,
) -> None:
    """Keep the state in sync with a git branch: fetch, plan, apply, refresh, every --interval."""
    from nodus.reconciler.gitops.loop import run
    from nodus.reconciler.gitops.source import GitSource
    from nodus.reconciler.gitops.sync import PassReport, Target
    from nodus.reconciler.project import Project
    from nodus.specs.types import parse_duration

    try:
        interval_s = parse_duration(interval).total_seconds()
    except ValueError as error:
        raise ConfigError(f"--interval {interval!r}: {error}", hint="e.g. 30s, 5m, 1h") from None
    if interval_s < 1:
        raise ConfigError(f"--interval {interval}: at least 1s", hint="e.g. 30s, 5m, 1h")
    home = Project.find(Path.cwd(), state=state)
    source = GitSource(repo, branch, home.files.root / "controller")
    first = source.update()  # a wrong --repo or --branch fails here, before the loop
    store = home.open_state()

    def notify(event: str, text: str) -> None:
        if event != "resource" or verbose:
            _log(("  " if event == "resource" else "") + text, STYLES.get(event, ""))

    def reported(report: PassReport) -> None:
        _log(report.line(), {"Failed": "red", "Locked": "yellow", "Synced": "green"}.get(report.outcome, ""))
        if not report.ok and report.hint:
            _log(f"hint: {report.hint}", "dim")

    try:
        notify(
            "ready",
            f"controller: {source.shown} {branch} (at {first.short}), path {spec_path}, every {interval}, "
            f"state {store.url}",
        )
        target = Target(source, path=spec_path, prune=prune, build=build)
        code = run(target, home, store, interval_s=interval_s, once=once, notify=notify, reported=reported)
    finally:
        store.close()
    sys.exit(code)
