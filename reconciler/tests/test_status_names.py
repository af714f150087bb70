"""Phases, reasons and condition types come from one module (`nodus.specs.status_names`), spelled as the seeds.

Three checks:
- the values the seeds document are members, spelled as the seeds spell them, and no member is a near miss of
  a word the seeds use (`Canceled` for `Cancelled`, `Maxcostreached` for `MaxCostReached`);
- every phase or reason literal in the reconciler's source is a member (an AST walk, `_status_literals`);
- a ratchet: only the files of `RAW_LITERALS_ALLOWED` still write such a literal as a raw string instead of a
  member. A file off the list that writes one fails; so does a listed file that no longer does (take it off the
  list), so the list only shrinks.
"""

from __future__ import annotations

import ast
import re
from collections.abc import Iterator
from enum import StrEnum
from pathlib import Path

import pytest
import yaml

from nodus.specs.status_names import (
    ADMISSION_REASONS,
    ENDED_PHASES,
    LIVE_PHASES,
    WAITING_REASONS,
    ConditionType,
    GradingPhase,
    Phase,
    Reason,
    Stage,
)

REPO = Path(__file__).resolve().parents[2]
SOURCE = REPO / "reconciler" / "src"
SEEDS = REPO.parent / "shared" / "seeds"
ALL_NAMES: tuple[type[StrEnum], ...] = (Phase, Reason, ConditionType, Stage, GradingPhase)

DOCUMENTED: dict[type[StrEnum], set[str]] = {
    Phase: {"Running", "Suspended", "Succeeded", "Failed", "Cancelled", "Cancelling", "Ready", "Exported"},
    Reason: {
        "MaxCostReached",
        "TooFewTasks",
        "DifferentTasks",
        "NonePassed",
        "AllPassed",
        "IncompleteEvents",
        "InfrastructureFailure",
    },
    ConditionType: {"Ready", "Succeeded", "Exported"},
    Stage: {"CachingModel", "Baseline", "Training", "Evaluating", "Exporting"},
    GradingPhase: {"Baseline", "Training", "Evaluation"},
}
"""The values the seeds name, per enum (the seeds' words for the phases, reasons, conditions and stages)."""

RAW_LITERALS_ALLOWED: frozenset[str] = frozenset()
"""Files still allowed a raw phase or reason literal: none since issue 13's branches merged. A file added here must
say why, and the list only shrinks."""
USER_CODE = ("nodus/examples/",)
"""Sample code written as a user writes it (`run.tasks(phase="Evaluation")`): its literals are checked for
membership, not counted as raw."""

_STATUS_KEYS = frozenset({"phase", "reason"})
_NAMED = re.compile(r"(?i)(^|_)(phase|reason)s?$|^(ended|terminal)$")
"""Names whose value is a phase or reason (or a collection of them): `LIVE_PHASES`, `failure_reason`, `reason`."""


def _key_of(node: ast.AST) -> str | None:
    """ "phase" or "reason" for `x.get("phase")`, `x["reason"]`; None otherwise."""
    if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr == "get" and node.args:
        first = node.args[0]
        if isinstance(first, ast.Constant) and first.value in _STATUS_KEYS:
            return str(first.value)
    if isinstance(node, ast.Subscript) and isinstance(node.slice, ast.Constant) and node.slice.value in _STATUS_KEYS:
        return str(node.slice.value)
    return None


_WORD = re.compile(r"[A-Z][A-Za-z]*")
"""A status word is one CamelCase word; a `reason` in prose (a plan action's, an estimate's) is not one."""


def _strings(node: ast.AST | None) -> Iterator[ast.Constant]:
    """The CamelCase string constants of an expression that stand for values: `"A"`, `("A", "B")`,
    `frozenset({"A"})`, `x or "A"`."""
    if isinstance(node, ast.Constant) and isinstance(node.value, str):
        if _WORD.fullmatch(node.value):
            yield node
    elif isinstance(node, (ast.Tuple, ast.List, ast.Set)):
        for element in node.elts:
            yield from _strings(element)
    elif isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id in ("frozenset", "set"):
        for argument in node.args:
            yield from _strings(argument)
    elif isinstance(node, ast.BoolOp):
        for value in node.values:
            yield from _strings(value)
    elif isinstance(node, ast.Starred):
        yield from _strings(node.value)


def _status_literals(tree: ast.AST) -> Iterator[tuple[str, ast.Constant]]:
    """("phase" | "reason", the literal) for each string written where a status phase or reason goes."""
    for node in ast.walk(tree):
        if isinstance(node, ast.Dict):
            for key, value in zip(node.keys, node.values, strict=True):
                if isinstance(key, ast.Constant) and key.value in _STATUS_KEYS:
                    yield from ((str(key.value), found) for found in _strings(value))
        elif isinstance(node, ast.Compare):
            sides = [node.left, *node.comparators]
            key = next((k for k in map(_key_of, sides) if k), None)
            if key:
                yield from ((key, found) for side in sides for found in _strings(side))
        elif isinstance(node, ast.Call) and _key_of(node) and len(node.args) > 1:
            yield from ((str(_key_of(node)), found) for found in _strings(node.args[1]))
        elif isinstance(node, ast.keyword) and node.arg in _STATUS_KEYS:
            yield from ((node.arg, found) for found in _strings(node.value))
        elif isinstance(node, (ast.Assign, ast.AnnAssign)):
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            for target in targets:
                name = target.id if isinstance(target, ast.Name) else getattr(target, "attr", "")
                if _NAMED.search(name):
                    key = "reason" if "reason" in name.lower() else "phase"
                    yield from ((key, found) for found in _strings(node.value))


