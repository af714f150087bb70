"""The platform's summary of a run from its gradings: pass rates, every reason a comparison is refused, the last
verdict of a task winning, unscored verdicts, and the training reward signal (examples and properties)."""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from nodus.reconciler.session.summary import (
    GradingTally,
    compare,
    counts,
    failures_message,
    summarize,
)

VERDICTS = ("Correct", "Incorrect", "InvalidOutput", "InfrastructureFailure")
REWARDS = {"Correct": 1.0, "Incorrect": 0.0, "InvalidOutput": 0.0, "InfrastructureFailure": None}


def record(task: str, verdict: str, phase: str | None = None, request: int = 1, reward: Any = "auto") -> dict[str, Any]:
    out: dict[str, Any] = {
        "taskId": task,
        "verdict": verdict,
        "reward": REWARDS[verdict] if reward == "auto" else reward,
        "evidence": {},
        "request": request,
    }
    if phase is not None:
        out["phase"] = phase
    return out


def side(phase: str, passed: int, total: int, request: int = 1) -> list[dict[str, Any]]:
    """`total` held-out tasks t0..., the first `passed` of them Correct."""
    return [record(f"t{i}", "Correct" if i < passed else "Incorrect", phase, request) for i in range(total)]


def test_the_seeds_example_is_comparable_with_rates_on_four_digits_and_points_on_one() -> None:
    summary, _ = summarize([*side("Baseline", 26, 64), *side("Evaluation", 45, 64, request=9)])
    assert summary == {
        "baselinePassRate": 0.4062,
        "finalPassRate": 0.7031,
        "baseline": {"tasks": 64, "scored": 64, "passed": 26, "unscored": 0},
        "final": {"tasks": 64, "scored": 64, "passed": 45, "unscored": 0},
        "comparison": {"comparable": True, "changePoints": 29.7, "tasks": 64},
    }


def test_a_drop_is_negative_and_no_change_is_zero() -> None:
    summary, _ = summarize([*side("Baseline", 10, 20), *side("Evaluation", 7, 20)])
    assert summary["comparison"]["changePoints"] == -15.0
    summary, _ = summarize([*side("Baseline", 10, 20), *side("Evaluation", 10, 20)])
    assert summary["comparison"] == {"comparable": True, "changePoints": 0.0, "tasks": 20}
    assert str(summary["comparison"]["changePoints"]) == "0.0"  # never -0.0


@pytest.mark.parametrize(
    ("records", "reason", "words"),
    [
        (side("Baseline", 5, 20), "IncompleteEvents", "no Evaluation gradings"),
        (side("Evaluation", 5, 20), "IncompleteEvents", "no Baseline gradings"),
        (side("Training", 5, 20), "IncompleteEvents", "no Baseline or Evaluation gradings"),
        ([*side("Baseline", 5, 20), *side("Evaluation", 5, 19)], "DifferentTasks", "19 of them the same"),
        ([*side("Baseline", 5, 15), *side("Evaluation", 9, 15)], "TooFewTasks", "15 tasks scored on both sides"),
        ([*side("Baseline", 0, 20), *side("Evaluation", 0, 20)], "NonePassed", "no task passed"),
        ([*side("Baseline", 20, 20), *side("Evaluation", 20, 20)], "AllPassed", "every task passed"),
    ],
)
def test_every_reason_a_comparison_is_refused(records: list[dict[str, Any]], reason: str, words: str) -> None:
    summary, _ = summarize(records)
    comparison = summary["comparison"]
    assert comparison["comparable"] is False and comparison["reason"] == reason
    assert words in comparison["message"]
    assert "changePoints" not in comparison


def test_not_comparable_still_shows_each_sides_own_rate() -> None:
    summary, _ = summarize(side("Baseline", 5, 20))
    assert summary["baselinePassRate"] == 0.25 and "finalPassRate" not in summary
    assert summary["baseline"] == {"tasks": 20, "scored": 20, "passed": 5, "unscored": 0} and "final" not in summary


def test_all_pass_on_one_side_only_is_comparable() -> None:
    summary, _ = summarize([*side("Baseline", 0, 16), *side("Evaluation", 16, 16)])
    assert summary["comparison"] == {"comparable": True, "changePoints": 100.0, "tasks": 16}


def test_min_comparison_tasks_is_the_jobs() -> None:
    records = [*side("Baseline", 2, 8), *side("Evaluation", 4, 8)]
    assert summarize(records)[0]["comparison"]["reason"] == "TooFewTasks"
    assert summarize(records, min_tasks=8)[0]["comparison"] == {"comparable": True, "changePoints": 25.0, "tasks": 8}


