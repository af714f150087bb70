"""GradingService over the fake grader: order, max_parallel, runner uids, failures, closing and idle reaping."""

from __future__ import annotations

import time
from collections import Counter
from collections.abc import Callable
from typing import Any

import pytest

from nodus.errors import ConfigError
from nodus.reconciler.grading.models import EnvironmentRef, GradeRequest, Verdict
from nodus.reconciler.grading.service import GradingService

MakeService = Callable[..., GradingService]


def _items(*completions: str) -> list[dict[str, Any]]:
    return [{"taskId": f"t{i}", "completion": c} for i, c in enumerate(completions)]


def _pids(verdicts: list[Verdict]) -> set[int]:
    return {int(v.evidence["sandbox"]["pid"]) for v in verdicts if v.evidence["sandbox"]}


def test_items_in_verdicts_out_in_the_same_order(fake_service: MakeService, fake_env: EnvironmentRef) -> None:
    service = fake_service(max_parallel=3, window=2)
    completions = [["right", "wrong", "sleep:0.05", ""][i % 4] for i in range(30)]
    verdicts = service.grade("job", fake_env, _items(*completions))
    assert [v.task_id for v in verdicts] == [f"t{i}" for i in range(30)]
    expected = {"right": "Correct", "wrong": "Incorrect", "sleep:0.05": "Incorrect", "": "InvalidOutput"}
    assert [v.verdict for v in verdicts] == [expected[c] for c in completions]


def _most_at_once(verdicts: list[Verdict]) -> int:
    """The largest number of sleeps that overlapped in time (the fake records when each began and ended)."""
    edges = sorted(
        (moment, step)
        for v in verdicts
        if v.evidence["sandbox"] and "began" in v.evidence["sandbox"]
        for moment, step in ((v.evidence["sandbox"]["began"], 1), (v.evidence["sandbox"]["ended"], -1))
    )
    running = most = 0
    for _, step in edges:  # an end sorts before a begin at the same moment
        running += step
        most = max(most, running)
    return most


def test_at_most_max_parallel_graders_grade_at_once(fake_service: MakeService, fake_env: EnvironmentRef) -> None:
    service = fake_service(max_parallel=3)
    verdicts = service.grade("job", fake_env, _items(*["sleep:0.3"] * 9))
    assert 2 <= _most_at_once(verdicts) <= 3  # spread over graders, never more than max_parallel at once
    assert 2 <= len(_pids(verdicts)) <= 3
    assert service.graders("job") <= 3
    made = [uid for uid in service.launcher.runner_uids if uid is not None]  # type: ignore[attr-defined]
    assert len(made) <= 3 and len(set(made)) == len(made), "each live grader has its own runner uid"
    assert all(uid >= 20000 for uid in made)


def test_graders_are_kept_per_job_and_reused_across_calls(fake_service: MakeService, fake_env: EnvironmentRef) -> None:
    service = fake_service(max_parallel=1)
    first = service.grade("job-a", fake_env, _items("pid"))
    again = service.grade("job-a", fake_env, _items("pid"))
    other = service.grade("job-b", fake_env, _items("pid"))
    assert _pids(first) == _pids(again) and _pids(first) != _pids(other)
    assert service.graders("job-a") == service.graders("job-b") == 1


def test_no_verdict_is_lost_or_duplicated_when_graders_crash_time_out_and_babble(
    fake_service: MakeService, fake_env: EnvironmentRef
) -> None:
    service = fake_service(max_parallel=3, window=3, task_timeout_s=0.3, kill_grace_s=0.0, start_timeout_s=2.0)
    trouble = {5: "exit:9", 11: "garbage", 17: "sleep:30", 23: "wrong-id", 29: "exit:1"}
    completions = [trouble.get(i, "right") for i in range(40)]
    verdicts = service.grade("job", fake_env, _items(*completions))
    assert [v.task_id for v in verdicts] == [f"t{i}" for i in range(40)]
    counts = Counter(v.verdict for v in verdicts)
    assert counts["Correct"] + counts["InfrastructureFailure"] == 40
    for index in trouble:
        assert verdicts[index].verdict == "InfrastructureFailure"
    # A failure takes down at most the lines written ahead to that grader (the window), never more.
    assert counts["InfrastructureFailure"] <= len(trouble) * 3
    assert all(v.reward is None for v in verdicts if v.verdict == "InfrastructureFailure")
    assert all(v.evidence["message"] for v in verdicts if v.verdict == "InfrastructureFailure")


def test_when_every_grader_crash_loops_each_item_still_gets_a_failure_verdict(
    fake_service: MakeService, fake_env: EnvironmentRef
) -> None:
    service = fake_service("--fail-at-start", max_parallel=2, crash_loop_limit=2, window=1)
    verdicts = service.grade("job", fake_env, _items(*["right"] * 20))
    assert [v.task_id for v in verdicts] == [f"t{i}" for i in range(20)]
    assert {v.verdict for v in verdicts} == {"InfrastructureFailure"}
    untouched = [v for v in verdicts if v.evidence["message"].startswith("not graded: every grader failed")]
    assert len(untouched) == 20 - 2 * 2  # two graders, two failed starts each, one line each
    assert "cannot load the environment" in untouched[0].evidence["message"]


def test_close_stops_the_jobs_graders(fake_service: MakeService, fake_env: EnvironmentRef) -> None:
    service = fake_service(max_parallel=2)
    service.grade("job", fake_env, _items("sleep:0.1", "sleep:0.1"))
    assert service.graders("job") == 2
    service.close("job")
    assert service.graders("job") == 0
    verdicts = service.grade("job", fake_env, _items("right"))  # a closed job can start again
    assert verdicts[0].verdict == "Correct"


def test_idle_graders_are_stopped(fake_service: MakeService, fake_env: EnvironmentRef) -> None:
    service = fake_service(max_parallel=2, idle_timeout_s=0.2)
    service.grade("job", fake_env, _items("pid", "pid"))
    assert service.graders("job") >= 1
    deadline = time.monotonic() + 5
    while service.graders("job") and time.monotonic() < deadline:
        time.sleep(0.05)
    assert service.graders("job") == 0


def test_the_service_is_a_context_manager_that_closes_everything(fake_env: EnvironmentRef, tmp_path: Any) -> None:
    from nodus.reconciler.grading.settings import GradingSettings

    settings = GradingSettings(stage_dir=tmp_path)
    with GradingService(settings) as service:
        assert service.grade("job", fake_env, []) == []
    with pytest.raises(ConfigError):
        GradingService(settings).grade("job", fake_env, [{"completion": "no task id"}])


def test_requests_are_checked_before_anything_runs() -> None:
    assert GradeRequest.from_json({"taskId": "t", "turns": ["a"]}).turns == ("a",)
    bad_requests: list[dict[str, Any]] = [
        {"taskId": 3, "completion": "x"},
        {"taskId": "t"},
        {"taskId": "t", "turns": [1]},
    ]
    for bad in bad_requests:
        with pytest.raises(ConfigError):
            GradeRequest.from_json(bad)
    with pytest.raises(ConfigError):
        GradeRequest("t", completion="x", turns=("y",))
