"""Benchmark: grading 2,000 arithmetic completions in process, and through the grading service.

Run: `.venv/bin/python bench/grading.py` (or `make bench`). In one run it measures, on the same 2,000
completions of the catalog's arithmetic environment (half right, half wrong):

- baseline: the environment's `reward(completion, answer)` called in this process, nothing else;
- `nodus-env` logic in process: `Environment.grade_line` (lookup, verdict, evidence) without any sandbox;
- process mode: `GradingService` with graders in namespaces as a dropped uid (root only);
- container mode: the same with podman containers (when podman is installed);

and prints throughput and the ratio to the baseline. The goal: process mode at least a quarter of the
in-process throughput. Grader start-up is measured apart (a warm-up batch), as a job pays it once.
"""

from __future__ import annotations

import os
import shutil
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from rich.console import Console
from rich.table import Table
from timing import median_seconds

REPO = Path(__file__).resolve().parents[1]
PACKAGE = REPO / "catalog" / "arithmetic"
LOADER = "arithmetic_env:load_environment"
COUNT, RUNS, WARMUP = 2000, 3, 64


def _completions() -> tuple[Any, list[tuple[Any, str, Any]]]:
    """The environment in process and (task, completion, answer) for the first COUNT train tasks."""
    from nodus.env.environment import load_environment
    from nodus.env.loader import Settings

    env = load_environment(Settings((str(PACKAGE),), LOADER, "arithmetic", "2.0.0"))
    tasks = env.tasks("train")[:COUNT]
    items = [
        (t, f"Let me see. <answer>{t.answer if i % 2 else t.answer + 1}</answer>", t.answer)
        for i, t in enumerate(tasks)
    ]
    return env, items


def _service_rate(mode: str, env_ref: Any, items: list[tuple[Any, str, Any]], stage: Path) -> tuple[float, float]:
    """(gradings per second after warm-up, seconds for the warm-up batch that started the graders)."""
    from nodus.reconciler.grading import GradingService, GradingSettings

    requests = [{"taskId": t.task_id, "completion": c} for t, c, _ in items]
    settings = GradingSettings(mode=mode, max_parallel=2, stage_dir=stage)  # type: ignore[arg-type]
    with GradingService(settings) as service:
        start = time.perf_counter()
        service.grade("bench", env_ref, requests[:WARMUP])
        warmup = time.perf_counter() - start
        verdicts: list[Any] = []

        def grade() -> None:
            verdicts[:] = service.grade("bench", env_ref, requests)

        seconds = median_seconds(grade, RUNS)
    wrong = sum(v.verdict != ("Correct" if i % 2 else "Incorrect") for i, v in enumerate(verdicts))
    if wrong:
        raise SystemExit(f"{mode} mode gave {wrong} wrong verdicts")
    return len(requests) / seconds, warmup


def main() -> int:
    console = Console()
    env, items = _completions()
    module = env.adapter.obj  # type: ignore[attr-defined]
    rows: list[tuple[str, float | None, str]] = []

    rate = COUNT / median_seconds(lambda: [module.reward(c, a) for _, c, a in items], RUNS)
    rows.append(("baseline: reward() in process", rate, ""))
    lines = [{"taskId": t.task_id, "completion": c} for t, c, _ in items]
    rows.append(
        (
            "nodus-env grade_line in process",
            COUNT / median_seconds(lambda: [env.grade_line(x, 30) for x in lines], RUNS),
            "",
        )
    )

    from nodus.reconciler.grading import EnvironmentRef

    with tempfile.TemporaryDirectory(prefix="nodus-bench-") as tmp:
        stage = Path(tmp) / "stage"
        if os.geteuid() == 0:
            ref = EnvironmentRef("arithmetic", "2.0.0", paths=(PACKAGE,), loader=LOADER)
            rate, warm = _service_rate("process", ref, items, stage)
            rows.append(("process mode (2 graders)", rate, f"first {WARMUP} incl. start: {warm:.2f}s"))
        else:
            rows.append(("process mode", None, "needs root"))
        if shutil.which("podman"):
            from nodus.testing.grader_image import build_grader_image

            image = build_grader_image(
                PACKAGE,
                name="arithmetic",
                version="2.0.0",
                loader=LOADER,
                repository="localhost/nodus-bench-arithmetic",
                workdir=Path(tmp),
            )
            rate, warm = _service_rate("container", EnvironmentRef("arithmetic", "2.0.0", image=image), items, stage)
            rows.append(("container mode (2 graders, podman)", rate, f"first {WARMUP} incl. start: {warm:.2f}s"))
        else:
            rows.append(("container mode", None, "podman is not installed"))

    base = rows[0][1] or 1.0
    table = Table(title=f"Grading {COUNT} arithmetic completions (median of {RUNS})")
    for column in ("what", "gradings/s", "x baseline", "note"):
        table.add_column(column, justify="left" if column in ("what", "note") else "right")
    for name, rate_or_none, note in rows:
        if rate_or_none is None:
            table.add_row(name, "-", "-", note)
        else:
            table.add_row(name, f"{rate_or_none:,.0f}", f"{rate_or_none / base:.3f}", note)
    console.print(table)
    process = next((r for n, r, _ in rows if n.startswith("process mode") and r), None)
    if process:
        verdict = "meets" if process >= base / 4 else "misses"
        console.print(f"goal: process mode >= 1/4 of in-process reward(): {verdict} it ({process / base:.3f})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