def test_an_infrastructure_failure_is_unscored_never_a_fail() -> None:
    baseline = side("Baseline", 8, 20)
    final = side("Evaluation", 12, 20)
    final[0] = record("t0", "InfrastructureFailure", "Evaluation")  # t0 passed before; not a fail now
    final[19] = record("t19", "InfrastructureFailure", "Evaluation")
    summary, _ = summarize([*baseline, *final], min_tasks=16)
    assert summary["final"] == {"tasks": 20, "scored": 18, "passed": 11, "unscored": 2}
    # Rates and change on the 18 tasks scored on both sides: baseline 7 of them passed, final 11.
    assert summary["comparison"] == {"comparable": True, "changePoints": 22.2, "tasks": 18}
    assert summary["baselinePassRate"] == round(7 / 18, 4) and summary["finalPassRate"] == round(11 / 18, 4)
    # Too many unscored leaves too few tasks to compare, not a worse pass rate.
    final = [record(f"t{i}", "InfrastructureFailure", "Evaluation") for i in range(20)]
    summary, _ = summarize([*baseline, *final])
    assert summary["comparison"]["reason"] == "TooFewTasks" and "finalPassRate" not in summary


def test_invalid_output_and_incorrect_are_fails() -> None:
    assert counts({"a": "InvalidOutput", "b": "Incorrect", "c": "Correct"}) == {
        "tasks": 3,
        "scored": 3,
        "passed": 1,
        "unscored": 0,
    }


def test_the_last_verdict_of_a_task_in_a_phase_counts() -> None:
    # A resumed run grades the final evaluation again: the second grading of each task wins.
    first = side("Evaluation", 0, 16, request=5)
    again = side("Evaluation", 16, 16, request=7)
    summary, _ = summarize([*side("Baseline", 4, 16), *first, *again])
    assert summary["final"] == {"tasks": 16, "scored": 16, "passed": 16, "unscored": 0}
    assert summary["comparison"]["changePoints"] == 75.0
    # ...also when the last one is unscored: the earlier Correct no longer counts.
    tally = GradingTally()
    for item in [record("a", "Correct", "Baseline"), record("a", "InfrastructureFailure", "Baseline")]:
        tally.add(item)
    assert tally.summary()["baseline"] == {"tasks": 1, "scored": 0, "passed": 0, "unscored": 1}


def test_training_gradings_and_records_without_phase_never_count_as_held_out() -> None:
    records = [*side("Baseline", 4, 16), *side("Evaluation", 8, 16), record("t0", "Incorrect")]
    records.append({**record("t1", "Incorrect"), "phase": "Training"})
    summary, _ = summarize(records)
    assert summary["final"]["passed"] == 8 and summary["comparison"]["changePoints"] == 25.0


def test_malformed_records_are_skipped() -> None:
    tally = GradingTally()
    for item in [{}, {"taskId": 3, "verdict": "Correct"}, {"taskId": "a"}, record("a", "Correct", "Bogus")]:
        tally.add(item)
    assert tally.records == 1 and tally.summary()["comparison"]["reason"] == "IncompleteEvents"


# --- reward signal -------------------------------------------------------------------------------------------


def group(task: str, rewards: list[float | None], request: int) -> list[dict[str, Any]]:
    return [
        record(task, "InfrastructureFailure" if r is None else ("Correct" if r else "Incorrect"), None, request, r)
        for r in rewards
    ]


def test_reward_signal_warns_only_when_every_group_was_flat() -> None:
    flat = [*group("a", [0.0, 0.0, 0.0, 0.0], 1), *group("b", [1.0, 1.0], 1), *group("a", [0.0, 0.0], 2)]
    _, diagnostics = summarize(flat)
    signal = diagnostics["rewardSignal"]
    assert signal["groups"] == 3 and signal["flatGroups"] == 3
    assert "learns nothing" in signal["warning"]

    _, diagnostics = summarize([*flat, *group("c", [0.0, 1.0, 1.0], 3)])
    assert diagnostics == {"rewardSignal": {"groups": 4, "flatGroups": 3}}


def test_a_group_is_one_task_in_one_request_and_unscored_completions_are_left_out() -> None:
    # The same task in two requests is two groups of one: nothing to be relative to, so no group at all.
    _, diagnostics = summarize([*group("a", [0.0], 1), *group("a", [1.0], 2)])
    assert diagnostics == {"rewardSignal": {"groups": 0, "flatGroups": 0}}
    _, diagnostics = summarize(group("a", [1.0, None, 0.5], 1))
    assert diagnostics == {"rewardSignal": {"groups": 1, "flatGroups": 0}}
    _, diagnostics = summarize(group("a", [1.0, None, 1.0], 1))
    assert diagnostics["rewardSignal"]["flatGroups"] == 1 and "warning" in diagnostics["rewardSignal"]


