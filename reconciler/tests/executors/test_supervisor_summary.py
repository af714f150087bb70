"""The supervisor's side of the summary, without a trainer: verdict records numbered by request in
logs/gradings.jsonl, status.json's summary and diagnostics after every grading, a restarted supervisor going
on from the log, and the trainer's reports never overwriting the keys the platform owns."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from nodus.reconciler.executors.local.job import JobFiles, JobSpec
from nodus.reconciler.executors.local.supervisor import Outcome, Supervisor, min_comparison_tasks
from nodus.reconciler.grading import GradingSettings
from nodus.reconciler.session.session import compares
from nodus.reconciler.views import results as results_view


def supervisor(files: JobFiles, min_tasks: int = 2) -> Supervisor:
    spec = JobSpec(
        name="tj", project="proj", command=("true",), params={"evaluation": {"minComparisonTasks": min_tasks}}
    )
    return Supervisor(files, spec, GradingSettings(), files.read_status())


def verdicts(phase: str, *correct: bool) -> list[dict[str, Any]]:
    return [
        {
            "taskId": f"t{i}",
            "verdict": "Correct" if ok else "Incorrect",
            "reward": float(ok),
            "evidence": {},
            "phase": phase,
        }
        for i, ok in enumerate(correct)
    ]


def test_gradings_are_numbered_by_request_and_the_summary_follows_each_one(tmp_path: Path) -> None:
    files = JobFiles(tmp_path / "job")
    files.logs.mkdir(parents=True)
    first = supervisor(files)
    first.session.record_verdicts(verdicts("Baseline", True, False, False))
    status = files.read_status()
    assert status["summary"]["baselinePassRate"] == round(1 / 3, 4)
    assert status["summary"]["comparison"]["reason"] == "IncompleteEvents"
    assert "diagnostics" not in status  # nothing graded in Training yet

    first.session.record_verdicts(verdicts("Training", False, False))
    first.session.record_verdicts(verdicts("Training", True))
    status = files.read_status()
    assert status["diagnostics"] == {"rewardSignal": {"groups": 0, "flatGroups": 0}}

    # A restarted supervisor (a new process) goes on from the log: numbers and summary.
    second = supervisor(files)
    second.session.record_verdicts(verdicts("Evaluation", True, True, False))
    records = [json.loads(line) for line in files.gradings_log.read_text().splitlines()]
    assert [r["request"] for r in records] == [1, 1, 1, 2, 2, 3, 4, 4, 4]
    assert [r["phase"] for r in records][-3:] == ["Evaluation"] * 3
    summary = files.read_status()["summary"]
    assert summary["comparison"] == {"comparable": True, "changePoints": 33.3, "tasks": 3}
    assert (summary["baselinePassRate"], summary["finalPassRate"]) == (0.3333, 0.6667)


def test_the_trainers_summary_keys_merge_but_never_the_platforms(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    files = JobFiles(tmp_path / "job")
    files.logs.mkdir(parents=True)
    run = supervisor(files)
    run.session.record_verdicts(verdicts("Baseline", True, False))
    run.session.progress({"summary": {"baselinePassRate": 1.0, "comparison": {"comparable": True}, "meanLength": 12}})
    run.session.progress({"summary": {"finalPassRate": 1.0}, "step": 3})
    status = files.read_status()
    assert status["summary"]["baselinePassRate"] == 0.5 and "finalPassRate" not in status["summary"]
    assert status["summary"]["comparison"]["reason"] == "IncompleteEvents"
    assert status["summary"]["meanLength"] == 12 and status["step"] == 3
    logged = capsys.readouterr().err.splitlines()
    assert len(logged) == 1 and "ignored the trainer's summary keys ['baselinePassRate', 'comparison']" in logged[0]

    # The platform's next grading keeps the trainer's own key; the end writes the summary once more.
    run.session.record_verdicts(verdicts("Evaluation", True, True))
    run._finish(Outcome("Succeeded", "TrainerSucceeded", "done", {}))
    status = files.read_status()
    assert status["summary"]["meanLength"] == 12
    assert status["summary"]["comparison"] == {"comparable": True, "changePoints": 50.0, "tasks": 2}
    assert status["phase"] == "Succeeded"


def test_a_half_written_log_line_is_skipped(tmp_path: Path) -> None:
    files = JobFiles(tmp_path / "job")
    files.logs.mkdir(parents=True)
    lines = [json.dumps({**v, "request": 7}) for v in verdicts("Baseline", True, True)]
    files.gradings_log.write_text("\n".join(lines) + '\n{"taskId": "t9", "verd')
    run = supervisor(files)
    run.session.record_verdicts(verdicts("Evaluation", True, False))
    assert json.loads(files.gradings_log.read_text().splitlines()[-1])["request"] == 8
    assert files.read_status()["summary"]["baseline"]["tasks"] == 2
    # The next supervisor reads every whole record: the new ones did not join the broken line.
    again = supervisor(files)
    assert again.session.tally.records == 4 and again.session.requests == 8


@pytest.mark.parametrize(
    ("params", "expected"),
    [
        ({}, 16),
        ({"evaluation": {"minComparisonTasks": 4}}, 4),
        ({"evaluation": {"minComparisonTasks": 0}}, 16),
        ({"evaluation": {"minComparisonTasks": True}}, 16),
        ({"evaluation": None}, 16),
    ],
)
def test_min_comparison_tasks_comes_from_params(params: dict[str, Any], expected: int) -> None:
    assert min_comparison_tasks(params) == expected


def test_an_evaluate_job_shows_its_pass_rate_without_a_comparison_it_never_asked_for(tmp_path: Path) -> None:
    """An evaluate job grades one side (Evaluation): its summary is that pass rate; a comparison with a
    baseline no one asked for would say `not comparable (IncompleteEvents)`, as if something had gone wrong."""
    files = JobFiles(tmp_path / "job")
    files.logs.mkdir(parents=True)
    spec = JobSpec(name="ev", project="proj", command=("true",), params={"mode": "Evaluate"})
    evaluate = Supervisor(files, spec, GradingSettings(), files.read_status())
    evaluate.session.record_verdicts(verdicts("Evaluation", True, False, True, True))
    summary = files.read_status()["summary"]
    assert summary["finalPassRate"] == 0.75 and summary["final"]["passed"] == 3
    assert "comparison" not in summary
    assert results_view.result_lines({"summary": summary}) == ["Final:         75.0% (3/4 scored tasks passed)"]

    # A training run without a baseline asked for compares nothing either; one that asked for both still does.
    assert not compares({"mode": "Train", "evaluation": {"baseline": False}})
    assert compares({"mode": "Train"}) and compares({})
