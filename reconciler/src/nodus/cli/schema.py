"""`nodus schema [KIND]`: print the JSON Schema of a kind (or list the kinds).

Who uses it: people wiring editor validation (yaml-language-server) and tools generating specs. The
schemas are the same files as `specs/schemas/`, generated from the models.
"""

from __future__ import annotations

import click

from nodus.cli.console import line
from nodus.errors import ConfigError


@click.command()
@click.argument("kind", required=False)
def schema(kind: str | None) -> None:
    """Print the JSON Schema of KIND (TrainingJob, tj, environment, ...); list kinds without one."""
    from nodus.specs import KINDS, kind_for_name
    from nodus.specs.parse import suggest
    from nodus.specs.schema_export import render

    if kind is None:
        for cls in KINDS:
            line(f"{cls.KIND:<18} {cls.API_VERSION:<18} {', '.join(cls.SHORT_NAMES[:2])}")
        return
    chosen = kind_for_name(kind)
    if chosen is None:
        names = [c.KIND for c in KINDS]
        suggestion = suggest(kind, names)
        raise ConfigError(
            f"unknown kind {kind!r}" + (f" (did you mean {suggestion}?)" if suggestion else ""),
            hint=f"kinds: {', '.join(names)}",
        )
    click.echo(render(chosen), nl=False)
