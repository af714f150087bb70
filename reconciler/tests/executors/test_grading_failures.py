"""A run whose reward raises on some replies: the failed gradings reach the TrainingJob's status (counts per
phase and a GradingFailures condition) and every place people look: `nodus describe`, `nodus get -o wide` and
`nodus logs`. The echo trainer runs against a copy of the arithmetic environment whose reward raises
ZeroDivisionError on every wrong answer (the trainer answers every other task off by one), graded in process
mode, so no podman is needed."""

from __future__ import annotations

import shutil
from collections.abc import Callable
from pathlib import Path
from typing import Any

from click.testing import CliRunner

from nodus.cli.main import cli
from nodus.reconciler.project import Project
from nodus.reconciler.state.records import Launch, ResourceKey
from nodus.reconciler.views import columns

REPO = Path(__file__).resolve().parents[3]
NAME = "raising-run"
RAISING = """

_scored = reward


def reward(completion: str, answer: int) -> float | None:
    value = _scored(completion, answer)
    if value == 0.0:
        return 1 / 0  # a grader bug that only wrong answers reach
    return value
"""


def nodus(*args: str) -> tuple[int, str, str]:
    result = CliRunner().invoke(cli, list(args))
    return result.exit_code, result.stdout, result.stderr


def test_failed_gradings_reach_status_describe_get_wide_and_logs(tmp_path: Path, make_jobs: Callable[..., Any]) -> None:
    package = tmp_path / "arithmetic"
    shutil.copytree(REPO / "catalog" / "arithmetic", package, ignore=shutil.ignore_patterns("tests", "__pycache__"))
    with (package / "arithmetic_env.py").open("a") as module:
        module.write(RAISING)
    # The project's jobs folder is the executor's (the fixture's tmp_path/jobs), so the CLI reads this run.
    root = tmp_path / "project"
    (root / ".nodus").mkdir(parents=True)
    (root / "nodus.lock").write_text("lockfileVersion: 1\n")
    (tmp_path / "jobs").mkdir()
    (root / ".nodus" / "jobs").symlink_to(tmp_path / "jobs", target_is_directory=True)
    key = ResourceKey("TrainingJob", "default", NAME)
    store = Project.find(root).open_state()
    try:
        store.put(
            key,
            {
                "apiVersion": "nodus.dev/v1beta1",
                "kind": "TrainingJob",
                "metadata": {"name": NAME},
                "spec": {"runtime": "echo", "environment": {"name": "nodus/arithmetic@2.0.0"}},
            },
        )
        store.record_launch(Launch(f"TrainingJob/default/{NAME}/gen1/attempt1", key, job=NAME))
    finally:
        store.close()

    jobs = make_jobs()
    spec = jobs.spec(NAME, project="default", package=package)
    jobs.launch(spec)
    status = jobs.executor.wait("default", NAME, timeout_s=120)
    assert status["phase"] == "Succeeded", status.get("message")
    failures = status["summary"]["gradingFailures"]
    # Half of each phase's gradings were wrong answers, so half failed: 4 steps of 4, 8 held-out tasks twice.
    assert failures["phases"] == {
        "Baseline": {"failed": 4, "gradings": 8},
        "Training": {"failed": 8, "gradings": 16},
        "Evaluation": {"failed": 4, "gradings": 8},
    }
    assert (failures["failed"], failures["gradings"]) == (16, 32)

    # `describe` and `get` are pure reads: the status the job reported reaches the record at a refresh.
    code, out, err = nodus("refresh", str(root))
    assert code == 0 and out.splitlines() == [f"TrainingJob/{NAME}: - -> Succeeded (TrainerSucceeded)"], out + err
    code, out, err = nodus("describe", f"tj/{NAME}", "--path", str(root))
    assert code == 0, err
    message = (
        "4 of 8 baseline gradings and 8 of 16 training gradings and 4 of 8 final evaluation gradings failed "
        "(InfrastructureFailure): excluded from pass rates and rewards"
    )
    conditions = out.split("Conditions:\n", 1)[1].split("Results:", 1)[0]
    assert f"GradingFailures  True   InfrastructureFailure  {message}; see nodus logs" in conditions
    results = out.split("Results:\n", 1)[1].split("Events:", 1)[0]
    assert "  Gradings:      16 of 32 failed" in results
    assert f"  Warning:       {message}; see nodus logs tj/{NAME}" in results

    # `get -o wide`'s rows (the table itself is cut to the terminal's width here), from the refreshed record.
    store = Project.find(root).open_state()
    try:
        record = store.get(key)
        assert record is not None
        titles, rows = columns.rows("TrainingJob", [record], wide=True)
    finally:
        store.close()
    assert rows[0][titles.index("GRADING-FAILURES")] == "16/32"
    assert {"type": "GradingFailures", "status": "True", "reason": "InfrastructureFailure"}.items() <= next(
        c for c in record.status["conditions"] if c["type"] == "GradingFailures"
    ).items()

    code, out, err = nodus("logs", f"tj/{NAME}", "--path", str(root))
    assert code == 0, err
    gradings = tmp_path / "jobs" / "default" / NAME / "logs" / "gradings.jsonl"
    lines = err.splitlines()
    assert "16 gradings failed (InfrastructureFailure, no reward): their evidence is in" in lines[0]
    assert lines[0].endswith(str(gradings).rsplit("/jobs/", 1)[1])
    assert (
        lines[1].startswith("  Baseline task ")
        and "ZeroDivisionError: division by zero in reward (arithmetic_env.py:" in lines[1]
    )
