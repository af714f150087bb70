"""Benchmark: `nodus validate` on 1,000 resources in 100 files.

Run: `.venv/bin/python bench/validate.py` (or `make bench`). It writes 100 files of 10 resources each (every
kind, from the 'full' test fixtures, renamed so that names are unique) into a temporary folder, then times:

- baseline: PyYAML's C loader reading the same files (`yaml.load_all` with CSafeLoader), the floor any
  YAML-based validator stands on;
- parse_resources: nodus's full validation in process (positions, models, cross checks);
- nodus validate: the CLI as a user runs it (a new process: interpreter start, imports, validation), with
  bytecode compiled as an installed package has it; and once more with no bytecode cache at all
  (PYTHONDONTWRITEBYTECODE=1, as on this kind of machine by default), where Python compiles every module
  it imports on each start.

Each is the median of several runs; it prints resources per second and the ratio against the baseline
measured in the same run. The goal is under one second for the whole set through the CLI.
"""

from __future__ import annotations

import os
import subprocess
import sys
import tempfile
from collections.abc import Callable
from pathlib import Path

import yaml
from rich.console import Console
from rich.table import Table
from timing import median_seconds

from nodus.specs import parse_resources

REPO = Path(__file__).resolve().parents[1]
FULL = REPO / "specs" / "tests" / "fixtures" / "full"
FILES, PER_FILE, RUNS = 100, 10, 7
MEMBERS = ("specs", "builder", "reconciler", "images/env-base", "runtimes")


def write_corpus(root: Path) -> int:
    templates = [doc for path in sorted(FULL.glob("*.yaml")) for doc in yaml.safe_load_all(path.read_text())]
    count = 0
    for f in range(FILES):
        docs = []
        for i in range(PER_FILE):
            doc = dict(templates[(f * PER_FILE + i) % len(templates)])
            meta = dict(doc.get("metadata") or {})
            suffix = f"-{f}-{i}"
            if doc["kind"] == "AgentRun" and "group" in doc["spec"]:
                doc["spec"] = {**doc["spec"], "taskKey": f"k{suffix}"}
                meta.pop("name", None)
            else:
                meta["name"] = f"{meta['name']}{suffix}"
            doc["metadata"] = meta
            docs.append(doc)
            count += 1
        text = yaml.safe_dump_all(docs, sort_keys=False)
        (root / f"specs-{f:03d}.yaml").write_text(text)
    return count


def main() -> int:
    console = Console()
    with tempfile.TemporaryDirectory(prefix="nodus-bench-") as tmp:
        root = Path(tmp)
        total = write_corpus(root)
        files = sorted(root.glob("*.yaml"))

        def baseline() -> None:
            for path in files:
                list(yaml.load_all(path.read_text(), Loader=yaml.CSafeLoader))

        def in_process() -> None:
            result = parse_resources([root])
            assert result.ok, result.errors[:3]
            assert len(result.resources) == total

        nodus = Path(sys.executable).parent / "nodus"
        with_cache = {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}
        no_cache = {**with_cache, "PYTHONDONTWRITEBYTECODE": "1"}
        # Compile what the CLI imports once, as `pip install`/`uv sync --compile-bytecode` leave it.
        compiled = [str(Path(yaml.__file__).parents[1]), *(str(REPO / d / "src") for d in MEMBERS)]
        subprocess.run([sys.executable, "-m", "compileall", "-q", *compiled], check=False, env=with_cache)

        def cli(env: dict[str, str]) -> Callable[[], None]:
            def run() -> None:
                subprocess.run([str(nodus), "validate", str(root)], check=True, capture_output=True, env=env)

            return run

        rows = [("baseline: PyYAML C loader", median_seconds(baseline, RUNS))]
        rows.append(("parse_resources (in process)", median_seconds(in_process, RUNS)))
        rows.append(("nodus validate (new process)", median_seconds(cli(with_cache), RUNS)))
        rows.append(("nodus validate, no bytecode cache", median_seconds(cli(no_cache), RUNS)))

    table = Table(title=f"Validating {total} resources in {FILES} files (median of {RUNS})")
    for column in ("what", "seconds", "resources/s", "x baseline"):
        table.add_column(column, justify="right" if column != "what" else "left")
    base = rows[0][1]
    for name, seconds in rows:
        table.add_row(name, f"{seconds:.3f}", f"{total / seconds:,.0f}", f"{seconds / base:.1f}x")
    console.print(table)
    cli_seconds = rows[2][1]
    verdict = "meets" if cli_seconds < 1.0 else "misses"
    console.print(f"goal: the whole set under 1 s through the CLI: {verdict} it ({cli_seconds:.2f} s)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
