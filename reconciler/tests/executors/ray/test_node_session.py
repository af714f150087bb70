"""node_session on this host, as Ray would run it: a Job's session under the local supervisor, its stdout the
marker stream, which RayExecutor reads back (through the in-memory Jobs client) as a Succeeded job."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from nodus.reconciler.executors import Workload, WorkloadKey
from nodus.reconciler.executors.ray import RayExecutor
from nodus.reconciler.executors.ray.status_stream import parse


def test_a_jobs_session_reports_through_its_stdout_alone(tmp_path: Path, fake_jobs, ray_executor: RayExecutor) -> None:
    script = "import os, pathlib; print('::nodus-final::{}'); print('trained'); "
    script += "pathlib.Path(os.environ['NODUS_OUTPUT_DIR'], 'result.txt').write_text('42')"
    workload = Workload(
        key=WorkloadKey(project="proj", name="job-1", kind="Job"), command=(sys.executable, "-c", script)
    )
    ray_executor.launch(workload)
    (submission,) = fake_jobs.submissions
    env = {**os.environ, **submission.env_vars, "NODUS_NODE_JOBS": str(tmp_path / "node-jobs")}
    done = subprocess.run(
        [sys.executable, "-m", "nodus.reconciler.executors.ray.node_main"],
        env=env,
        stdin=subprocess.DEVNULL,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    stream = parse(done.stdout, complete=True)
    assert "::nodus-final::{}\ntrained\n" in stream.trainer  # the trainer's forged marker stays its own line
    assert stream.final is not None and stream.final["phase"] == "Succeeded"
    assert "TrainerStarted" in [event["type"] for event in stream.events]

    fake_jobs.write_log(submission.submission_id, done.stdout)
    fake_jobs.set_status(submission.submission_id, "SUCCEEDED")
    seen = ray_executor.observe("proj", "job-1")
    assert (seen.phase, seen.reason, seen.lost) == ("Succeeded", "TrainerSucceeded", False)
    outputs = ray_executor.outputs("proj", "job-1")
    assert outputs is not None
    assert outputs.files["result.txt"].sha256 == "73475cb40a568e8da8a045ced110137e159f890ac4da883b6b17dc651b3a8049"
    assert b"trained\n" in ray_executor.logs("proj", "job-1").read()


def test_a_workload_the_node_cannot_resolve_ends_with_a_final_failed_marker(
    tmp_path: Path, fake_jobs, ray_executor: RayExecutor
) -> None:
    workload = Workload.model_validate(
        {"key": {"project": "proj", "name": "tj-2"}, "command": ["python", "train.py"], "model": {"uri": "hf://o/m@1"}}
    )
    ray_executor.launch(workload)
    (submission,) = fake_jobs.submissions
    env = {**os.environ, **submission.env_vars, "NODUS_NODE_JOBS": str(tmp_path / "node-jobs")}
    done = subprocess.run(
        [sys.executable, "-m", "nodus.reconciler.executors.ray.node_main"],
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert done.returncode == 1
    final = parse(done.stdout, complete=True).final
    assert final is not None and (final["phase"], final["reason"]) == ("Failed", "LaunchFailed")
    assert "model: this executor has no project to find models in" in final["message"]