def turn(group: str, episode: int, reward: float | None, request: int) -> dict[str, Any]:
    """One turn's verdict record of a multi-turn episode, tagged with its group and episode by the trainer."""
    verdict = "InfrastructureFailure" if reward is None else ("Correct" if reward else "Incorrect")
    return {**record("a", verdict, None, request, reward), "group": group, "episode": episode}


def test_a_multi_turn_group_is_the_trainer_s_and_each_episode_counts_its_last_turn() -> None:
    # Two episodes of one group, each graded turn by turn in requests of their own: 0.0 after the first
    # turn (a tool call), then 1.0 at the end for both. Flat at 1.0, though the turns' rewards differ.
    both_won = [turn("s0/a", 0, 0.0, 1), turn("s0/a", 0, 1.0, 2), turn("s0/a", 1, 0.0, 3), turn("s0/a", 1, 1.0, 4)]
    _, diagnostics = summarize(both_won)
    assert diagnostics["rewardSignal"]["groups"] == 1 and diagnostics["rewardSignal"]["flatGroups"] == 1
    assert "learns nothing" in diagnostics["rewardSignal"]["warning"]
    # A third episode that ends at 0.0 gives the group a signal.
    _, diagnostics = summarize([*both_won, turn("s0/a", 2, 0.0, 5)])
    assert diagnostics == {"rewardSignal": {"groups": 1, "flatGroups": 0}}
    # An episode whose last turn went unscored has no reward: it leaves the group.
    _, diagnostics = summarize([*both_won, turn("s0/a", 2, 0.0, 5), turn("s0/a", 2, None, 6)])
    assert diagnostics["rewardSignal"] == {**diagnostics["rewardSignal"], "groups": 1, "flatGroups": 1}


@settings(max_examples=100, deadline=None)
@given(
    turns=st.lists(
        st.tuples(st.sampled_from(["g1", "g2"]), st.integers(0, 3), st.sampled_from([0.0, 0.5, 1.0, None])),
        max_size=40,
    )
)
def test_the_incremental_signal_of_named_groups_equals_counting_afresh(
    turns: list[tuple[str, int, float | None]],
) -> None:
    tally = GradingTally()
    last: dict[str, dict[int, float]] = {}
    for number, (name, episode, reward) in enumerate(turns, start=1):
        tally.add(turn(name, episode, reward, number))
        if reward is None:
            last.setdefault(name, {}).pop(episode, None)
        else:
            last.setdefault(name, {})[episode] = reward
    real = [rewards for rewards in last.values() if len(rewards) >= 2]
    flat = [rewards for rewards in real if len(set(rewards.values())) == 1]
    if turns:
        signal = tally.diagnostics()["rewardSignal"]
        assert (signal["groups"], signal["flatGroups"]) == (len(real), len(flat))


def test_no_training_gradings_no_diagnostics() -> None:
    assert summarize(side("Baseline", 1, 2))[1] == {}


def test_the_last_request_number_is_kept_for_a_restarted_supervisor() -> None:
    tally = GradingTally()
    for item in [record("a", "Correct", request=4), record("a", "Correct", request=2)]:
        tally.add(item)
    assert tally.last_request == 4


# --- properties ----------------------------------------------------------------------------------------------

verdicts = st.sampled_from(VERDICTS)
sides = st.dictionaries(st.sampled_from([f"t{i}" for i in range(40)]), verdicts, max_size=40)


@settings(max_examples=200, deadline=None)
@given(baseline=sides, final=sides, min_tasks=st.integers(1, 30))
def test_a_comparison_is_comparable_exactly_when_no_rule_refuses_it(
    baseline: dict[str, str], final: dict[str, str], min_tasks: int
) -> None:
    comparison = compare(baseline, final, min_tasks)
    common = {t for t in baseline.keys() & final.keys() if "Infra" not in baseline[t] and "Infra" not in final[t]}
    before = sum(baseline[t] == "Correct" for t in common)
    after = sum(final[t] == "Correct" for t in common)
    comparable = (
        bool(baseline)
        and bool(final)
        and baseline.keys() == final.keys()
        and len(common) >= min_tasks
        and not (before == after == 0)
        and not (before == after == len(common))
    )
    assert comparison["comparable"] is comparable
    if comparable:
        assert comparison["tasks"] == len(common)
        assert comparison["changePoints"] == round((after - before) * 100 / len(common), 1)
        assert -100.0 <= comparison["changePoints"] <= 100.0
    else:
        assert set(comparison) == {"comparable", "reason", "message"}


