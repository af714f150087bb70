"""A TrainingJob's results in words: baseline and final pass rates, their comparison, the reward signal and
the time a finished run took per step and per task (`status.timing`, which later estimates of its shape use).

Who calls it: `nodus describe tj/NAME`, which prints these lines under `Results:` (the raw fields stay in the
status YAML above them). They read `status.summary` and `status.diagnostics`, which the job's supervisor
computes from the platform's own gradings; the `Warning:` lines are `views.warnings`' (the same lines
`watch`, `apply --wait` and `get -o wide` show).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from nodus.reconciler.views.headline import headline_line
from nodus.reconciler.views.warnings import warning_lines
from nodus.specs.status_names import Phase, Reason


def result_lines(status: Mapping[str, Any], job: str | None = None) -> list[str]:
    """The lines to print (without indentation); none when the job has no summary yet (`job`: its name)."""
    summary = status.get("summary")
    diagnostics = status.get("diagnostics")
    lines: list[str] = []
    if isinstance(summary, Mapping):
        for title, rate, side in (
            ("Baseline:", "baselinePassRate", "baseline"),
            ("Final:", "finalPassRate", "final"),
        ):
            text = _side(summary.get(rate), summary.get(side))
            if text:
                lines.append(f"{title:<15}{text}")
        comparison = summary.get("comparison")
        if isinstance(comparison, Mapping):
            lines.append(f"{'Change:':<15}{_comparison(comparison)}")
    found = status.get("headline")
    if isinstance(found, Mapping):  # the runtime's own metric, from its results.json
        lines.append(f"{'Result:':<15}{headline_line(found)}")
    signal = diagnostics.get("rewardSignal") if isinstance(diagnostics, Mapping) else None
    if isinstance(signal, Mapping):
        groups, flat = signal.get("groups", 0), signal.get("flatGroups", 0)
        lines.append(f"{'Reward signal:':<15}{flat} of {groups} training groups had the same reward throughout")
    failures = summary.get("gradingFailures") if isinstance(summary, Mapping) else None
    if isinstance(failures, Mapping):
        lines.append(f"{'Gradings:':<15}{failures.get('failed')} of {failures.get('gradings')} failed")
    lines += [f"{'Warning:':<15}{text}" for text in warning_lines(status, job)]
    timing = status.get("timing")
    if isinstance(timing, Mapping) and timing.get("seconds") is not None:
        lines.append(f"{'Timing:':<15}{_timing(timing)}")
    export = status.get("export")
    if isinstance(export, Mapping):
        lines.append(f"{'Exported:':<15}{_export(export)}")
    return lines


def _export(export: Mapping[str, Any]) -> str:
    if export.get("phase") == Phase.EXPORTED:
        return f"Volume {export.get('volume')} revision {export.get('revision')} ({export.get('files')} files)"
    if export.get("phase") == Phase.PENDING:
        return f"waiting: {export.get('message')}"
    return f"failed ({export.get('reason')}): {export.get('message')}; the outputs stay downloadable (nodus cp)"


def _timing(timing: Mapping[str, Any]) -> str:
    parts = []
    if timing.get("stepSeconds") is not None:
        parts.append(f"{float(timing['stepSeconds']):.3g} s per step ({timing.get('steps')} steps)")
    if timing.get("evaluationTaskSeconds") is not None:
        parts.append(f"{float(timing['evaluationTaskSeconds']):.3g} s per held-out task")
    parts.append(f"{float(timing.get('fixedSeconds') or 0):.1f} s start-up and export")
    return ", ".join(parts) + " on this host (later estimates of this shape use it)"


def _side(rate: Any, counts: Any) -> str:
    if rate is None and not isinstance(counts, Mapping):
        return ""
    text = f"{float(rate) * 100:.1f}%" if isinstance(rate, int | float) else "-"
    if isinstance(counts, Mapping):
        text += f" ({counts.get('passed', 0)}/{counts.get('scored', 0)} scored tasks passed"
        unscored = counts.get("unscored", 0)
        text += f", {unscored} unscored)" if unscored else ")"
    return text


def _comparison(comparison: Mapping[str, Any]) -> str:
    if comparison.get("comparable"):
        points = float(comparison.get("changePoints", 0.0))
        return f"{points:+.1f} percentage points on {comparison.get('tasks')} tasks scored before and after"
    reason = comparison.get("reason", Reason.UNKNOWN)
    message = comparison.get("message")
    return f"not comparable ({reason})" + (f": {message}" if message else "")
