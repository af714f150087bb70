"""The platform's account of an Environment-backed run: pass rates before and after training, whether the two
can be compared, and whether the training rewards carried any signal.

Who calls it: the job supervisor (`supervisor.py`). It feeds every verdict record it appends to
`logs/gradings.jsonl` into a `GradingTally` (and, when it starts, the whole file back, so a restarted
supervisor goes on where the last one stopped) and writes `summary()` and `diagnostics()` into status.json
after every grading. The trainer never grades itself, so these numbers come from the platform's verdicts
only, never from what a trainer reports. Pure: records in, JSON out.

A record is a verdict as the grading service gave it plus the attempt API's `phase` (Baseline, Training or
Evaluation) and the supervisor's `request` (one number per gradings request). The rules, from the seeds:

- per phase, the last verdict of a task counts (a resumed run grades the final evaluation again);
- Correct passes; Incorrect and InvalidOutput fail; InfrastructureFailure is unscored, never a fail;
- a comparison needs both phases (`IncompleteEvents`), the same task set on both (`DifferentTasks`), at
  least `minComparisonTasks` tasks scored on both (`TooFewTasks`), and not all-fail (`NonePassed`) nor
  all-pass (`AllPassed`) on both sides; pass rates and the change are on the tasks scored on both sides;
- completions of one task in one Training request are a group (GRPO's group); a group whose rewards are all
  the same teaches a group-relative method nothing, and when every group is so, `rewardSignal` warns. A
  multi-turn trainer grades each turn of each episode in a request of its own, so it names the group itself:
  its items carry `group` (and `episode`, which episode of the group), and the last verdict of each episode
  is that episode's reward (an episode's earlier turns are replaced as it goes on);
- every InfrastructureFailure verdict is a failed grading, counted per phase against that phase's gradings
  (`gradingFailures`, only when there was one): the run still succeeds, so the count and the
  `GradingFailures` condition (`failures_message`) are how users learn that some replies were never scored.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any, Final

BASELINE: Final = "Baseline"
TRAINING: Final = "Training"
EVALUATION: Final = "Evaluation"
PHASES: Final = (BASELINE, TRAINING, EVALUATION)
"""What a gradings request is for; the attempt API takes these in `phase` (Training when left out)."""
DEFAULT_PHASE: Final = TRAINING

CORRECT: Final = "Correct"
UNSCORED: Final = frozenset({"InfrastructureFailure"})

INCOMPLETE_EVENTS: Final = "IncompleteEvents"
DIFFERENT_TASKS: Final = "DifferentTasks"
TOO_FEW_TASKS: Final = "TooFewTasks"
NONE_PASSED: Final = "NonePassed"
ALL_PASSED: Final = "AllPassed"
REASONS: Final = (TOO_FEW_TASKS, DIFFERENT_TASKS, NONE_PASSED, ALL_PASSED, INCOMPLETE_EVENTS)

DEFAULT_MIN_COMPARISON_TASKS: Final = 16
GRADING_FAILURES: Final = "gradingFailures"
PLATFORM_SUMMARY_KEYS: Final = frozenset(
    {"baselinePassRate", "finalPassRate", "baseline", "final", "comparison", GRADING_FAILURES}
)
"""status.summary keys the platform owns: a trainer's report never overwrites them."""

RATE_DIGITS: Final = 4
POINT_DIGITS: Final = 1


@dataclass
class _Group:
    """The rewards of one task's completions in one Training request, as far as flatness goes."""

    first: float
    count: int = 1
    flat: bool = True


@dataclass
class _EpisodeGroup:
    """The latest reward of each episode of a group the trainer named (`group`, `episode` on its items)."""

    rewards: dict[str, float]

    def state(self) -> tuple[bool, bool]:
        """(counted: two episodes or more, flat: one reward for all of them)."""
        return len(self.rewards) >= 2, len(set(self.rewards.values())) == 1


