"""The local executor end to end: supervisors, the echo trainer, process-mode graders on the catalog's
arithmetic environment, cost caps, lost supervisors, cancel and suspend.

Intervals are fractions of a second so that each job takes a few seconds; every wait is generous and no
assertion depends on how fast the host is.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import signal
import subprocess
import sys
import textwrap
import time
from decimal import Decimal
from pathlib import Path
from typing import Any

import pytest

from nodus.errors import ConfigError, TemporaryError
from nodus.reconciler.executors import CANCELLED, FAILED, PENDING, RUNNING, SUCCEEDED, SUSPENDED
from nodus.reconciler.executors.local.job import grading_to_json, lock_held, start_ticks, wait_gone

PROJECT = "proj"


def _cost(status: dict[str, Any]) -> Decimal:
    return Decimal(status["costUSD"])


def _gone(pids: list[tuple[int, int]], timeout_s: float = 15.0) -> bool:
    return all(wait_gone(pid, ticks, timeout_s) for pid, ticks in pids)


def _true_answer(prompt: str) -> int:
    expression = prompt.split("\n\n")[1].strip()
    assert re.fullmatch(r"[0-9+\-* ()]+", expression), expression
    return int(eval(expression, {"__builtins__": {}}))


def test_a_job_goes_from_pending_through_its_stages_to_succeeded_with_verified_outputs(jobs: Any) -> None:
    spec = jobs.spec(parameters={"steps": 4, "sleepS": 0.2})
    spec = spec.with_changes(params={**spec.params, "evaluation": {"minComparisonTasks": 8}})
    files = jobs.launch(spec)
    seen: list[str] = []

    def finished() -> dict[str, Any] | None:
        status = jobs.status()  # every read parses: status.json is never seen half-written
        if not seen or seen[-1] != status["phase"]:
            seen.append(status["phase"])
        return status if status["phase"] in (SUCCEEDED, FAILED) else None

    status = jobs.until(finished, "the job to finish")
    assert status["phase"] == SUCCEEDED, status.get("message")
    assert RUNNING in seen and seen[-1] == SUCCEEDED
    events = jobs.events()
    assert events[0]["type"] == "Launched" and events[0]["phase"] == PENDING
    order = [e["type"] for e in events if e["type"] != "Progress"]
    assert order == ["Launched", "SupervisorStarted", "TrainerStarted", "GradersClosed", "TrainerSucceeded"]
    stages = [e["stage"] for e in events if "stage" in e]
    assert stages == ["Baseline", "Training", "Training", "Training", "Training", "Evaluating", "Exporting"]
    assert status["step"] == 4 and status["totalSteps"] == 4 and "reward" in status["metrics"]
    # The summary is the platform's, from its own gradings; of the trainer's keys only its own one is kept.
    summary = status["summary"]
    assert set(summary) == {"baselinePassRate", "finalPassRate", "baseline", "final", "comparison", "echoBaseline"}
    # The echo trainer answers every other task right, before and after: the grader really graded.
    assert summary["baseline"] == summary["final"] and summary["baseline"]["tasks"] == 8
    assert summary["baseline"]["scored"] == 8 and 0 < summary["baseline"]["passed"] < 8
    assert summary["baselinePassRate"] == summary["finalPassRate"] == summary["baseline"]["passed"] / 8
    assert summary["comparison"] == {"comparable": True, "changePoints": 0.0, "tasks": 8}
    assert status["diagnostics"] == {"rewardSignal": {"groups": 0, "flatGroups": 0}}  # one completion per task
    records = [json.loads(line) for line in files.gradings_log.read_text().splitlines()]
    assert [r["phase"] for r in records] == ["Baseline"] * 8 + ["Training"] * 16 + ["Evaluation"] * 8
    assert [r["request"] for r in records] == [1] * 8 + [n for n in (2, 3, 4, 5) for _ in range(4)] + [6] * 8

    manifest = json.loads(files.outputs_manifest.read_text())
    assert sorted(manifest["files"]) == ["adapter/weights.bin", "results.json"] == status["outputs"]
    for name, entry in manifest["files"].items():
        data = (files.outputs / name).read_bytes()
        assert entry == {"sha256": hashlib.sha256(data).hexdigest(), "size": len(data)}

    # Cost is the trainer's running time times the price, summed over sessions.
    (session,) = status["sessions"]
    assert _cost(status) == Decimal(session["costUSD"]) > 0
    expected = Decimal(str(session["seconds"])) * Decimal(36) / Decimal(3600)
    assert abs(_cost(status) - expected) <= Decimal("0.000001")
    assert session["seconds"] >= 4 * 0.2

    # Nothing of the job outlives it; the attempt API answered on its socket and logged each call.
    assert _gone([(status["supervisorPid"], status["supervisorStartTicks"])])
    assert start_ticks(status["trainerPid"]) != status["trainerStartTicks"]
    assert not lock_held(files.supervisor_lock)
    log = files.attempt_log.read_text().splitlines()
    assert any(" /trainingjobs/tj/tasks 200 in=" in line for line in log)
    assert all(re.search(r" in=\d+B out=\d+B ", line) for line in log)
    assert files.gradings_log.read_text().count('"argv"') > 0  # the host keeps the whole evidence


def test_no_answer_ever_crosses_the_socket(jobs: Any) -> None:
    jobs.launch(jobs.spec(parameters={"steps": 2}))
    status = jobs.wait()
    assert status["phase"] == SUCCEEDED, status.get("message")
    wire = jobs.wire()
    assert {record["path"].rsplit("/", 1)[1] for record in wire} == {"tasks", "gradings", "events"}

    prompts: dict[str, str] = {}
    for record in wire:
        if record["path"].endswith("/tasks"):
            for text in record["response"]["files"].values():
                for line in text.splitlines():
                    task = json.loads(line)
                    assert set(task) == {"taskId", "prompt", "metadata"}
                    prompts[task["taskId"]] = task["prompt"]
    assert len(prompts) == 16 + 8

    graded = 0
    for record in wire:
        assert "answer" not in json.dumps(record["request"]).replace("<answer>", "").replace("</answer>", "")
        if not record["path"].endswith("/gradings"):
            assert '"answer"' not in json.dumps(record["response"])
            continue
        sent = {item["taskId"]: item["completion"] for item in record["request"]["items"]}
        for verdict in record["response"]["verdicts"]:
            graded += 1
            task_id = verdict["taskId"]
            sandbox = verdict["evidence"].pop("sandbox") or {}
            # What a grader may call "answer" is the one it read from the trainer's own completion...
            own = re.fullmatch(r"<answer>(-?\d+)</answer>", sent[task_id])
            assert own is not None and sandbox.get("answer", own.group(1)) == own.group(1)
            # ...so a wrong completion comes back Incorrect without the expected answer anywhere in the reply.
            truth = _true_answer(prompts[task_id])
            if int(own.group(1)) != truth:
                assert verdict["verdict"] == "Incorrect" and verdict["reward"] == 0
            assert "answer" not in json.dumps(verdict)
            assert "argv" not in verdict["evidence"]["process"]  # host folders stay on the host
    assert graded == 8 + 2 * 4 + 8


def test_launching_twice_starts_one_supervisor(jobs: Any) -> None:
    spec = jobs.spec(parameters={"steps": 3, "sleepS": 0.2})
    files = jobs.launch(spec)
    first = json.loads(files.supervisor.read_text())
    jobs.launch(spec)
    jobs.executor.launch(spec)
    assert json.loads(files.supervisor.read_text()) == first
    status = jobs.wait()
    assert status["phase"] == SUCCEEDED and status["supervisorPid"] == first["pid"]
    jobs.launch(spec)  # a finished job is not started again either
    types = [e["type"] for e in jobs.events()]
    assert types.count("SupervisorStarted") == 1 and types.count("TrainerStarted") == 1
    assert [s["step"] for s in jobs.steps()] == [0, 1, 2]


def test_the_supervisor_outlives_the_process_that_launched_it(jobs: Any, tmp_path: Any) -> None:
    spec = jobs.spec(parameters={"steps": 6, "sleepS": 0.3})
    (tmp_path / "workload.json").write_text(spec.to_json())
    (tmp_path / "grading.json").write_text(json.dumps(grading_to_json(jobs.grading)))
    script = textwrap.dedent(
        """
        import json, sys
        from pathlib import Path
        from nodus.reconciler.executors import LocalExecutor, Workload
        from nodus.reconciler.executors.local.job import grading_from_json
        root, spec, grading = (Path(a) for a in sys.argv[1:4])
        executor = LocalExecutor(root, grading_from_json(json.loads(grading.read_text())))
        executor.launch(Workload.from_json(spec.read_text()))
        """
    )
    jobs.started.append(jobs.files())
    launcher = subprocess.run(
        [sys.executable, "-c", script, str(jobs.root), str(tmp_path / "workload.json"), str(tmp_path / "grading.json")],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert launcher.returncode == 0, launcher.stderr
    assert jobs.status()["phase"] in (PENDING, RUNNING)  # the launcher is gone, the job is not
    status = jobs.wait()
    assert status["phase"] == SUCCEEDED, status.get("message")
    assert [s["step"] for s in jobs.steps()] == list(range(6))


def test_a_killed_supervisor_is_noticed_and_recovery_resumes_from_the_checkpoint(jobs: Any) -> None:
    workload = jobs.spec(parameters={"steps": 12, "sleepS": 0.15})
    jobs.launch(workload)
    jobs.until(lambda: (jobs.checkpoint() or 0) >= 2, "two checkpoints")
    assert jobs.executor.is_alive(PROJECT, "tj")
    status = jobs.status()
    trainer = (status["trainerPid"], status["trainerStartTicks"])
    os.kill(status["supervisorPid"], signal.SIGKILL)

    jobs.until(lambda: not jobs.executor.is_alive(PROJECT, "tj"), "the lost supervisor to be noticed")
    assert _gone([trainer])  # the kernel ended the trainer with its supervisor
    at_loss = jobs.checkpoint()
    assert jobs.status()["phase"] == RUNNING  # nobody recorded anything: the supervisor died
    assert jobs.executor.observe(PROJECT, "tj").lost
    jobs.executor.restart(PROJECT, "tj")
    assert jobs.status()["phase"] in (PENDING, RUNNING) and jobs.status()["attempt"] == 2
    jobs.executor.restart(PROJECT, "tj")  # a second call finds it alive: no attempt 3
    assert jobs.executor.spec_of(PROJECT, "tj").attempt == 2

    status = jobs.wait()
    assert status["phase"] == SUCCEEDED, status.get("message")
    assert status["attempt"] == 2 and status["reason"] == "TrainerSucceeded"
    assert jobs.executor.spec_of(PROJECT, "tj") == workload.with_changes(attempt=2)  # the workload, as it runs now
    steps = jobs.steps()
    second = [s["step"] for s in steps if s["attempt"] == "2"]
    assert second == list(range(at_loss + 1, 12))  # continued from the checkpoint, not from step 0
    assert sorted({s["step"] for s in steps}) == list(range(12))
    assert "SupervisorLost" in [e["type"] for e in jobs.events()]
    assert len(status["sessions"]) == 1  # the killed session could not record itself; the job's cost still grew
    assert _cost(status) > Decimal(status["sessions"][0]["costUSD"])


def test_a_supervisor_told_to_stop_stops_its_trainer_and_leaves_the_job_to_recover(jobs: Any) -> None:
    jobs.launch(jobs.spec(parameters={"steps": 200, "sleepS": 0.1}))
    # A finished step, not a reported one: the trainer reports a step as it starts it, and on a busy machine
    # grading its batch can take longer than the signal takes to arrive.
    log = jobs.files().trainer_log
    jobs.until(lambda: log.exists() and "step 0 done" in log.read_text(), "a training step")
    status = jobs.status()
    os.kill(status["supervisorPid"], signal.SIGTERM)  # a host shutting down
    assert _gone([(status["supervisorPid"], status["supervisorStartTicks"])])
    assert _gone([(status["trainerPid"], status["trainerStartTicks"])])
    status = jobs.status()
    assert status["phase"] == RUNNING and status["reason"] == "SupervisorStopped"
    assert status["sessions"][0]["reason"] == "SupervisorStopped" and _cost(status) > 0
    assert "echo-trainer: step 0 done" in jobs.files().trainer_log.read_text()
    assert not jobs.executor.is_alive(PROJECT, "tj")
    jobs.executor.cancel(PROJECT, "tj")  # with no supervisor, the executor records it
    assert jobs.status()["phase"] == CANCELLED


def test_a_hung_supervisor_is_killed_and_the_job_fails_when_abandoned(jobs: Any) -> None:
    jobs.launch(jobs.spec(parameters={"steps": 200, "sleepS": 0.1}))
    jobs.until(lambda: jobs.status().get("step") is not None, "a training step")
    status = jobs.status()
    supervisor = (status["supervisorPid"], status["supervisorStartTicks"])
    trainer = (status["trainerPid"], status["trainerStartTicks"])
    os.kill(supervisor[0], signal.SIGSTOP)  # alive and holding its lock, but no heartbeat
    jobs.until(lambda: not jobs.executor.is_alive(PROJECT, "tj"), "the stale heartbeat to be noticed", 30)

    assert jobs.executor.observe(PROJECT, "tj").lost
    jobs.executor.abandon(PROJECT, "tj", "SupervisorLost", "the supervisor was lost on attempt 1; no restarts")
    assert _gone([supervisor, trainer])
    status = jobs.status()
    assert status["phase"] == FAILED and status["reason"] == "SupervisorLost"
    assert status["message"] == "the supervisor was lost on attempt 1; no restarts"
    assert not jobs.executor.observe(PROJECT, "tj").lost


def test_a_cap_reached_mid_run_suspends_and_raising_it_resumes_from_the_checkpoint(jobs: Any) -> None:
    # $36/h is a cent a second; one 0.2 s interval costs $0.002. The trainer ignores SIGTERM and the grace is
    # 3 s: stopping it for the cap must still not take more than one interval. The $0.05 cap is 5 s of running;
    # the steps alone take 10 s, so the cap comes mid-run however fast this host grades (with 40 steps an idle
    # machine finished all but the last one first).
    steps = 100
    spec = jobs.spec(parameters={"steps": steps, "sleepS": 0.1, "ignoreSigterm": True}, max_cost_usd="0.05")
    files = jobs.launch(spec)
    jobs.until(lambda: (jobs.checkpoint() or 0) >= 1, "a checkpoint")
    supervisor = jobs.status()["supervisorPid"]
    graders = jobs.until(
        lambda: [p for p in jobs.descendants(supervisor) if "grade --timeout" in jobs.cmdline(p[0])],
        "the graders of the job",
    )

    status = jobs.wait()
    assert status["phase"] == SUSPENDED and status["reason"] == "MaxCostReached", status.get("message")
    interval = spec.interval_cost()
    assert Decimal("0.05") - 2 * interval <= _cost(status) <= Decimal("0.05") + 2 * interval  # one late tick
    closed = [e for e in jobs.events() if e["type"] == "GradersClosed"]
    assert closed and closed[-1]["graders"] >= 1
    assert _gone(graders)  # the graders were removed with the run
    assert _gone([(supervisor, status["supervisorStartTicks"]), (status["trainerPid"], status["trainerStartTicks"])])
    at_cap = jobs.checkpoint()
    assert at_cap is not None and at_cap < steps - 1

    with pytest.raises(ConfigError, match="no room under maxCostUSD"):
        jobs.executor.resume(PROJECT, "tj")
    with pytest.raises(ConfigError, match="can only be raised"):
        jobs.executor.resume(PROJECT, "tj", max_cost_usd="0.01")
    jobs.executor.resume(PROJECT, "tj", max_cost_usd="5")
    status = jobs.wait()
    assert status["phase"] == SUCCEEDED, status.get("message")
    first_pid = jobs.steps()[0]["pid"]
    resumed = [s["step"] for s in jobs.steps() if s["pid"] != first_pid]
    assert resumed == list(range(at_cap + 1, steps))  # the same attempt, on from its checkpoint
    assert {s["attempt"] for s in jobs.steps()} == {"1"} and {s["step"] for s in jobs.steps()} == set(range(steps))
    sessions = status["sessions"]
    assert [s["reason"] for s in sessions] == ["MaxCostReached", "TrainerSucceeded"]
    assert _cost(status) == sum(Decimal(s["costUSD"]) for s in sessions) <= Decimal(5)
    assert json.loads(files.spec.read_text())["maxCostUSD"] == "5"
    assert jobs.executor.spec_of(PROJECT, "tj") == spec.with_changes(max_cost_usd="5")


def test_a_cap_raised_while_the_job_runs_is_the_one_it_stops_at(jobs: Any) -> None:
    spec = jobs.spec(parameters={"steps": 500, "sleepS": 0.05}, max_cost_usd="0.02")
    jobs.launch(spec)
    jobs.executor.resume(PROJECT, "tj", max_cost_usd="0.035")  # running (or about to): only the cap changes
    status = jobs.wait()
    assert status["phase"] == SUSPENDED and status["reason"] == "MaxCostReached"
    # Past the first cap, and stopped at the raised one: within one interval of it, plus one more for an
    # accounting tick a loaded host ran late (cost is wall time, and a late tick bills the time it was late).
    assert Decimal("0.02") + spec.interval_cost() < _cost(status) <= Decimal("0.035") + 2 * spec.interval_cost()
    assert status["maxCostUSD"] == "0.035"


def test_a_failing_trainer_fails_the_job_with_the_tail_of_its_log(jobs: Any) -> None:
    jobs.launch(jobs.spec(parameters={"steps": 5, "failAtStep": 1}))
    status = jobs.wait()
    assert status["phase"] == FAILED and status["reason"] == "TrainerFailed"
    assert status["exitCode"] == 3
    assert status["message"] == "the trainer exited with status 3: echo-trainer: failing on purpose at step 1"
    assert status["logTail"][-2:] == ["echo-trainer: step 0 done", "echo-trainer: failing on purpose at step 1"]
    assert not jobs.files().outputs_manifest.exists()


def test_a_trainer_that_cannot_start_fails_the_job(jobs: Any) -> None:
    jobs.launch(jobs.spec(command=("/nonexistent/trainer",)))
    status = jobs.wait()
    assert status["phase"] == FAILED and status["reason"] == "TrainerFailed"
    assert "cannot start the trainer '/nonexistent/trainer'" in status["message"]


def test_cancel_stops_the_trainer_and_its_graders(jobs: Any) -> None:
    jobs.launch(jobs.spec(parameters={"steps": 500, "sleepS": 0.05}))
    jobs.until(lambda: (jobs.checkpoint() or 0) >= 1, "a checkpoint")
    status = jobs.status()
    below = jobs.descendants(status["supervisorPid"])
    jobs.executor.cancel(PROJECT, "tj")
    status = jobs.wait()
    assert status["phase"] == CANCELLED and status["reason"] == "CancelRequested" and status["finishedAt"]
    assert _gone(below) and _gone([(status["supervisorPid"], status["supervisorStartTicks"])])
    jobs.executor.cancel(PROJECT, "tj")  # cancelling a cancelled job changes nothing
    assert jobs.status()["phase"] == CANCELLED
    with pytest.raises(ConfigError, match="only a Suspended job can be resumed"):
        jobs.executor.resume(PROJECT, "tj")


def _environ(pid: int) -> dict[str, str] | None:
    try:
        raw = Path(f"/proc/{pid}/environ").read_bytes()
    except (FileNotFoundError, ProcessLookupError):
        return None  # ended since the tree was read (a grader's run)
    return dict(entry.decode(errors="replace").partition("=")[::2] for entry in raw.split(b"\0") if entry)


def test_the_supervisor_and_trainer_get_what_the_job_names_and_none_of_the_launchers_tokens(
    jobs: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    from nodus.reconciler.executors.workload import SecretRef

    canaries = {"HF_TOKEN": "canary-hf-shell", "AWS_SECRET_ACCESS_KEY": "canary-aws-shell"}
    for name, value in canaries.items():
        monkeypatch.setenv(name, value)
    monkeypatch.setenv("PROD_HF_TOKEN", "the-secrets-value")
    source = {"keys": ["HF_TOKEN"], "provider": "Env", "envPrefix": "PROD_"}
    secret = SecretRef(env="HF_TOKEN", secret="hub", key="HF_TOKEN", source=source, field="spec.model.secret")
    spec = jobs.spec(parameters={"steps": 500, "sleepS": 0.05}, env={"JOB_SETTING": "named"}, secrets=(secret,))
    jobs.launch(spec)
    jobs.until(lambda: (jobs.checkpoint() or 0) >= 1, "a checkpoint")  # graded once: its graders run too
    status = jobs.status()
    supervisor, trainer = status["supervisorPid"], status["trainerPid"]
    below = [pid for pid, _ in jobs.descendants(supervisor)]
    assert trainer in below and len(below) >= 2, below  # the trainer and at least one grader's sandbox
    for pid in [supervisor, *below]:
        seen = _environ(pid)
        if seen is None:
            continue
        leaked = sorted(name for name, value in seen.items() if value in canaries.values())
        assert not leaked, f"{jobs.cmdline(pid)} (pid {pid}) inherited {leaked}"
    own, trainers = _environ(supervisor), _environ(trainer)
    assert own is not None and trainers is not None
    assert own["PROD_HF_TOKEN"] == "the-secrets-value" and "JOB_SETTING" not in own  # it reads the Secret, no more
    assert trainers["HF_TOKEN"] == "the-secrets-value" and trainers["JOB_SETTING"] == "named", trainers
    assert "PROD_HF_TOKEN" not in trainers and trainers["NODUS_JOB_NAME"] == "tj"


def test_suspend_keeps_the_state_and_resume_goes_on_from_it(jobs: Any) -> None:
    jobs.launch(jobs.spec(parameters={"steps": 10, "sleepS": 0.15}))
    jobs.until(lambda: (jobs.checkpoint() or 0) >= 1, "a checkpoint")
    jobs.executor.suspend(PROJECT, "tj")
    status = jobs.wait()
    assert status["phase"] == SUSPENDED and status["reason"] == "SuspendRequested"
    at_suspend = jobs.checkpoint()
    assert at_suspend is not None
    time.sleep(0.5)
    assert jobs.checkpoint() == at_suspend  # nothing runs while suspended
    jobs.executor.resume(PROJECT, "tj")
    status = jobs.wait()
    assert status["phase"] == SUCCEEDED, status.get("message")
    first_pid = jobs.steps()[0]["pid"]
    assert [s["step"] for s in jobs.steps() if s["pid"] != first_pid] == list(range(at_suspend + 1, 10))
    assert [e["reason"] for e in status["sessions"]] == ["SuspendRequested", "TrainerSucceeded"]


def test_a_suspend_or_cancel_with_no_supervisor_is_recorded_by_the_executor(jobs: Any) -> None:
    jobs.launch(jobs.spec(parameters={"steps": 200, "sleepS": 0.1}))
    jobs.until(lambda: jobs.status().get("step") is not None, "a training step")
    status = jobs.status()
    os.kill(status["supervisorPid"], signal.SIGKILL)
    assert _gone([(status["trainerPid"], status["trainerStartTicks"])])
    jobs.until(lambda: not lock_held(jobs.files().supervisor_lock), "the lock to be let go")
    jobs.executor.suspend(PROJECT, "tj")
    assert jobs.status()["phase"] == SUSPENDED
    jobs.executor.cancel(PROJECT, "tj")
    status = jobs.status()
    assert status["phase"] == CANCELLED and status["reason"] == "CancelRequested"


def test_observing_a_missing_job_is_a_one_line_error(jobs: Any) -> None:
    with pytest.raises(ConfigError, match="there is no job proj/nope"):
        jobs.executor.status(PROJECT, "nope")


def test_a_new_generation_starts_over_and_an_older_one_changes_nothing(jobs: Any) -> None:
    jobs.launch(jobs.spec(parameters={"steps": 3}))
    first = jobs.wait()
    assert first["phase"] == SUCCEEDED
    jobs.launch(jobs.spec(generation=2, parameters={"steps": 200, "sleepS": 0.1}))
    jobs.until(lambda: jobs.status().get("step") is not None, "generation 2 to train")
    with pytest.raises(TemporaryError, match="still runs generation 2 attempt 1"):
        jobs.launch(jobs.spec(generation=3))
    jobs.launch(jobs.spec(generation=1))  # a stale controller: nothing happens
    assert jobs.status()["generation"] == 2
    jobs.executor.cancel(PROJECT, "tj")
    assert jobs.wait()["phase"] == CANCELLED

    jobs.launch(jobs.spec(generation=3, parameters={"steps": 2}))
    status = jobs.wait()
    assert status["phase"] == SUCCEEDED and status["generation"] == 3
    assert [s["step"] for s in jobs.steps()] == [0, 1]  # a fresh state folder
    assert len(status["sessions"]) == 1 and _cost(status) == Decimal(status["sessions"][0]["costUSD"])
    types = [e["type"] for e in jobs.events()]
    assert types[0] == "Launched" and types.count("SupervisorStarted") == 1  # a fresh event log too


def test_a_new_generation_sets_the_finished_one_aside_with_its_outputs_and_logs(jobs: Any) -> None:
    files = jobs.launch(jobs.spec(parameters={"steps": 2}))
    assert jobs.wait()["phase"] == SUCCEEDED
    results = (files.outputs / "results.json").read_bytes()
    manifest = files.outputs_manifest.read_bytes()
    trainer_log = files.trainer_log.read_text()
    assert "2 steps" in trainer_log

    jobs.launch(jobs.spec(generation=2, parameters={"steps": 3}))
    status = jobs.wait()
    assert status["phase"] == SUCCEEDED and status["generation"] == 2
    assert json.loads((files.outputs / "results.json").read_text())["steps"] == 3  # the top is generation 2

    earlier = files.earlier(1)
    assert files.earlier_generations() == [1]
    assert (earlier.outputs / "results.json").read_bytes() == results
    assert earlier.outputs_manifest.read_bytes() == manifest
    assert earlier.trainer_log.read_text() == trainer_log and "3 steps" not in earlier.trainer_log.read_text()
    assert earlier.read_spec().generation == 1 and earlier.read_status()["phase"] == SUCCEEDED
    assert json.loads(earlier.params.read_text())["parameters"]["steps"] == 2
    assert not earlier.state.exists()  # checkpoints are only for resuming: a new generation starts over
    assert [s["step"] for s in jobs.steps()] == [0, 1, 2]

    assert jobs.executor.generation_files(PROJECT, "tj", 1) == earlier
    assert jobs.executor.generation_files(PROJECT, "tj", 2) == jobs.executor.generation_files(PROJECT, "tj") == files
    with pytest.raises(ConfigError, match=r"job proj/tj has no generation 5 \(generations: 1, 2\)"):
        jobs.executor.generation_files(PROJECT, "tj", 5)


def test_two_jobs_run_at_once_with_runner_uids_of_their_own(jobs: Any) -> None:
    a = jobs.launch(jobs.spec("a", parameters={"steps": 3, "sleepS": 0.2}))
    b = jobs.launch(jobs.spec("b", parameters={"steps": 3, "sleepS": 0.2}))
    assert jobs.wait("a")["phase"] == SUCCEEDED and jobs.wait("b")["phase"] == SUCCEEDED
    blocks = [json.loads(files.grading.read_text()) for files in (a, b)]
    assert {g["runner_uid_count"] for g in blocks} == {2}
    assert blocks[0]["runner_uid_base"] != blocks[1]["runner_uid_base"]
    # Both are over: a third job may take either block again.
    c = jobs.launch(jobs.spec("c", parameters={"steps": 1}))
    assert json.loads(c.grading.read_text())["runner_uid_base"] == jobs.grading.runner_uid_base
    assert jobs.wait("c")["phase"] == SUCCEEDED


def test_the_supervisor_command_refuses_a_folder_without_a_job_in_one_line(tmp_path: Any) -> None:
    result = subprocess.run(
        [sys.executable, "-m", "nodus.reconciler.executors.local.supervisor", str(tmp_path / "nope")],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert result.returncode == 2
    assert result.stderr == f"error: no job in {tmp_path / 'nope'} (spec.json is missing)\n"


def test_a_supervisor_started_by_hand_on_a_finished_job_changes_nothing(jobs: Any) -> None:
    files = jobs.launch(jobs.spec(parameters={"steps": 1, "evaluate": False}))
    before = jobs.wait()
    assert before["phase"] == SUCCEEDED
    result = subprocess.run(
        [sys.executable, "-m", "nodus.reconciler.executors.local.supervisor", str(files.dir)],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert result.returncode == 0 and "is Succeeded; nothing to supervise" in result.stderr
    assert jobs.status() == before


class _Killed(BaseException):
    """Stands in for SIGKILL: nothing after it runs (not an Exception, so no handler of the executor sees it)."""


def test_a_launch_killed_while_it_writes_the_folder_launches_whole_next_time(
    jobs: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """An apply killed after the first files of a job folder and before its spec: the next launch writes the
    folder again and the trainer finds its params.json (with spec.json first, it spawned the half-written spec
    and the trainer failed on the missing file)."""
    from nodus.reconciler.executors.local import executor as module

    real = module.write_json

    def killed_at_params(path: Any, data: Any, **options: Any) -> None:
        if path.name == "params.json":
            raise _Killed
        real(path, data, **options)

    spec = jobs.spec()
    monkeypatch.setattr(module, "write_json", killed_at_params)
    with pytest.raises(_Killed):
        jobs.launch(spec)
    monkeypatch.setattr(module, "write_json", real)
    files = jobs.files()
    assert not files.spec.exists()  # nothing committed: the next launch starts over

    jobs.launch(spec)
    status = jobs.wait()
    assert status["phase"] == SUCCEEDED, status.get("message")
