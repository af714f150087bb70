"""Output helpers every command prints through: plain lines, styled lines, JSON, and rich tables.

Who uses it: every module of `nodus.cli`. Plain and styled lines go through click (colour only on a
terminal, NO_COLOR honoured); rich is imported only when a command draws a table or a progress bar, so a
command that prints lines starts fast.
"""

from __future__ import annotations

import functools
import json
import os
import sys
from typing import TYPE_CHECKING, Any

import click

if TYPE_CHECKING:
    from rich.console import Console


def _colour() -> bool | None:
    return False if os.environ.get("NO_COLOR") else None


def line(text: str, **style: Any) -> None:
    """One line on stdout, styled only on a terminal."""
    click.echo(click.style(text, **style) if style else text, color=_colour())


def err_line(text: str, **style: Any) -> None:
    """One line on stderr, styled only on a terminal."""
    click.echo(click.style(text, **style) if style else text, err=True, color=_colour())


def print_json(data: Any) -> None:
    """Machine-readable output: plain JSON on stdout, sorted keys, one trailing newline."""
    sys.stdout.write(json.dumps(data, indent=2, sort_keys=True, default=str) + "\n")


@functools.cache
def rich_console() -> Console:
    """The rich console for tables and progress (created on first use)."""
    from rich.console import Console

    return Console(highlight=False, soft_wrap=True, no_color=bool(os.environ.get("NO_COLOR")))
