"""The `nodus` group and the one place that decides how errors reach users.

Who uses it: the `nodus` console script calls `main()`; tests call `cli` through click's CliRunner.
A `NodusError` prints as one line (`error: ...`) plus its hint and exits with its code; a KeyboardInterrupt
exits 130; anything else is a bug and keeps its traceback. New commands (plan, apply, get, ...) register
themselves here with `cli.add_command`.
"""

from __future__ import annotations

import sys
from typing import Any

import click

from nodus.cli import (
    cluster,
    controller,
    endpoints,
    env,
    inference,
    jobs,
    plan_apply,
    pr_comment,
    refresh,
    resources,
    run,
    schema,
    state,
    validate,
    version,
)
from nodus.cli.console import err_line
from nodus.errors import NodusError


class NodusGroup(click.Group):
    """A click group that turns known errors into one-line messages."""

    def invoke(self, ctx: click.Context) -> Any:
        try:
            return super().invoke(ctx)
        except NodusError as exc:
            lines = exc.lines()
            err_line(click.style("error:", fg="red", bold=True) + " " + lines[0])
            for text in lines[1:]:
                err_line(text, dim=text.startswith("hint:"))
            ctx.exit(exc.exit_code)
        except KeyboardInterrupt:
            err_line("interrupted")
            ctx.exit(130)


@click.group(cls=NodusGroup, context_settings={"help_option_names": ["-h", "--help"], "max_content_width": 100})
def cli() -> None:
    """nodus: post-training as a GitOps pipeline.

    Keep Environments, TrainingJobs, runtimes, endpoints and agents as YAML in git; `nodus validate`
    checks them, `nodus plan` shows what would change, `nodus apply` makes it so.
    """


cli.add_command(validate.validate)
cli.add_command(schema.schema)
cli.add_command(version.version)
cli.add_command(env.env_group)
cli.add_command(plan_apply.plan_command)
cli.add_command(plan_apply.apply_command)
cli.add_command(run.run)
cli.add_command(resources.get)
cli.add_command(resources.describe)
cli.add_command(resources.wait)
cli.add_command(resources.unlock)
cli.add_command(refresh.refresh)
cli.add_command(jobs.logs)
cli.add_command(jobs.cp)
cli.add_command(jobs.cancel)
cli.add_command(jobs.delete)
cli.add_command(jobs.patch)
cli.add_command(endpoints.create_group)
cli.add_command(endpoints.stop)
cli.add_command(endpoints.start)
cli.add_command(inference.keys_group)
cli.add_command(inference.inference_group)
cli.add_command(controller.controller)
cli.add_command(pr_comment.pr_comment)
cli.add_command(cluster.cluster_group)
cli.add_command(state.state_group)


def main() -> None:
    """Entry point of the `nodus` script."""
    cli.main(prog_name="nodus", standalone_mode=True)
    sys.exit(0)  # pragma: no cover - click exits itself
