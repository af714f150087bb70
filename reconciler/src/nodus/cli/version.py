"""`nodus version`: the versions of the nodus distributions installed and of Python.

Who uses it: people filing issues and CI logs; `-o json` for scripts.
"""

from __future__ import annotations

import platform
from importlib import metadata

import click

from nodus.cli.console import line, print_json

DISTRIBUTIONS = ("nodus", "nodus-specs", "nodus-build", "nodus-env", "nodus-runtimes")


def installed_versions() -> dict[str, str | None]:
    found: dict[str, str | None] = {}
    for name in DISTRIBUTIONS:
        try:
            found[name] = metadata.version(name)
        except metadata.PackageNotFoundError:
            found[name] = None
    return found


@click.command()
@click.option("-o", "--output", "fmt", type=click.Choice(["text", "json"]), default="text", show_default=True)
def version(fmt: str) -> None:
    """Print the nodus version and its parts."""
    versions = installed_versions()
    if fmt == "json":
        print_json({"python": platform.python_version(), "distributions": versions})
        return
    line(f"nodus {versions['nodus'] or 'unknown'} (Python {platform.python_version()})")
    for name, found in versions.items():
        if name != "nodus":
            line(f"  {name:<15} {found or 'not installed'}")