def _sources() -> list[tuple[str, ast.AST]]:
    return [(path.relative_to(SOURCE).as_posix(), ast.parse(path.read_text())) for path in sorted(SOURCE.rglob("*.py"))]


ALLOWED = {"phase": {*Phase, *GradingPhase}, "reason": set(Reason)}


def test_every_status_literal_in_the_reconciler_is_a_member() -> None:
    unknown = [
        f"{name}:{found.lineno}: {key} {found.value!r}"
        for name, tree in _sources()
        for key, found in _status_literals(tree)
        if found.value not in ALLOWED[key]
    ]
    assert not unknown, "not a member of nodus.specs.status_names:\n" + "\n".join(unknown)


def test_raw_literals_only_in_the_files_still_allowed() -> None:
    raw = {
        name: [found.lineno for _, found in _status_literals(tree)]
        for name, tree in _sources()
        if not name.startswith(USER_CODE)
    }
    offending = sorted(f"{name}:{lines}" for name, lines in raw.items() if lines and name not in RAW_LITERALS_ALLOWED)
    assert not offending, "write the status_names member, not the string:\n" + "\n".join(offending)
    cleaned = sorted(name for name in RAW_LITERALS_ALLOWED if not raw.get(name))
    assert not cleaned, f"no raw phase or reason literal left: take these off RAW_LITERALS_ALLOWED: {cleaned}"


def test_the_walk_finds_each_shape_of_literal() -> None:
    """The ratchet is only as good as the walk: each way a status literal is written is found."""
    code = """
status = {"phase": "Pending", "reason": x or "Replaced"}
ok = record.status.get("phase") in ("Running", "Ready")
same = "Failed" == status["phase"]
shown = status.get("reason", "Unknown")
heartbeat(phase="Suspended")
LIVE_PHASES = frozenset({"Running"})
failure_reason = "LaunchFailed"
fine = {"phase": Phase.READY, "reason": reason, "other": "Pending"}
prose = {"reason": "the stored one is being deleted", "phase": ""}
"""
    found = sorted((key, literal.value) for key, literal in _status_literals(ast.parse(code)))
    assert found == [
        ("phase", "Failed"),
        ("phase", "Pending"),
        ("phase", "Ready"),
        ("phase", "Running"),
        ("phase", "Running"),
        ("phase", "Suspended"),
        ("reason", "LaunchFailed"),
        ("reason", "Replaced"),
        ("reason", "Unknown"),
    ]


def test_members_are_their_strings() -> None:
    """Stored JSON and the seeds' strings stay the same: a member is equal to, and serialises as, its value."""
    assert Phase.RUNNING == "Running" and f"{Reason.SUPERVISOR_LOST}" == "SupervisorLost"
    assert {"Succeeded", "Failed", "Cancelled"} == ENDED_PHASES and "Pending" in LIVE_PHASES
    assert set(Reason) >= WAITING_REASONS and set(Reason) >= ADMISSION_REASONS
    for names in ALL_NAMES:
        values = [member.value for member in names]
        assert len(values) == len(set(values)), f"{names.__name__} repeats a value"
        assert all(re.fullmatch(r"[A-Z][A-Za-z]*", value) for value in values), f"{names.__name__}: CamelCase"


needs_seeds = pytest.mark.skipif(
    not SEEDS.is_dir(), reason="the seed documents (../shared/seeds) are not beside this checkout"
)


def _seed_text() -> str:
    return "\n".join(path.read_text() for path in sorted(SEEDS.glob("*.txt")))


@needs_seeds
@pytest.mark.parametrize("names", ALL_NAMES, ids=lambda names: names.__name__)
def test_documented_values_are_members_spelled_as_the_seeds(names: type[StrEnum]) -> None:
    text = _seed_text()
    missing = sorted(value for value in DOCUMENTED[names] if value not in set(names))
    assert not missing, f"the seeds name these and {names.__name__} lacks them: {missing}"
    unseen = sorted(value for value in DOCUMENTED[names] if not re.search(rf"\b{value}\b", text))
    assert not unseen, f"listed as documented but not in the seeds: {unseen}"


def _folded(word: str) -> str:
    """A word without case and doubled letters: `Cancelled` and `Canceled` fold alike."""
    return re.sub(r"(.)\1+", r"\1", word.lower())


@needs_seeds
def test_no_member_is_a_near_miss_of_a_seed_word() -> None:
    words = set(re.findall(r"\b[A-Z][A-Za-z]+\b", _seed_text()))
    by_fold: dict[str, set[str]] = {}
    for word in words:
        by_fold.setdefault(_folded(word), set()).add(word)
    misses = sorted(
        f"{names.__name__}.{member.name} = {member.value!r}; the seeds write {sorted(by_fold[_folded(member.value)])}"
        for names in ALL_NAMES
        for member in names
        if _folded(member.value) in by_fold and member.value not in by_fold[_folded(member.value)]
    )
    assert not misses, "\n".join(misses)


def test_yaml_writes_members_as_their_strings() -> None:
    """A dry run's Job and `nodus get -o yaml` dump documents that may carry members: plain strings, no tags."""
    text = yaml.safe_dump({"phase": Phase.RUNNING, "reasons": [Reason.MAX_COST_REACHED]})
    assert text == "phase: Running\nreasons:\n- MaxCostReached\n"
    assert yaml.safe_load(text) == {"phase": "Running", "reasons": ["MaxCostReached"]}
