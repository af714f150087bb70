"""`nodus refresh [PATH]`: follow the running work of a project under the apply lease, and say what changed.

Who calls it: `nodus.cli.main` registers the command. `nodus get` and `describe` are pure reads (they start
nothing and write nothing), so the status of a running job moves only where the reconcile loop runs: `apply`,
`wait`, `nodus controller`, and this command, which runs `nodus.reconciler.refresh.refresh` holding the lease:
a job whose supervisor was lost is recovered (or Failed with SupervisorLost once its attempts are spent), a
TrainingJob that Succeeded has its outputs exported, and each job's status is copied from its executor.
"""

from __future__ import annotations

from pathlib import Path

import click

from nodus.cli.console import line
from nodus.reconciler.project import Project
from nodus.reconciler.refresh import refresh_under_lease


@click.command("refresh")
@click.argument("path", required=False, type=click.Path(exists=True, path_type=Path))
@click.option("--state", help="State store: a SQLite path or postgresql://... (default: .nodus/state.db).")
def refresh(path: Path | None, state: str | None) -> None:
    """Update the status of running jobs (recovering lost supervisors, exporting outputs) and print what changed."""
    project = Project.find(path, state=state)
    store = project.open_state(create=False)  # nothing to follow where there is no state: no .nodus/ made
    try:
        changes = refresh_under_lease(project, store, "nodus refresh")
    finally:
        store.close()
    for change in changes:
        for text in change.lines():
            line(text)
    if not changes:
        line("Nothing changed.")
