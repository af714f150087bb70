"""`nodus state check`: verify the project's state store (or the one `--state` names) without changing it.

Who calls it: `nodus.cli.main` registers the group. The checks are `nodus.reconciler.state.check`'s; this module
prints them (a table on stdout, or `-o json`) and one `error:` line per problem on stderr, and exits 1 when any
check failed, 0 when the store is healthy. Nothing is created where there is no store: that is a failed check.
"""

from __future__ import annotations

import sys
from pathlib import Path

import click

from nodus.cli.console import err_line, line, print_json
from nodus.reconciler.project import Project
from nodus.reconciler.state.check import check_store


@click.group("state")
def state_group() -> None:
    """The project's state store."""


@state_group.command("check")
@click.argument("path", required=False, type=click.Path(exists=True, path_type=Path))
@click.option("--state", help="State store: a SQLite path or postgresql://... (default: .nodus/state.db).")
@click.option("-o", "--output", "fmt", type=click.Choice(["text", "json"]), default="text", show_default=True)
def check(path: Path | None, state: str | None, fmt: str) -> None:
    """Verify the state store: SQLite's integrity check, the schema version, the tables, the stored documents
    (PostgreSQL: the connection, the schema version and the tables). Exit 0 when healthy, 1 otherwise."""
    project = Project.find(path, state=state)
    report = check_store(project.state_url, project_state_dir=project.files.root)
    if fmt == "json":
        print_json(report.to_json())
    else:
        line(f"State store {report.store}")
        for found in report.checks:
            line(f"  {found.name:<10} {found.outcome:<8} {found.detail}")
    if report.healthy:
        if fmt == "text":
            line("The state store is healthy.")
        return
    for text in report.problem_lines():
        err_line(click.style("error:", fg="red", bold=True) + " " + text)
    sys.exit(1)
