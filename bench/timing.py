"""Timing helper shared by the benchmarks in this folder (each script imports it as `timing`)."""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable


def median_seconds(fn: Callable[[], object], runs: int) -> float:
    """The median wall time of `runs` calls of `fn`: steadier than the mean on a shared 2-core machine."""
    times = []
    for _ in range(runs):
        start = time.perf_counter()
        fn()
        times.append(time.perf_counter() - start)
    return statistics.median(times)
