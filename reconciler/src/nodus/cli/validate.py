"""`nodus validate PATH...`: check resource files without touching any state.

Who uses it: people before a commit, CI on every push, editors. It reads files and folders (recursively)
with `nodus.specs.parse_resources`, prints each problem as one located line, then a summary line; `-o json`
prints the same as JSON. Exit status 1 when any error is found (warnings too with `--strict`).
"""

from __future__ import annotations

import time
from collections import Counter
from typing import TYPE_CHECKING

import click

from nodus.cli.console import line, print_json, rich_console

if TYPE_CHECKING:
    from nodus.specs import ParseResult


@click.command()
@click.argument("paths", nargs=-1, required=True, type=click.Path(allow_dash=True))
@click.option(
    "-o",
    "--output",
    "fmt",
    type=click.Choice(["text", "table", "json"]),
    default="text",
    show_default=True,
    help="text: problems and a summary; table: also every valid resource; json: for machines.",
)
@click.option("--strict", is_flag=True, help="Treat warnings as errors.")
def validate(paths: tuple[str, ...], fmt: str, strict: bool) -> None:
    """Check resource files: YAML, kinds, fields, values and references between them.

    PATH is a file, a folder (read recursively) or - for standard input.
    """
    from nodus.specs import Problem, parse_resources  # imported here so `nodus --help` starts fast

    started = time.perf_counter()
    result = parse_resources(paths)
    if not result.resources and not result.errors:
        # Validating nothing is almost always a wrong path or glob; say so instead of passing.
        result.errors.append(Problem(paths[0], 1, 1, "no nodus resources found"))
    elapsed = time.perf_counter() - started
    failed = bool(result.errors) or (strict and bool(result.warnings))
    if fmt == "json":
        print_json(_as_json(result, elapsed, failed))
    else:
        _print_text(result, elapsed, table=fmt == "table")
    if failed:
        raise SystemExit(1)


def _as_json(result: ParseResult, elapsed: float, failed: bool) -> dict[str, object]:
    return {
        "valid": not failed,
        "files": len(result.files),
        "resources": [
            {
                "apiVersion": p.resource.API_VERSION,
                "kind": p.resource.KIND,
                "name": p.resource.metadata.name,
                "project": p.resource.metadata.project,
                "file": p.source.file,
                "line": p.source.line,
            }
            for p in result.resources
        ],
        "errors": [p.to_dict() for p in result.errors],
        "warnings": [p.to_dict() for p in result.warnings],
        "skipped": result.skipped,
        "seconds": round(elapsed, 4),
    }


def _print_text(result: ParseResult, elapsed: float, *, table: bool) -> None:
    for problem in result.errors:
        line(str(problem), fg="red")
    for problem in result.warnings:
        line(f"warning: {problem}", fg="yellow")
    if table and result.resources:
        from rich.table import Table

        grid = Table(show_edge=False, pad_edge=False, header_style="bold")
        for column in ("KIND", "NAME", "PROJECT", "FILE"):
            grid.add_column(column)
        for parsed in result.resources:
            res = parsed.resource
            grid.add_row(
                res.KIND,
                res.metadata.name,
                res.metadata.project or "-",
                f"{parsed.source.file}:{parsed.source.line}",
            )
        rich_console().print(grid)
    line(_summary(result, elapsed), fg="red" if result.errors else "green")


def _plural(count: int, word: str) -> str:
    return f"{count} {word}{'' if count == 1 else 's'}"


def _summary(result: ParseResult, elapsed: float) -> str:
    kinds = Counter(p.resource.KIND for p in result.resources)
    breakdown = ", ".join(f"{n} {kind}" for kind, n in sorted(kinds.items()))
    valid = f"{_plural(len(result.resources), 'valid resource')}" + (f" ({breakdown})" if breakdown else "")
    files = _plural(len(result.files), "file")
    tail = f" in {files}, {elapsed:.2f}s"
    if result.skipped:
        tail += f"; {_plural(result.skipped, 'other YAML document')} skipped"
    if result.errors:
        head = f"✗ {_plural(len(result.errors), 'error')}"
        if result.warnings:
            head += f", {_plural(len(result.warnings), 'warning')}"
        return f"{head}; {valid}{tail}"
    warn = f", {_plural(len(result.warnings), 'warning')}" if result.warnings else ""
    return f"✓ {valid}{warn}{tail}"
