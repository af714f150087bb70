"""`nodus get` and `describe` are pure reads: with a job's supervisor killed, they show its stale heartbeat and
start nothing, write nothing; `nodus refresh` (under the apply lease) recovers it. The echo trainer runs a
TrainingJob record's job in the project's jobs folder, as `test_grading_failures.py` sets it up: no podman."""

from __future__ import annotations

import os
import signal
from collections.abc import Callable
from pathlib import Path
from typing import Any

from click.testing import CliRunner

from nodus.cli.main import cli
from nodus.reconciler.executors.local.job import read_json
from nodus.reconciler.project import Project
from nodus.reconciler.state.records import Launch, ResourceKey

NAME = "followed"
KEY = ResourceKey("TrainingJob", "default", NAME)


def nodus(*args: str) -> tuple[int, str, str]:
    result = CliRunner().invoke(cli, list(args))
    return result.exit_code, result.stdout, result.stderr


def stored(root: Path) -> tuple[int, int, dict[str, Any]]:
    """The store's serial, the record's status version and its status."""
    store = Project.find(root).open_state()
    try:
        record = store.get(KEY)
        assert record is not None
        return store.serial(), record.status_version, record.status
    finally:
        store.close()


def test_get_and_describe_of_a_lost_job_change_nothing_and_refresh_recovers_it(
    tmp_path: Path, make_jobs: Callable[..., Any]
) -> None:
    root = tmp_path / "project"
    (root / ".nodus").mkdir(parents=True)
    (root / "nodus.lock").write_text("lockfileVersion: 1\n")
    (tmp_path / "jobs").mkdir()
    (root / ".nodus" / "jobs").symlink_to(tmp_path / "jobs", target_is_directory=True)
    store = Project.find(root).open_state()
    try:
        document = {"apiVersion": "nodus.dev/v1beta1", "kind": "TrainingJob", "metadata": {"name": NAME}}
        store.put(KEY, {**document, "spec": {"runtime": "echo"}})
        store.record_launch(Launch(f"TrainingJob/default/{NAME}/gen1/attempt1", KEY, job=NAME))
    finally:
        store.close()
    jobs = make_jobs()
    spec = jobs.spec(NAME, project="default", parameters={"steps": 40, "sleepS": 0.1})
    files = jobs.launch(spec)
    executor = jobs.executor
    jobs.until(lambda: (read_json(files.state / "checkpoint.json") or {}).get("step", -1) >= 1, "a checkpoint")

    code, out, err = nodus("refresh", str(root))
    assert code == 0 and f"TrainingJob/{NAME}: - -> Running" in out.splitlines()[0], out + err
    os.kill(executor.status("default", NAME)["supervisorPid"], signal.SIGKILL)
    jobs.until(lambda: not executor.is_alive("default", NAME), "the lost supervisor to be noticed")
    supervisor = (read_json(files.supervisor) or {}).get("pid")
    before = stored(root)
    assert before[2]["phase"] == "Running"

    code, out, err = nodus("get", "tj", "-o", "wide", "--path", str(root))
    assert code == 0, err
    header, row = out.splitlines()[:2]
    assert header.split()[-1] == "HEARTBEAT" and row.endswith(" ago"), out
    code, out, err = nodus("describe", f"tj/{NAME}", "--path", str(root))
    assert code == 0, err
    (heartbeat,) = [text for text in out.splitlines() if text.startswith("Heartbeat:")]
    assert heartbeat.split()[2] == "ago", heartbeat
    code, out, err = nodus("get", "tj", NAME, "-o", "json", "--path", str(root))
    assert code == 0 and '"phase": "Running"' in out

    # Nothing was written and nothing was started: the job is as the kill left it.
    assert stored(root) == before
    assert not executor.is_alive("default", NAME)
    assert (read_json(files.supervisor) or {}).get("pid") == supervisor
    assert executor.status("default", NAME)["phase"] == "Running"  # nobody recorded anything: it died

    code, out, err = nodus("refresh", str(root))
    assert code == 0, err
    assert f"TrainingJob/{NAME}: its supervisor was lost: restarted it (attempt 2)" in out.splitlines(), out
    assert (read_json(files.supervisor) or {}).get("pid") != supervisor
    status = executor.wait("default", NAME, timeout_s=120)
    assert status["phase"] == "Succeeded" and status["attempt"] == 2, status.get("message")
    code, out, err = nodus("refresh", str(root))
    assert code == 0 and out.splitlines() == [f"TrainingJob/{NAME}: Pending -> Succeeded (TrainerSucceeded)"], out
    assert stored(root)[2]["phase"] == "Succeeded"
    code, out, err = nodus("refresh", str(root))
    assert (code, out) == (0, "Nothing changed.\n"), out + err
