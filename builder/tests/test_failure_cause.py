"""A failed sandbox run in one line (`sandbox.failure_cause`): the environment's own error from the self-check
report, the loader's line or a Python traceback; podman's progress lines, printed on the same standard error
while it copies the image in, never make up the message."""

from __future__ import annotations

import json

from nodus.builder.sandbox import environment_lines, failure_cause

PODMAN_NOISE = """Getting image source signatures
Copying blob sha256:5d1b8ab0d4b1b1d3c8d36e94a6e4fcbcf6b0f8e9c1c2c4a1f0c6c0c1b2a3f4e5
Copying blob sha256:0f8e9c1c2c4a1f0c6c0c1b2a3f4e55d1b8ab0d4b1b1d3c8d36e94a6e4fcbcf6b
Copying config sha256:a3f4e55d1b8ab0d4b1b1d3c8d36e94a6e4fcbcf6b0f8e9c1c2c4a1f0c6c0c1b2
Writing manifest to image destination
Storing signatures
"""
RAISED = "ZeroDivisionError: division by zero in reward (reverse_words.py:12)"


def report(*checks: dict[str, object]) -> str:
    return json.dumps({"ok": False, "checks": list(checks), "info": {"name": "demo"}}, indent=2, sort_keys=True)


def test_a_raising_reward_is_named_by_the_graders_message_and_the_check() -> None:
    gold = {
        "split": "train",
        "check": "gold answers of 1 tasks are Correct",
        "ok": False,
        "detail": [{"taskId": "t1", "verdicts": ["InfrastructureFailure"], "messages": [RAISED]}],
    }
    passed = {"split": "train", "check": "empty reply is InvalidOutput or Incorrect", "ok": True, "detail": "Incorrect"}
    cause, where = failure_cause(report(passed, gold), PODMAN_NOISE)
    assert cause == RAISED
    assert where == "on the gold answer of train task t1 (expected Correct)"


def test_a_fixture_case_that_disagrees_says_what_it_expected_and_got() -> None:
    fixture = {
        "check": "fixture 1 (full-reward)",
        "ok": False,
        "taskId": "t3",
        "detail": {"expected": ["Incorrect", 0.0], "got": ["Correct", 1.0]},
    }
    empty = {
        "split": "test",
        "check": "empty reply is InvalidOutput or Incorrect",
        "ok": False,
        "taskId": "t9",
        "detail": "InfrastructureFailure",
        "message": RAISED,
    }
    assert failure_cause(report(fixture), PODMAN_NOISE) == (
        "graded Correct (reward 1.0)",
        "in fixture 1 (full-reward) (expected Incorrect, reward 0.0)",
    )
    assert failure_cause(report(empty, fixture), "") == (
        RAISED,
        "on an empty reply to test task t9 (expected InvalidOutput or Incorrect) (and 1 more failed checks)",
    )


def test_a_load_failure_is_the_loaders_line_and_a_traceback_its_last_line_with_the_place() -> None:
    loader = "nodus-env: cannot load the environment: SyntaxError: invalid syntax (env.py, line 3)"
    assert failure_cause("", PODMAN_NOISE + loader + "\n") == (
        "cannot load the environment: SyntaxError: invalid syntax (env.py, line 3)",
        "",
    )
    traceback = (
        "Traceback (most recent call last):\n"
        '  File "/usr/local/bin/nodus-env", line 4, in <module>\n'
        "    sys.exit(main())\n"
        '  File "/opt/environment/src/reverse_words.py", line 12, in tasks\n'
        "    return 1 / 0\n"
        "           ~~^~~\n"
        "ZeroDivisionError: division by zero\n"
    )
    cause, where = failure_cause("", PODMAN_NOISE + traceback + "Storing signatures\n")
    assert (cause, where) == ("ZeroDivisionError: division by zero (reverse_words.py:12)", "")


def test_podman_progress_never_makes_up_the_message() -> None:
    assert environment_lines(PODMAN_NOISE) == []
    cause, _ = failure_cause("", PODMAN_NOISE + "something else went wrong\n")
    assert cause == "something else went wrong"
    assert failure_cause("", PODMAN_NOISE) == ("it printed nothing", "")
