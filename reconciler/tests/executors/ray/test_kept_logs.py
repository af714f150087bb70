"""Reads of finished work need no executor (DESIGN.md section 6): the Ray executor keeps each ended run's log and
gradings on this host when it sees the run ended, and `nodus logs` (and the SDK's `run.tasks()`) of that run, with
the cluster down or no token, prints them with one line saying live state could not be read. A run still going is
not kept."""

from __future__ import annotations

from pathlib import Path

import pytest
from click.testing import CliRunner

from nodus.cli.main import cli
from nodus.recipes.apply import Options
from nodus.recipes.runs import Run
from nodus.reconciler.executors import Workload, WorkloadKey
from nodus.reconciler.executors.kept import kept
from nodus.reconciler.executors.ray import RayExecutor
from nodus.reconciler.executors.ray.status_stream import marker
from nodus.reconciler.project import Project

NAME = "echo-run"
FAILED = {"taskId": "t7", "verdict": "InfrastructureFailure", "phase": "Training", "evidence": {"message": "boom"}}


def status(phase: str) -> dict[str, object]:
    return {"phase": phase, "generation": 1, "attempt": 1, "costUSD": "0.01", "maxCostUSD": "1.00"}


def test_nodus_logs_of_a_finished_ray_run_reads_the_kept_copy_with_the_cluster_down(
    fake_jobs, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    root = tmp_path / "project"
    (root / ".git").mkdir(parents=True)
    (root / "nodus.yaml").write_text("executor: {ray: {address: 'http://127.0.0.1:9'}}\n")
    monkeypatch.chdir(root)
    monkeypatch.delenv("RAY_AUTH_TOKEN", raising=False)
    project = Project.find(root)
    project.jobs.mkdir(parents=True)
    ray = RayExecutor(fake_jobs, project.jobs, python="/opt/node/bin/python")
    ray.launch(Workload(key=WorkloadKey(project="default", name=NAME, kind="TrainingJob"), command=("python",)))
    [submission] = [job.submission_id for job in fake_jobs.list()]
    fake_jobs.write_log(submission, "step 1\n" + marker("grading", FAILED) + "step 2\n")
    fake_jobs.set_status(submission, "RUNNING")
    ray.observe("default", NAME)
    assert kept(project.jobs, "default", NAME) is None  # still going: nothing kept yet
    fake_jobs.write_log(submission, marker("final", status("Succeeded")))
    fake_jobs.set_status(submission, "SUCCEEDED")
    assert ray.observe("default", NAME).phase == "Succeeded"  # what a refresh does when the run ends

    result = CliRunner().invoke(cli, ["logs", f"tj/{NAME}"])
    assert result.exit_code == 0, result.output
    assert result.stdout == "step 1\nstep 2\n"
    lines = result.stderr.strip().splitlines()
    assert lines[0].startswith("note: live state could not be read (") and "no token" in lines[0], lines
    assert lines[0].endswith("showing the kept log of generation 1"), lines
    assert (
        lines[1]
        == f"1 gradings failed (InfrastructureFailure, no reward): their evidence is in the kept logs of Ray job {submission}"
    )
    assert "task t7: boom" in lines[2], lines
    # The SDK reads the same copy: the run's gradings, with the same one line.
    [graded] = Run(NAME, "default", Options(path=root)).tasks()
    assert (graded["taskId"], graded["outcome"]) == ("t7", "Unscored")
    assert "note: live state could not be read (" in capsys.readouterr().err
    # Kept as state is: readable by this user only.
    [copy] = (project.jobs / "default" / NAME / "kept" / "gen1").iterdir()
    assert copy.stat().st_mode & 0o077 == 0


def test_a_run_never_kept_is_still_the_executors_error(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    root = tmp_path / "project"
    (root / ".git").mkdir(parents=True)
    (root / "nodus.yaml").write_text("executor: {ray: {address: 'http://127.0.0.1:9'}}\n")
    monkeypatch.chdir(root)
    monkeypatch.delenv("RAY_AUTH_TOKEN", raising=False)
    result = CliRunner().invoke(cli, ["logs", f"tj/{NAME}"])
    assert result.exit_code == 1 and "no token for the Ray cluster" in result.stderr, result.output
