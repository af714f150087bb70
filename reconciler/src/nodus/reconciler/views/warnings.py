"""What a TrainingJob's status warns about, in the words every view shows: gradings that failed
(`status.summary.gradingFailures`) and a training reward signal with nothing to learn from
(`status.diagnostics.rewardSignal.warning`).

Who calls it: `nodus describe` (its Results block), `nodus get -o wide` (the GRADING-FAILURES column,
`failures_cell`), the SDK's `Run.watch()` and the `nodus apply --wait` stream (both through `unseen`, so a
warning is printed once, and again with its final figures when the run ends), and `nodus logs`
(`failed_grading_lines`: where the failed gradings' evidence is). One function makes the lines, so the
views cannot disagree. Pure: status (or verdict records) in, text out.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, MutableMapping
from pathlib import Path
from typing import Any, Final

from nodus.reconciler.session.summary import GRADING_FAILURES, UNSCORED, failures_message
from nodus.specs.status_names import ENDED_PHASES, GradingPhase, Phase

GRADINGS: Final = "Gradings"
REWARD_SIGNAL: Final = "RewardSignal"
ENDED: Final = frozenset({*ENDED_PHASES, Phase.SUSPENDED})
"""Phases after which a run's warnings change no more (until a suspended one resumes)."""
EVIDENCE_SHOWN: Final = 3


def warnings(status: Mapping[str, Any], job: str | None = None) -> list[tuple[str, str]]:
    """`(kind, text)` of each warning the status carries, in a fixed order (`job`: names it in a hint)."""
    found: list[tuple[str, str]] = []
    summary = status.get("summary")
    failures = summary.get(GRADING_FAILURES) if isinstance(summary, Mapping) else None
    if isinstance(failures, Mapping) and failures.get("failed"):
        found.append((GRADINGS, failures_message(failures, job)))
    diagnostics = status.get("diagnostics")
    signal = diagnostics.get("rewardSignal") if isinstance(diagnostics, Mapping) else None
    if isinstance(signal, Mapping) and signal.get("warning"):
        found.append((REWARD_SIGNAL, str(signal["warning"])))
    return found


def warning_lines(status: Mapping[str, Any], job: str | None = None) -> list[str]:
    """The warnings' texts, one line each (none when the run has nothing to warn about)."""
    return [text for _, text in warnings(status, job)]


def unseen(status: Mapping[str, Any], shown: MutableMapping[str, str], job: str | None = None) -> list[str]:
    """The warning lines a stream has not printed yet, as `warning: ...`; `shown` remembers what it printed.

    A warning is printed when it first appears; while the run goes on its figures change (5 of 960 failed,
    then 6 of 980) without a new line each time, and when the run has ended its final text is printed once
    more if it changed.
    """
    ended = status.get("phase") in ENDED
    out = []
    for kind, text in warnings(status, job):
        key = f"warning/{job or ''}/{kind}"
        if key not in shown or (ended and shown[key] != text):
            shown[key] = text
            out.append(f"warning: {text}")
    return out


def failures_cell(status: Mapping[str, Any]) -> str:
    """`5/1088`: failed of all gradings, for `get -o wide`; `0` once something was graded, `-` before."""
    summary = status.get("summary")
    if not isinstance(summary, Mapping):
        return "-"
    failures = summary.get(GRADING_FAILURES)
    if isinstance(failures, Mapping):
        return f"{failures.get('failed', 0)}/{failures.get('gradings', '?')}"
    return "0" if "comparison" in summary else "-"  # the platform's summary: something was graded


def failed_grading_lines(
    records: Iterable[Mapping[str, Any]], log: Path | str, limit: int = EVIDENCE_SHOWN
) -> list[str]:
    """For `nodus logs`: how many gradings failed, where their evidence is, and the first few messages."""
    failed = [record for record in records if record.get("verdict") in UNSCORED]
    if not failed:
        return []
    lines = [f"{len(failed)} gradings failed (InfrastructureFailure, no reward): their evidence is in {log}"]
    for record in failed[:limit]:
        message = _message(record.get("evidence"))
        phase = record.get("phase", GradingPhase.TRAINING)
        lines.append(f"  {phase} task {record.get('taskId')}: {message or 'no message in its evidence'}")
    if len(failed) > limit:
        lines.append(f"  ... and {len(failed) - limit} more")
    return lines


def _message(evidence: object) -> str | None:
    """The host's message (a timeout, a crash), else the grader's own (`evidence.sandbox.message`)."""
    if not isinstance(evidence, Mapping):
        return None
    sandbox = evidence.get("sandbox")
    found = evidence.get("message") or (sandbox.get("message") if isinstance(sandbox, Mapping) else None)
    return str(found) if found else None