@settings(max_examples=100, deadline=None)
@given(
    gradings=st.lists(
        st.tuples(st.sampled_from(["Baseline", "Evaluation"]), st.sampled_from(["a", "b", "c"]), verdicts),
        max_size=30,
    )
)
def test_the_tally_equals_the_last_verdicts_whatever_came_before(gradings: list[tuple[str, str, str]]) -> None:
    last: dict[str, dict[str, str]] = {"Baseline": {}, "Evaluation": {}}
    tally = GradingTally()
    for phase, task, verdict in gradings:
        tally.add(record(task, verdict, phase))
        last[phase][task] = verdict
    summary = tally.summary(min_tasks=1)
    for key, phase in (("baseline", "Baseline"), ("final", "Evaluation")):
        if last[phase]:
            assert summary[key] == counts(last[phase])
            assert summary[key]["scored"] + summary[key]["unscored"] == summary[key]["tasks"]
        else:
            assert key not in summary
    assert summary["comparison"] == compare(last["Baseline"], last["Evaluation"], 1)


@settings(max_examples=100, deadline=None)
@given(
    groups=st.lists(
        st.tuples(st.integers(1, 4), st.sampled_from(["a", "b"]), st.sampled_from([0.0, 0.5, 1.0, None])),
        max_size=40,
    )
)
def test_the_incremental_reward_signal_equals_counting_afresh(groups: list[tuple[int, str, float | None]]) -> None:
    tally = GradingTally()
    seen: dict[tuple[int, str], list[float]] = {}
    for request, task, reward in groups:
        tally.add(record(task, "InfrastructureFailure" if reward is None else "Correct", None, request, reward))
        if reward is not None:
            seen.setdefault((request, task), []).append(reward)
    real = [rewards for rewards in seen.values() if len(rewards) >= 2]
    flat = [rewards for rewards in real if len(set(rewards)) == 1]
    if groups:
        signal = tally.diagnostics()["rewardSignal"]
        assert (signal["groups"], signal["flatGroups"]) == (len(real), len(flat))
        assert ("warning" in signal) is (bool(real) and len(flat) == len(real))
    else:
        assert tally.diagnostics() == {}


def test_infrastructure_failures_are_counted_per_phase_against_that_phases_gradings() -> None:
    training = [record(f"t{i % 8}", "Correct", "Training", request=2 + i // 8) for i in range(955)]
    training += [record(f"t{i}", "InfrastructureFailure", "Training", request=200) for i in range(5)]
    baseline = side("Baseline", 3, 20)
    final = [*side("Evaluation", 5, 19, request=300), record("t19", "InfrastructureFailure", "Evaluation", 300)]
    summary, _ = summarize([*baseline, *training, *final])
    assert summary["gradingFailures"] == {
        "failed": 6,
        "gradings": 20 + 960 + 20,
        "phases": {
            "Baseline": {"failed": 0, "gradings": 20},
            "Training": {"failed": 5, "gradings": 960},
            "Evaluation": {"failed": 1, "gradings": 20},
        },
    }
    assert failures_message(summary["gradingFailures"], "run") == (
        "5 of 960 training gradings and 1 of 20 final evaluation gradings failed (InfrastructureFailure): "
        "excluded from rewards and pass rates; see nodus logs tj/run"
    )


def test_a_run_without_failed_gradings_has_no_grading_failures_entry() -> None:
    summary, _ = summarize([*side("Baseline", 3, 20), record("t0", "Incorrect", "Training")])
    assert "gradingFailures" not in summary


def test_a_task_graded_again_counts_again_and_a_restarted_tally_sees_the_same() -> None:
    records = [record("t0", "InfrastructureFailure", "Baseline"), record("t0", "Correct", "Baseline", request=2)]
    tally = GradingTally()
    for item in records:
        tally.add(item)
    # The last verdict decides the pass rate; the failed grading still happened and is counted.
    assert tally.summary()["baseline"] == {"tasks": 1, "scored": 1, "passed": 1, "unscored": 0}
    assert tally.summary()["gradingFailures"]["phases"] == {"Baseline": {"failed": 1, "gradings": 2}}
    assert failures_message(tally.summary()["gradingFailures"]) == (
        "1 of 2 baseline gradings failed (InfrastructureFailure): excluded from pass rates; see nodus logs"
    )
