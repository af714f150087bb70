"""Benchmark: planning 1,000 resources against an observed state of 1,000 records.

Run: `.venv/bin/python bench/plan.py` (or `make bench`). The desired resources are every example under
examples/ and the specs' 'full' fixtures, renamed until there are 1,000 of them (each kind, mixed). The store
holds 1,000 records: 500 equal to the files, 150 with other labels (updated in place), 150 with a field this
nodus no longer knows (compared as stored, replaced), 200 that are not in the files (unmanaged); the
remaining 200 desired resources are missing from it (created). It times, median of several runs:

- baseline: `json.dumps(sort_keys=True)` of each desired and stored document and a string comparison, the
  floor of any planner that compares documents;
- desired_from: the models dumped into normalised documents and hashed;
- plan: matching, normalising changed records through their model, field diffs, ordering;
- render_table: the plan as the terminal shows it;

and prints resources per second and the ratio against the baseline. The goal: the three together under one
second (parsing YAML is bench/validate.py's).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from rich.console import Console
from rich.table import Table
from timing import median_seconds

from nodus.reconciler.planning import desired_from, plan, render_table
from nodus.reconciler.planning.desired import document_of
from nodus.reconciler.state.records import DEFAULT_PROJECT, ResourceKey, ResourceRecord, spec_hash
from nodus.specs.base import Resource
from nodus.specs.parse import Parsed, Source, parse_resources
from nodus.specs.registry import BY_KIND

REPO = Path(__file__).resolve().parents[1]
TOTAL, RUNS, GOAL_S = 1000, 7, 1.0
EQUAL, RELABELLED, RETIRED, UNMANAGED = 500, 150, 150, 200


def templates() -> list[Resource]:
    """One of each example resource (each leaf folder is read on its own: two define the same name)."""
    folders = sorted({path.parent for path in (REPO / "examples").rglob("*.yaml")})
    folders.append(REPO / "specs" / "tests" / "fixtures" / "full")
    found: list[Resource] = []
    for folder in folders:
        result = parse_resources([folder])
        assert result.ok, result.errors[:3]
        found += [item.resource for item in result.resources]
    return found


def renamed(resource: Resource, suffix: str) -> Resource:
    document = document_of(resource)
    spec = document.get("spec")
    if document["kind"] == "AgentRun" and isinstance(spec, dict) and spec.get("group"):
        # A run in a group is named after its task key.
        spec["taskKey"] = f"{spec['taskKey']}{suffix}"
        document["metadata"]["name"] = f"{spec['group']}-{spec['taskKey']}"
    else:
        document["metadata"]["name"] = f"{document['metadata']['name'][:50]}{suffix}"
    return BY_KIND[document["kind"]].model_validate(document)


def corpus() -> tuple[list[Parsed], list[ResourceRecord]]:
    """(1,000 parsed resources, 1,000 stored records) as the module docstring describes."""
    pool = templates()
    parsed = [
        Parsed(renamed(pool[i % len(pool)], f"-{i}"), Source(f"specs-{i // 10:03d}.yaml", 1 + 20 * (i % 10), 1, i % 10))
        for i in range(TOTAL)
    ]
    records: list[ResourceRecord] = []
    for i, item in enumerate(desired_from(parsed)[: EQUAL + RELABELLED + RETIRED]):
        document: dict[str, Any] = json.loads(json.dumps(item.document))
        if i >= EQUAL + RELABELLED:
            document["spec"]["retired"] = True
        elif i >= EQUAL:
            document["metadata"]["labels"] = {"team": "old"}
        records.append(ResourceRecord(item.key, document, spec_hash(document), generation=2))
    for i in range(UNMANAGED):
        document = {"apiVersion": "nodus.dev/v1", "kind": "Volume", "metadata": {"name": f"old-{i}"}, "spec": {}}
        records.append(
            ResourceRecord(ResourceKey("Volume", DEFAULT_PROJECT, f"old-{i}"), document, spec_hash(document))
        )
    return parsed, records


def main() -> int:
    console = Console()
    parsed, records = corpus()
    stored = {record.key: record.spec for record in records}
    desired = desired_from(parsed)
    planned = plan(desired, records)
    counts = planned.counts()
    assert counts == {"create": 200, "update": RELABELLED, "replace": RETIRED, "delete": 0, "noop": EQUAL}, counts

    def baseline() -> None:
        differing = 0
        for item in desired:
            before = stored.get(item.key)
            if before is None or json.dumps(before, sort_keys=True) != json.dumps(item.document, sort_keys=True):
                differing += 1
        assert differing == TOTAL - EQUAL

    def whole() -> None:
        render_table(plan(desired_from(parsed), records))

    text = render_table(planned)
    rows = [
        ("baseline: json.dumps and compare", median_seconds(baseline, RUNS)),
        ("desired_from", median_seconds(lambda: desired_from(parsed), RUNS)),
        ("plan", median_seconds(lambda: plan(desired, records), RUNS)),
        ("render_table", median_seconds(lambda: render_table(planned), RUNS)),
        ("desired_from + plan + render_table", median_seconds(whole, RUNS)),
    ]

    title = f"Planning {TOTAL} resources against {len(records)} records (median of {RUNS})"
    table = Table(title=title)
    for column in ("what", "seconds", "resources/s", "x baseline"):
        table.add_column(column, justify="right" if column != "what" else "left")
    base = rows[0][1]
    for name, seconds in rows:
        table.add_row(name, f"{seconds:.3f}", f"{TOTAL / seconds:,.0f}", f"{seconds / base:.1f}x")
    console.print(table)
    console.print(f"plan: {planned.summary} ({len(text.splitlines())} lines of table)")
    total = rows[-1][1]
    verdict = "meets" if total < GOAL_S else "misses"
    console.print(
        f"goal: the whole set under {GOAL_S:.0f} s: {verdict} it ({total:.3f} s, {total / GOAL_S:.2f}x the goal)"
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
