"""The planner and a Job `nodus run` made: `--prune` never destroys it, the plan names it as kept, a saved plan
carries it, and one made after a pruning plan was saved does not make that plan stale."""

from __future__ import annotations

from datetime import UTC, datetime

from nodus.reconciler.planning.diff import Plan, plan, stale_reasons
from nodus.reconciler.planning.render import render_table
from nodus.reconciler.run_job import RunRequest, compile_job, marked, validated
from nodus.reconciler.state.records import ResourceKey, ResourceRecord, spec_hash

NOW = datetime(2026, 12, 1, tzinfo=UTC)


def _record(document: dict[str, object]) -> ResourceRecord:
    job = validated(document)
    return ResourceRecord(job.key, job.document, spec_hash(job.document))


def _run_made(name: str) -> ResourceRecord:
    return _record(marked(compile_job(RunRequest(command=("true",), name=name), [], now=NOW)))


def test_prune_keeps_a_run_and_destroys_what_the_files_dropped() -> None:
    adhoc = _run_made("adhoc")
    dropped = _record(compile_job(RunRequest(command=("true",), name="dropped"), [], now=NOW))
    made = plan([], [adhoc, dropped], prune=True)
    assert [(action.type, action.key.name) for action in made.actions] == [("delete", "dropped")]
    assert made.run_made == (adhoc.key,) and made.unmanaged == ()
    assert made.summary.endswith("1 made by nodus run kept (--prune leaves them; nodus delete removes them).")
    table = render_table(made, None)
    assert (
        "Made by nodus run, kept (in no file; --prune leaves them, nodus delete removes them):\n    Job/adhoc" in table
    )

    without = plan([], [adhoc, dropped])  # without --prune: the dropped one is unmanaged, the run still its own
    assert without.unmanaged == (dropped.key,) and without.run_made == (adhoc.key,) and not without.actions


def test_a_saved_plan_carries_the_runs_and_stays_valid_when_one_starts_after_it() -> None:
    made = plan([], [_run_made("adhoc")], prune=True)
    again = Plan.from_json(made.to_json())
    assert again.run_made == (ResourceKey("Job", "default", "adhoc"),)
    assert "runMade" not in plan([], [], prune=True).to_dict()  # a plan.json without runs reads as before
    later = [_run_made("adhoc"), _run_made("started-later")]
    assert stale_reasons(again, later) == []