class GradingTally:
    """Verdict records folded as they come (`add`), cheap to summarise at any point.

    The held-out phases keep the last verdict per task (a few hundred tasks at most); Training keeps one small
    entry per (request, task) group and two counters, so the summary after each grading costs nothing like
    re-reading the log.
    """

    def __init__(self) -> None:
        self._last: dict[str, dict[str, str]] = {BASELINE: {}, EVALUATION: {}}
        self._groups: dict[tuple[int, str], _Group] = {}
        self._named_groups: dict[str, _EpisodeGroup] = {}
        self.records = 0
        self.training_records = 0
        self.groups = 0
        """Training groups with two rewards or more (one completion alone has nothing to be relative to)."""
        self.flat_groups = 0
        self.last_request = 0
        """The highest `request` number seen: a restarted supervisor numbers its requests after it."""
        self.gradings: dict[str, int] = dict.fromkeys(PHASES, 0)
        self.failures: dict[str, int] = dict.fromkeys(PHASES, 0)
        """Gradings and failed gradings (InfrastructureFailure) per phase, every record counted (a task graded
        again counts again: each was a grading that ran)."""

    def add(self, record: Mapping[str, Any]) -> None:
        """Fold in one verdict record; anything malformed about it is skipped, never raised."""
        task_id, verdict = record.get("taskId"), record.get("verdict")
        if not isinstance(task_id, str) or not isinstance(verdict, str):
            return
        self.records += 1
        request = record.get("request")
        if isinstance(request, int) and not isinstance(request, bool):
            self.last_request = max(self.last_request, request)
        phase = record.get("phase", DEFAULT_PHASE)
        if phase in self.gradings:
            self.gradings[phase] += 1
            self.failures[phase] += int(verdict in UNSCORED)
        if phase in self._last:
            self._last[phase][task_id] = verdict
        elif phase == TRAINING:
            self.training_records += 1
            group = record.get("group")
            if isinstance(group, str):
                episode = record.get("episode")
                self._add_episode_reward(group, str(episode if episode is not None else self.records), record)
            elif isinstance(request, int) and not isinstance(request, bool):
                self._add_reward((request, task_id), record.get("reward"))

    def _add_episode_reward(self, name: str, episode: str, record: Mapping[str, Any]) -> None:
        reward = record.get("reward")
        group = self._named_groups.setdefault(name, _EpisodeGroup({}))
        counted, flat = group.state()
        if isinstance(reward, bool) or not isinstance(reward, int | float):
            group.rewards.pop(episode, None)  # unscored now: the episode has no reward to compare
        else:
            group.rewards[episode] = float(reward)
        now_counted, now_flat = group.state()
        self.groups += int(now_counted) - int(counted)
        self.flat_groups += int(now_counted and now_flat) - int(counted and flat)

    def _add_reward(self, key: tuple[int, str], reward: object) -> None:
        if isinstance(reward, bool) or not isinstance(reward, int | float):
            return  # an unscored completion (InfrastructureFailure) has no reward to compare
        group = self._groups.get(key)
        if group is None:
            self._groups[key] = _Group(float(reward))
            return
        group.count += 1
        if group.count == 2:
            self.groups += 1
            if group.flat:
                self.flat_groups += 1
        if group.flat and float(reward) != group.first:
            group.flat = False
            if group.count >= 2:
                self.flat_groups -= 1

    def summary(self, min_tasks: int = DEFAULT_MIN_COMPARISON_TASKS, *, compared: bool = True) -> dict[str, Any]:
        """status.summary's platform part: pass rates, each side's counts and the comparison (`compared`: the
        job asked for one; an evaluate job's summary is its own pass rate, with no comparison)."""
        baseline, final = self._last[BASELINE], self._last[EVALUATION]
        comparison = compare(baseline, final, min_tasks) if compared else None
        out: dict[str, Any] = {}
        if comparison is not None and comparison["comparable"]:
            # Both rates on the same tasks: those scored on both sides.
            common = _scored(baseline).keys() & _scored(final).keys()
            out["baselinePassRate"] = _rate(_passed(baseline, common), len(common))
            out["finalPassRate"] = _rate(_passed(final, common), len(common))
        else:
            # No common basis: each side's own rate, so a run in progress still shows its baseline.
            for key, side in (("baselinePassRate", baseline), ("finalPassRate", final)):
                scored = _scored(side)
                if scored:
                    out[key] = _rate(_passed(side, scored.keys()), len(scored))
        if baseline:
            out["baseline"] = counts(baseline)
        if final:
            out["final"] = counts(final)
        if comparison is not None:
            out["comparison"] = comparison
        if any(self.failures.values()):
            out[GRADING_FAILURES] = self.grading_failures()
        return out

    def grading_failures(self) -> dict[str, Any]:
        """`{failed, gradings, phases: {phase: {failed, gradings}}}`: the phases that graded anything."""
        phases = {
            phase: {"failed": self.failures[phase], "gradings": self.gradings[phase]}
            for phase in PHASES
            if self.gradings[phase]
        }
        return {"failed": sum(self.failures.values()), "gradings": sum(self.gradings.values()), "phases": phases}

    def diagnostics(self) -> dict[str, Any]:
        """status.diagnostics: the reward signal of training (empty when nothing was graded in Training)."""
        if not self.training_records:
            return {}
        signal: dict[str, Any] = {"groups": self.groups, "flatGroups": self.flat_groups}
        if self.groups and self.flat_groups == self.groups:
            signal["warning"] = (
                f"every one of the {self.groups} training groups got the same reward for all its completions: "
                "a group-relative method (GRPO) learns nothing from that; check the grader, the prompts and "
                "the sampling temperature"
            )
        return {"rewardSignal": signal}


