"""One grader process against the fake grader: protocol, evidence, timeouts, crashes, restarts.

Every test checks the invariant that matters most: exactly one verdict per request, in order.
"""

from __future__ import annotations

import hashlib
import json
import os
import time
from collections.abc import Callable

import pytest

from nodus.reconciler.grading import grader as grader_module
from nodus.reconciler.grading.grader import START_WINDOW, Grader
from nodus.reconciler.grading.models import GradeRequest, Verdict

MakeGrader = Callable[..., Grader]


def _grade(grader: Grader, *completions: str) -> list[Verdict]:
    requests = [(i, GradeRequest(f"t{i}", completion)) for i, completion in enumerate(completions)]
    results = list(grader.grade(iter(requests)))
    assert [key for key, _ in results] == list(range(len(completions))), "one verdict per request, in order"
    assert [v.task_id for _, v in results] == [f"t{i}" for i in range(len(completions))]
    return [verdict for _, verdict in results]


def _names(verdicts: list[Verdict]) -> list[str]:
    return [v.verdict for v in verdicts]


def _pid(verdict: Verdict) -> int:
    sandbox = verdict.evidence["sandbox"]
    assert sandbox is not None
    return int(sandbox["pid"])


def test_verdicts_come_in_order_with_host_evidence(make_grader: MakeGrader) -> None:
    verdicts = _grade(make_grader(window=4), "right", "wrong", "", "right", "pid")
    assert _names(verdicts) == ["Correct", "Incorrect", "InvalidOutput", "Correct", "Correct"]
    assert [v.reward for v in verdicts] == [1.0, 0.0, 0.0, 1.0, 1.0]
    evidence = verdicts[0].evidence
    assert evidence["exitCode"] is None  # the grader still lives
    assert evidence["process"]["mode"] == "process" and "fake_grader.py" in evidence["process"]["argv"][1]
    sandbox = {"durationMs": 0.1, "pid": _pid(verdicts[0])}
    assert evidence["durationMs"] >= 0 and evidence["sandbox"] == sandbox
    sent = json.dumps({"taskId": "t0", "completion": "right"}, separators=(",", ":")).encode()
    assert evidence["inputSha256"] == hashlib.sha256(sent).hexdigest()
    answered = {"taskId": "t0", "verdict": "Correct", "reward": 1.0, "evidence": sandbox}
    assert evidence["outputSha256"] == hashlib.sha256(json.dumps(answered).encode()).hexdigest()


def test_one_process_grades_many_lines_and_many_calls(make_grader: MakeGrader) -> None:
    grader = make_grader(window=2)
    first = _grade(grader, "pid", "pid")
    second = _grade(grader, "pid")
    assert len({_pid(v) for v in first + second}) == 1
    assert grader.starts == 1


def test_a_grader_that_dies_mid_stream_fails_only_its_unanswered_lines_and_restarts(make_grader: MakeGrader) -> None:
    verdicts = _grade(make_grader(window=3), "pid", "exit:7", "right", "wrong", "pid", "right")
    assert _names(verdicts) == ["Correct", *["InfrastructureFailure"] * 3, "Correct", "Correct"]
    dead, behind = verdicts[1], verdicts[2]
    assert dead.reward is None and dead.evidence["exitCode"] == 7 and dead.evidence["sandbox"] is None
    assert "exited with status 7 before answering" in dead.evidence["message"]
    assert "restarted" in dead.evidence["message"]
    assert behind.evidence["message"].startswith("not graded: the grader was stopped before this line")
    assert behind.evidence["durationMs"] == 0.0
    assert _pid(verdicts[0]) != _pid(verdicts[4])
    assert verdicts[4].evidence["process"]["start"] == 2 and verdicts[4].evidence["exitCode"] is None


def test_window_one_blames_only_the_line_that_killed_the_grader(make_grader: MakeGrader) -> None:
    verdicts = _grade(make_grader(window=1), "right", "exit:3", "right", "right")
    assert _names(verdicts) == ["Correct", "InfrastructureFailure", "Correct", "Correct"]


def test_a_grader_that_cannot_start_gets_few_lines_whatever_the_window(make_grader: MakeGrader) -> None:
    grader = make_grader("--fail-at-start", window=64, crash_loop_limit=2)
    requests = iter([(i, GradeRequest(f"t{i}", "right")) for i in range(40)])
    results = list(grader.grade(requests))
    assert [key for key, _ in results] == list(range(2 * START_WINDOW)), "each start blames only its first lines"
    assert next(requests)[0] == 2 * START_WINDOW


