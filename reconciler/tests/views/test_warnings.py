"""The warning lines every view shows (`nodus.reconciler.views.warnings`): grading failures and a flat reward
signal from a status, a stream that prints each once and the final figures again, the `get -o wide` cell, and
the `nodus logs` lines that say where the failed gradings' evidence is."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from nodus.reconciler.views.results import result_lines
from nodus.reconciler.views.warnings import failed_grading_lines, failures_cell, unseen, warning_lines

FLAT = "every one of the 4 training groups got the same reward for all its completions"


def status(failed: int, of: int = 960, phase: str = "Running", flat: bool = False) -> dict[str, Any]:
    summary: dict[str, Any] = {"comparison": {"comparable": False, "reason": "IncompleteEvents"}}
    if failed:
        phases = {"Training": {"failed": failed, "gradings": of}}
        summary["gradingFailures"] = {"failed": failed, "gradings": of, "phases": phases}
    signal: dict[str, Any] = {"groups": 4, "flatGroups": 4 if flat else 1}
    if flat:
        signal["warning"] = FLAT
    return {"phase": phase, "summary": summary, "diagnostics": {"rewardSignal": signal}}


def test_grading_failures_and_a_flat_signal_are_one_line_each() -> None:
    assert warning_lines(status(5, flat=True), "run") == [
        "5 of 960 training gradings failed (InfrastructureFailure): excluded from rewards; see nodus logs tj/run",
        FLAT,
    ]
    assert warning_lines(status(0)) == []
    assert warning_lines({"phase": "Pending"}) == []


def test_a_stream_prints_a_warning_once_and_its_final_figures_when_the_run_ends() -> None:
    shown: dict[str, str] = {}
    assert unseen(status(5), shown, "run") == [
        "warning: 5 of 960 training gradings failed (InfrastructureFailure): excluded from rewards; "
        "see nodus logs tj/run"
    ]
    assert unseen(status(6, of=980), shown, "run") == []  # still running: no line per new failure
    assert unseen(status(6, of=980, flat=True), shown, "run") == [f"warning: {FLAT}"]
    final = unseen(status(7, of=1000, phase="Succeeded", flat=True), shown, "run")
    assert final == [
        "warning: 7 of 1000 training gradings failed (InfrastructureFailure): excluded from rewards; "
        "see nodus logs tj/run"
    ]
    assert unseen(status(7, of=1000, phase="Succeeded", flat=True), shown, "run") == []
    # Another job's warnings are its own, in the same stream.
    assert len(unseen(status(7, of=1000, phase="Succeeded"), shown, "other")) == 1


def test_describe_results_count_the_failures_and_warn() -> None:
    lines = result_lines(status(5, flat=True), "run")
    assert "Gradings:      5 of 960 failed" in lines
    assert (
        "Warning:       5 of 960 training gradings failed (InfrastructureFailure): excluded from rewards; "
        "see nodus logs tj/run"
    ) in lines
    assert f"Warning:       {FLAT}" in lines


def test_the_wide_cell_is_failed_of_all_gradings_zero_or_nothing_yet() -> None:
    assert failures_cell(status(5)) == "5/960"
    assert failures_cell(status(0)) == "0"
    assert failures_cell({"phase": "Pending"}) == "-"
    assert failures_cell({"summary": {"loss": 0.1}}) == "-"  # only a trainer's keys: nothing graded yet


def test_logs_lines_name_the_evidence_file_and_the_first_messages(tmp_path: Path) -> None:
    log = tmp_path / "gradings.jsonl"
    records = [{"taskId": "t0", "verdict": "Correct", "reward": 1.0, "phase": "Training"}]
    records += [
        {
            "taskId": f"t{i}",
            "verdict": "InfrastructureFailure",
            "reward": None,
            "phase": "Training",
            "evidence": {"sandbox": {"message": "ZeroDivisionError: division by zero in reward (env.py:3)"}},
        }
        for i in range(5)
    ]
    lines = failed_grading_lines(records, log)
    assert lines[0] == f"5 gradings failed (InfrastructureFailure, no reward): their evidence is in {log}"
    assert lines[1] == "  Training task t0: ZeroDivisionError: division by zero in reward (env.py:3)"
    assert lines[-1] == "  ... and 2 more" and len(lines) == 5
    assert failed_grading_lines(records[:1], log) == []
    timeout = {"taskId": "t9", "verdict": "InfrastructureFailure", "evidence": {"message": "took longer than 10s"}}
    assert failed_grading_lines([timeout], log)[1] == "  Training task t9: took longer than 10s"
