"""`nodus env init | test | describe`: write, check and inspect an Environment package on disk.

Who uses it: people writing environments (the NeMo Gym onboarding flow: scaffold, implement, test), and
CI on the catalog. `test` runs every contract check in fresh `nodus-env` processes and exits 1 when one
fails; `describe` prints what a user needs to pick an environment.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import click

from nodus.cli.console import line, print_json, rich_console


@click.group(name="env")
def env_group() -> None:
    """Write, check and inspect Environment packages (folders with environment.yaml)."""


@env_group.command()
@click.argument("name")
@click.option(
    "--dir",
    "folder",
    type=click.Path(file_okay=False, path_type=Path),
    default=None,
    help="Where to write it (default: ./NAME).",
)
def init(name: str, folder: Path | None) -> None:
    """Scaffold an Environment package NAME that passes `nodus env test` as it is."""
    from nodus.reconciler.env_authoring.scaffold import scaffold

    target = folder or Path(name)
    written = scaffold(name, target)
    for path in written:
        line(f"  wrote {path}")
    line(
        f"✓ {target}: {len(written)} files written" if written else f"✓ {target}: already scaffolded, nothing changed",
        fg="green",
    )
    line(f"next: edit {target}/*_env.py, then `nodus env test {target}`")


@env_group.command(name="test")
@click.argument("path", type=click.Path(exists=True, path_type=Path))
@click.option("--gold", default=20, show_default=True, help="Tasks per split whose gold answer must be Correct.")
@click.option("--seed", default=0, show_default=True, help="Seed of the task lists compared across processes.")
@click.option("-o", "--output", "fmt", type=click.Choice(["text", "json"]), default="text", show_default=True)
def test_command(path: Path, gold: int, seed: int, fmt: str) -> None:
    """Run the contract checks on the package at PATH (each in fresh nodus-env processes)."""
    from nodus.reconciler.env_authoring.package import Check, EnvPackage, check_package

    package = EnvPackage.open(path)

    def show(check: Check) -> None:
        if fmt == "text":
            mark = click.style("✓", fg="green") if check.ok else click.style("✗", fg="red")
            line(f"{mark} {check.name}" + (f": {check.detail}" if check.detail else ""))

    if fmt == "text":
        line(f"{package.name}@{package.version} ({package.spec_file})", bold=True)
    report = check_package(package, gold=gold, seed=seed, on_check=show)
    failed = [c for c in report.checks if not c.ok]
    if fmt == "json":
        print_json(
            {
                "environment": f"{package.name}@{package.version}",
                "ok": report.ok,
                "checks": [{"name": c.name, "ok": c.ok, "detail": c.detail} for c in report.checks],
            }
        )
    else:
        summary = f"{len(report.checks) - len(failed)} passed, {len(failed)} failed"
        line(("✓ " if report.ok else "✗ ") + summary, fg="green" if report.ok else "red")
    if not report.ok:
        raise SystemExit(1)


@env_group.command()
@click.argument("path", type=click.Path(exists=True, path_type=Path))
@click.option("-o", "--output", "fmt", type=click.Choice(["text", "json"]), default="text", show_default=True)
def describe(path: Path, fmt: str) -> None:
    """Summary, licence, split sizes, a sample task and the graders of the package at PATH."""
    from nodus.reconciler.env_authoring.package import EnvPackage

    package = EnvPackage.open(path)
    info = package.info()
    sample = package.run("tasks", "--split", "test", "--limit", "1").stdout.strip()
    spec = package.resource.spec
    fixtures = package.fixtures.read_text().count("\n") if package.fixtures else 0
    data: dict[str, Any] = {
        "name": package.name,
        "version": package.version,
        "category": spec.category,
        "modes": list(spec.modes),
        "summary": spec.description,
        "license": spec.license,
        "splits": info["splits"],
        "sampleTask": json.loads(sample) if sample else None,
        "graders": {
            "adapter": info["adapter"],
            "rewardType": info["rewardType"],
            "multiTurn": info["multiTurn"],
            "grader": spec.grading.grader,
            "maxParallel": spec.grading.max_parallel,
            "timeout": f"{spec.grading.timeout.total_seconds():g}s",
        },
        "fixtureCases": fixtures,
    }
    if fmt == "json":
        print_json(data)
        return
    from rich.table import Table

    table = Table(show_header=False, box=None, pad_edge=False)
    table.add_column(style="bold")
    table.add_column(overflow="fold")
    prompt = data["sampleTask"]["prompt"] if data["sampleTask"] else "-"
    rows = [
        ("Name", f"{package.name}@{package.version}"),
        ("Category", f"{spec.category} ({', '.join(spec.modes)})"),
        ("Summary", spec.description or "-"),
        ("Licence", spec.license or "-"),
        ("Splits", f"train {info['splits']['train']}, test {info['splits']['test']}"),
        ("Sample task", prompt if isinstance(prompt, str) else json.dumps(prompt)),
        (
            "Graders",
            f"{info['adapter']} adapter, {info['rewardType']} reward, {spec.grading.grader}, "
            f"up to {spec.grading.max_parallel} at once, {data['graders']['timeout']} per task",
        ),
        ("Fixture cases", str(fixtures)),
    ]
    for key, value in rows:
        table.add_row(key, value)
    rich_console().print(table)
