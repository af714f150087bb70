"""A TrainingJob's headline metric (`status.headline`, read from its results.json by
`controllers.headline`) in words: the CHANGE cell of `nodus get tj` and the `Result:` line of `describe`.

Who calls it: `views.columns` (the cell) and `views.results` (the line). A metric nodus knows has a short name and
a unit (a share is shown in percent); any other is shown by its own name.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

METRICS: dict[str, tuple[str, str, bool]] = {
    "heldOutLoss": ("loss", "held-out loss", False),
    "heldOutPreferenceAccuracy": ("accuracy", "held-out preference accuracy", True),
    "heldOutPairwiseAccuracy": ("accuracy", "held-out pairwise accuracy", True),
    "heldOutKL": ("KL", "held-out KL", False),
    "passRate": ("pass", "pass rate", True),
}
"""metric -> (short name for the table, words for describe, whether it is a share shown in percent)."""


def _words(metric: str) -> tuple[str, str, bool]:
    return METRICS.get(metric, (metric, metric, False))


def _value(value: Any, share: bool, digits: int) -> str:
    if not isinstance(value, int | float):
        return "-"
    return f"{float(value) * 100:.1f}%" if share else f"{float(value):.{digits}g}"


def headline_cell(found: Mapping[str, Any]) -> str:
    """`loss 2.31→1.88` (before and after), `pass 62.5%` (one side)."""
    short, _, share = _words(str(found.get("metric")))
    after = _value(found.get("after"), share, 3)
    if "before" not in found:
        return f"{short} {after}"
    return f"{short} {_value(found.get('before'), share, 3)}→{after}"


def headline_line(found: Mapping[str, Any]) -> str:
    """`held-out loss 2.3125 before, 1.875 after (lower is better: improved)`, `pass rate 62.5%`."""
    _, words, share = _words(str(found.get("metric")))
    after = _value(found.get("after"), share, 6)
    if "before" not in found:
        return f"{words} {after}"
    text = f"{words} {_value(found.get('before'), share, 6)} before, {after} after"
    if found.get("better") in ("lower", "higher"):
        improved = found.get("improved")
        verdict = "" if not isinstance(improved, bool) else ": improved" if improved else ": did not improve"
        text += f" ({found['better']} is better{verdict})"
    return text