def test_a_grader_that_answers_gets_more_lines_in_flight_up_to_the_window(
    make_grader: MakeGrader, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Ten lines follow the one that kills the grader: how many of them it had shows the window it had.
    # The pace bound is lifted: on a busy host a reply can take over IN_FLIGHT_S / 4, which keeps the
    # window at START_WINDOW by design (the next test covers that bound); this one is about the growth.
    monkeypatch.setattr(grader_module, "IN_FLIGHT_S", 60.0)
    completions = ["right"] * 40 + ["exit:1"] + ["right"] * 10
    grown = _names(_grade(make_grader(window=64), *completions))
    capped = _names(_grade(make_grader(window=8), *completions))
    for names in (grown, capped):
        assert names[:40] == ["Correct"] * 40 and names[40] == "InfrastructureFailure"
        failed = names.count("InfrastructureFailure")
        assert names[40 + failed :] == ["Correct"] * (11 - failed), "the lines after them went to a fresh grader"
    assert grown.count("InfrastructureFailure") > START_WINDOW  # it grew past the start window
    assert capped.count("InfrastructureFailure") == 8  # and never past `window`


def test_a_slow_grader_keeps_only_a_few_lines_in_flight(make_grader: MakeGrader) -> None:
    # Lines held by a slow grader would wait behind it while other graders run out of work.
    completions = ["sleep:0.05"] * 6 + ["exit:1"] + ["right"] * 10
    names = _names(_grade(make_grader(window=64), *completions))
    assert names == ["Incorrect"] * 6 + ["InfrastructureFailure"] * START_WINDOW + ["Correct"] * (11 - START_WINDOW)


def test_a_line_over_its_timeout_is_failed_and_the_grader_killed_and_restarted(make_grader: MakeGrader) -> None:
    grader = make_grader(task_timeout_s=0.3, window=2)
    started = time.monotonic()
    verdicts = _grade(grader, "pid", "sleep:30", "right", "pid")
    assert time.monotonic() - started < 5
    assert _names(verdicts) == ["Correct", "InfrastructureFailure", "InfrastructureFailure", "Correct"]
    assert "no reply to task t1 within 0.3s" in verdicts[1].evidence["message"]
    assert verdicts[1].evidence["exitCode"] == -9  # killed
    assert verdicts[1].evidence["durationMs"] >= 300
    assert "(no reply to task t1" in verdicts[2].evidence["message"]
    assert _pid(verdicts[0]) != _pid(verdicts[3])


def test_the_timeout_counts_from_when_the_grader_could_start_the_line(make_grader: MakeGrader) -> None:
    # Both lines are written at once; the second waits 0.5 s for the first, and still has its full 0.9 s.
    verdicts = _grade(make_grader(task_timeout_s=0.9, window=2), "sleep:0.5", "sleep:0.5")
    assert _names(verdicts) == ["Incorrect", "Incorrect"]
    assert all(v.evidence["durationMs"] < 900 for v in verdicts)


def test_the_first_line_after_a_start_gets_the_start_allowance(make_grader: MakeGrader) -> None:
    grader = make_grader("--start-delay", "0.5", task_timeout_s=0.2, start_timeout_s=2.0)
    assert _names(_grade(grader, "right", "right")) == ["Correct", "Correct"]
    slow_start = make_grader("--start-delay", "0.5", task_timeout_s=0.2, start_timeout_s=0.0)
    assert _names(_grade(slow_start, "right"))[0] == "InfrastructureFailure"


@pytest.mark.parametrize(
    ("completion", "reason"),
    [
        ("garbage", "not JSON"),
        ("wrong-id", "reply is for taskId 't-someone-else', expected 't1'"),
        ("huge:5000", "longer than 4096 bytes"),
    ],
)
def test_a_malformed_reply_fails_the_line_and_restarts_the_grader(
    make_grader: MakeGrader, completion: str, reason: str
) -> None:
    verdicts = _grade(make_grader(window=2, max_line_bytes=4096), "pid", completion, "right", "pid")
    assert _names(verdicts) == ["Correct", "InfrastructureFailure", "InfrastructureFailure", "Correct"]
    assert reason in verdicts[1].evidence["message"]
    assert verdicts[1].evidence["exitCode"] == -9
    assert _pid(verdicts[0]) != _pid(verdicts[3])


def test_the_sha256_of_a_malformed_reply_is_recorded(make_grader: MakeGrader) -> None:
    verdicts = _grade(make_grader(), "garbage")
    assert verdicts[0].evidence["outputSha256"] == hashlib.sha256(b"this is not json").hexdigest()


def test_a_crash_message_carries_the_graders_last_words_on_stderr(make_grader: MakeGrader) -> None:
    verdicts = _grade(make_grader(), "stderr-exit", "right")
    assert "something went badly wrong" in verdicts[0].evidence["message"]
    assert verdicts[0].evidence["exitCode"] == 1 and verdicts[1].verdict == "Correct"


def test_a_grader_that_cannot_start_stops_taking_lines_after_the_crash_loop_limit(make_grader: MakeGrader) -> None:
    grader = make_grader("--fail-at-start", crash_loop_limit=2)
    requests = iter([(i, GradeRequest(f"t{i}", "right")) for i in range(10)])
    results = list(grader.grade(requests))
    assert [key for key, _ in results] == [0, 1]
    assert grader.crash_looping and grader.starts == 2
    assert "cannot load the environment" in results[0][1].evidence["message"]
    assert next(requests)[0] == 2  # the rest is left for other graders (or failed by the service)


def test_a_grader_that_died_while_idle_is_restarted_without_blaming_a_line(make_grader: MakeGrader) -> None:
    grader = make_grader()
    first = _grade(grader, "pid")
    assert grader.process is not None
    grader.process.kill()
    second = _grade(grader, "pid")
    assert _names(second) == ["Correct"] and _pid(first[0]) != _pid(second[0])


def test_killing_a_grader_kills_its_whole_process_group(make_grader: MakeGrader) -> None:
    verdicts = _grade(make_grader(task_timeout_s=0.3), "child", "sleep:30")
    sandbox = verdicts[0].evidence["sandbox"]
    assert sandbox is not None
    child = int(sandbox["childPid"])
    assert verdicts[1].verdict == "InfrastructureFailure"
    deadline = time.monotonic() + 5
    while _alive(child) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert not _alive(child)


def test_multi_turn_lines_carry_next_and_done(make_grader: MakeGrader) -> None:
    requests = [(0, GradeRequest("t0", turns=("hi",))), (1, GradeRequest("t1", turns=("hi", "there")))]
    results = [v for _, v in make_grader().grade(requests)]
    assert (results[0].next, results[0].done) == ("turn 2?", False)
    assert (results[1].next, results[1].done, results[1].verdict) == (None, True, "Correct")
    assert results[1].to_json()["done"] is True and "done" not in Verdict("t", "Correct", 1.0).to_json()


def test_a_tool_result_says_its_role_and_a_user_turn_says_nothing(make_grader: MakeGrader) -> None:
    requests = [(0, GradeRequest("t0", turns=("call",))), (1, GradeRequest("t1", turns=("hi",)))]
    tool, user = (v for _, v in make_grader().grade(requests))
    assert (tool.next, tool.done, tool.next_role) == ("42", False, "tool")
    assert tool.to_json()["nextRole"] == "tool"
    assert user.next_role is None and "nextRole" not in user.to_json()


def test_a_next_role_outside_the_contract_fails_the_line(make_grader: MakeGrader) -> None:
    [verdict] = [v for _, v in make_grader().grade([(0, GradeRequest("t0", turns=("role:assistant",)))])]
    assert verdict.verdict == "InfrastructureFailure"
    assert "nextRole 'assistant' is not one of user, tool" in verdict.evidence["message"]


def test_a_consumer_that_stops_early_leaves_no_grader_with_lines_in_flight(make_grader: MakeGrader) -> None:
    grader = make_grader(window=3)
    stream = grader.grade(iter([(i, GradeRequest(f"t{i}", "right")) for i in range(5)]))
    assert next(stream)[0] == 0
    process = grader.process
    assert process is not None
    stream.close()
    assert grader.process is None and process.exit_code() is not None


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    # A zombie (killed, not yet reaped by its parent) counts as dead.
    with open(f"/proc/{pid}/stat") as stat:
        return stat.read().split(")")[-1].split()[0] != "Z"