def summarize(
    records: Iterable[Mapping[str, Any]], min_tasks: int = DEFAULT_MIN_COMPARISON_TASKS
) -> tuple[dict[str, Any], dict[str, Any]]:
    """(summary, diagnostics) of a whole gradings log at once."""
    tally = GradingTally()
    for record in records:
        tally.add(record)
    return tally.summary(min_tasks), tally.diagnostics()


PHASE_WORDS: Final = {BASELINE: "baseline", TRAINING: "training", EVALUATION: "final evaluation"}


def failures_message(failures: Mapping[str, Any], job: str | None = None) -> str:
    """One sentence for a `gradingFailures` entry, the GradingFailures condition's message and the warning
    people see: `5 of 960 training gradings failed (InfrastructureFailure): excluded from rewards; see nodus
    logs tj/JOB` (`job`: the TrainingJob's name, when the caller knows it)."""
    phases = failures.get("phases")
    parts, excluded = [], []
    for phase in PHASES:
        entry = phases.get(phase) if isinstance(phases, Mapping) else None
        if not isinstance(entry, Mapping) or not entry.get("failed"):
            continue
        parts.append(f"{entry['failed']} of {entry.get('gradings', '?')} {PHASE_WORDS[phase]} gradings")
        excluded.append("rewards" if phase == TRAINING else "pass rates")
    if not parts:
        parts.append(f"{failures.get('failed', 0)} of {failures.get('gradings', '?')} gradings")
        excluded.append("rewards and pass rates")
    what = " and ".join(dict.fromkeys(excluded))
    logs = f"nodus logs tj/{job}" if job else "nodus logs"
    return f"{' and '.join(parts)} failed (InfrastructureFailure): excluded from {what}; see {logs}"


def counts(side: Mapping[str, str]) -> dict[str, int]:
    """{tasks, scored, passed, unscored} of one phase's last verdicts."""
    scored = _scored(side)
    return {
        "tasks": len(side),
        "scored": len(scored),
        "passed": _passed(side, scored.keys()),
        "unscored": len(side) - len(scored),
    }


def compare(baseline: Mapping[str, str], final: Mapping[str, str], min_tasks: int) -> dict[str, Any]:
    """The comparison of two phases' last verdicts (task id -> verdict), or why there is none."""
    missing = [phase for phase, side in ((BASELINE, baseline), (EVALUATION, final)) if not side]
    if missing:
        return _not_comparable(
            INCOMPLETE_EVENTS,
            f"no {' or '.join(missing)} gradings: a comparison needs the held-out tasks scored before and after "
            "training (evaluation.baseline and evaluation.final)",
        )
    if baseline.keys() != final.keys():
        shared = len(baseline.keys() & final.keys())
        return _not_comparable(
            DIFFERENT_TASKS,
            f"the Baseline graded {len(baseline)} tasks and the Evaluation {len(final)}, {shared} of them the "
            "same; a comparison needs the same tasks on both sides",
        )
    common = _scored(baseline).keys() & _scored(final).keys()
    tasks = len(common)
    if tasks < min_tasks:
        return _not_comparable(
            TOO_FEW_TASKS,
            f"{tasks} tasks scored on both sides; a comparison needs at least {min_tasks} "
            "(evaluation.minComparisonTasks)",
        )
    before, after = _passed(baseline, common), _passed(final, common)
    if before == 0 and after == 0:
        return _not_comparable(NONE_PASSED, f"no task passed before or after training ({tasks} tasks)")
    if before == tasks and after == tasks:
        return _not_comparable(ALL_PASSED, f"every task passed before and after training ({tasks} tasks)")
    # + 0.0 turns a rounded -0.0 into 0.0.
    change = round((after - before) * 100 / tasks, POINT_DIGITS) + 0.0
    return {"comparable": True, "changePoints": change, "tasks": tasks}


def _not_comparable(reason: str, message: str) -> dict[str, Any]:
    return {"comparable": False, "reason": reason, "message": message}


def _scored(side: Mapping[str, str]) -> dict[str, str]:
    return {task: verdict for task, verdict in side.items() if verdict not in UNSCORED}


def _passed(side: Mapping[str, str], tasks: Iterable[str]) -> int:
    return sum(1 for task in tasks if side.get(task) == CORRECT)


def _rate(passed: int, scored: int) -> float:
    return round(passed / scored, RATE_DIGITS) if scored else 0.0
