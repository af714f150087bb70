"""A succeeded TrainingJob's headline result, read once from its results.json: the metric of its runtime's README
row (held-out loss for sft, preference or pairwise accuracy for dpo, orpo, kto and reward-model, KL for distill,
the pass rate for evaluate), before and after training where the trainer measured both.

Who calls it: `controllers.trainingjob.job_status` when a generation succeeded; it goes into `status.headline`,
which `nodus get tj` shows under CHANGE and `describe` under Results (`views.results`). The file is read through
the Executor protocol (`open_output`), once per generation: later looks keep what the first one read.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

from nodus.errors import NodusError
from nodus.reconciler.executors import Executor

RESULTS = "results.json"


def headline(jobs: Executor, project: str, name: str, generation: int | None, earlier: Any) -> dict[str, Any] | None:
    """`status.headline` of a succeeded generation: `earlier` when it is this generation's, else read from its
    results.json; None when the trainer wrote none, or none with a metric (a runtime of one's own)."""
    if isinstance(earlier, Mapping) and earlier.get("generation") == generation:
        return dict(earlier)
    try:
        with jobs.open_output(project, name, RESULTS, generation) as file:
            results = json.load(file)
    except (NodusError, OSError, ValueError):
        return None  # no results.json, or not JSON: the outputs still list it, and nothing is made up
    found = of_results(results) if isinstance(results, Mapping) else None
    return None if found is None else {**found, "generation": generation}


def of_results(results: Mapping[str, Any]) -> dict[str, Any] | None:
    """The headline of a results.json: the fine-tuning runtimes' `heldOut` block (`metric`, `better`, `before`,
    `after`, `improved`), or evaluate's `passRate`."""
    held = results.get("heldOut")
    if isinstance(held, Mapping) and isinstance(held.get("metric"), str):
        metric = held["metric"]
        found: dict[str, Any] = {"metric": metric, "better": held.get("better")}
        for side in ("before", "after"):
            value = (held.get(side) or {}).get(metric) if isinstance(held.get(side), Mapping) else None
            if _number(value):
                found[side] = value
        if isinstance(held.get("improved"), bool):
            found["improved"] = held["improved"]
        return found if "after" in found else None
    if _number(results.get("passRate")):
        return {"metric": "passRate", "better": "higher", "after": results["passRate"]}
    return None


def _number(value: Any) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool)
