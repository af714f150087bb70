"""The planner's golden files: read a scenario, produce its expected outputs, rewrite them on request.

Who calls it: `reconciler/tests/planning/test_plan_golden.py` (compares), and a developer after an intended
change to plans or their rendering:

    .venv/bin/python -m nodus.reconciler.planning.golden            # say which files differ
    .venv/bin/python -m nodus.reconciler.planning.golden --update   # rewrite them, then review the git diff

A scenario is a folder under `reconciler/tests/planning/golden/`:

- `desired/*.yaml`: the resource files (sources are named relative to the scenario, so output is stable);
- `observed.json`: `{"serial": N, "records": [{"kind", "project", "name", "generation", "spec"}, ...]}`,
  the state store as `nodus apply` leaves it (spec_hash is computed, as the store does; a record's optional
  `status` is the observed status, such as a finished job's phase and launchGeneration);
- `options.json` (optional): `{"prune": true}`, `{"refreshOnly": true}`; for a priced scenario also `"now"`
  (ISO 8601, the estimates' start time) and `"cachedModels"` (model URIs taken as imported already); for a plan
  that writes a kind nothing runs yet, `"storedOnly"`: kind -> note, what the renderers are handed (planning
  is pure: the controllers know which kinds run; `test_plan_golden.py` checks it against them);
- `prices.yaml` (optional): the scenario's price table; with it the plan is priced (`nodus.reconciler.pricing`)
  and the renderings carry its costs, as `nodus plan` prints them;
- `moved.json` (optional): the store some time after planning; `stale.txt` holds `stale_reasons` against it;
- `plan.txt`, `plan.json`, `plan.md`: the expected renderings.
"""

from __future__ import annotations

import argparse
import json
import sys
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from nodus.errors import NodusError
from nodus.reconciler.planning.desired import Desired, desired_from
from nodus.reconciler.planning.diff import Plan, plan, stale_reasons
from nodus.reconciler.planning.render import render_json, render_markdown, render_table
from nodus.reconciler.pricing.costs import PlanCosts
from nodus.reconciler.pricing.facts import Context
from nodus.reconciler.pricing.plan_prices import price_plan
from nodus.reconciler.pricing.prices import check_layer, table_from_layers
from nodus.reconciler.state.records import DEFAULT_PROJECT, ResourceKey, ResourceRecord, spec_hash
from nodus.specs.parse import ParseResult, parse_text

GOLDEN = Path(__file__).resolve().parents[4] / "tests" / "planning" / "golden"
"""Where the scenarios live in a source checkout (this module is only useful there)."""
NOW = "2026-11-29T12:00:00Z"
"""A priced scenario's clock when its options.json names none (estimates carry a start time)."""


@dataclass(frozen=True)
class ObservedState:
    records: list[ResourceRecord]
    serial: int


@dataclass(frozen=True)
class Scenario:
    folder: Path

    @property
    def name(self) -> str:
        return self.folder.name

    def options(self) -> dict[str, Any]:
        path = self.folder / "options.json"
        return dict(json.loads(path.read_text())) if path.exists() else {}

    def desired(self) -> list[Desired]:
        result = ParseResult()
        for path in sorted((self.folder / "desired").glob("*.yaml")):
            result.extend(parse_text(path.read_text(), str(path.relative_to(self.folder))))
        result.raise_for_errors()
        return desired_from(result.resources)

    def observed(self) -> ObservedState:
        return read_observed(self.folder / "observed.json")

    def moved(self) -> ObservedState | None:
        path = self.folder / "moved.json"
        return read_observed(path) if path.exists() else None

    def plan(self) -> Plan:
        options, observed = self.options(), self.observed()
        return plan(
            self.desired(),
            observed.records,
            prune=bool(options.get("prune", False)),
            refresh_only=bool(options.get("refreshOnly", False)),
            observed_serial=observed.serial,
        )

    def stored_only(self) -> dict[str, str]:
        """The scenario's `storedOnly` notes, kind -> note (what `nodus plan` gets from the controllers)."""
        return {str(kind): str(note) for kind, note in dict(self.options().get("storedOnly") or {}).items()}

    def costs(self, planned: Plan) -> PlanCosts | None:
        """The plan priced with the scenario's prices.yaml, as `nodus plan` prices it; None when it has none."""
        path = self.folder / "prices.yaml"
        if not path.exists():
            return None
        import yaml

        options = self.options()
        # Named relative to the scenario, so the renderings do not depend on where the checkout is.
        table = table_from_layers([("prices.yaml", check_layer(yaml.safe_load(path.read_text()), "prices.yaml"))])
        now = datetime.fromisoformat(str(options.get("now", NOW)).replace("Z", "+00:00")).astimezone(UTC)
        context = Context(
            now=now,
            prices=table,
            records=tuple(self.observed().records),
            cached_models=frozenset(str(uri) for uri in options.get("cachedModels", [])),
        )
        return price_plan(planned, context)

    def outputs(self) -> dict[str, str]:
        """Expected file name -> content, as the planner produces them today."""
        planned = self.plan()
        costs = self.costs(planned)
        stored_only = self.stored_only()
        out = {
            "plan.txt": render_table(planned, costs, stored_only=stored_only),
            "plan.json": render_json(planned, costs),
            "plan.md": render_markdown(planned, costs=costs, stored_only=stored_only),
        }
        moved = self.moved()
        if moved is not None:
            out["stale.txt"] = "".join(line + "\n" for line in stale_reasons(planned, moved.records))
        return out


def read_observed(path: Path) -> ObservedState:
    data = json.loads(path.read_text())
    return ObservedState([record_from(item) for item in data["records"]], int(data.get("serial", 0)))


def record_from(item: dict[str, Any]) -> ResourceRecord:
    """A record as the store would return it for this JSON entry."""
    key = ResourceKey(item["kind"], item.get("project", DEFAULT_PROJECT), item["name"])
    spec = item["spec"]
    return ResourceRecord(
        key,
        spec,
        spec_hash(spec),
        generation=int(item.get("generation", 1)),
        deleting=bool(item.get("deleting", False)),
        status=dict(item.get("status") or {}),
    )


def record_entry(desired: Desired, generation: int = 1) -> dict[str, Any]:
    """The observed.json entry of what `nodus apply` stores for a desired resource."""
    key = desired.key
    return {
        "kind": key.kind,
        "project": key.project,
        "name": key.name,
        "generation": generation,
        "spec": desired.document,
    }


def scenarios(root: Path = GOLDEN) -> list[Scenario]:
    return [Scenario(folder) for folder in sorted(root.iterdir()) if (folder / "observed.json").exists()]


def differences(scenario: Scenario) -> list[str]:
    """File names whose content is not what the planner produces now."""
    return [
        name
        for name, text in scenario.outputs().items()
        if not (scenario.folder / name).exists() or (scenario.folder / name).read_text() != text
    ]


def update(scenario: Scenario) -> list[str]:
    """Rewrite the expected files that differ; returns their names."""
    changed = differences(scenario)
    outputs = scenario.outputs()
    for name in changed:
        (scenario.folder / name).write_text(outputs[name])
    return changed


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m nodus.reconciler.planning.golden",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("--update", action="store_true", help="rewrite the expected files that differ")
    parser.add_argument("--root", type=Path, default=GOLDEN, help="the folder of scenarios")
    args = parser.parse_args(argv)
    if not args.root.is_dir():
        print(f"{args.root}: no such folder of scenarios", file=sys.stderr)
        return 1
    stale = 0
    for scenario in scenarios(args.root):
        try:
            names = update(scenario) if args.update else differences(scenario)
        except (NodusError, OSError, ValueError, KeyError) as exc:
            print(f"{scenario.folder}: {exc}", file=sys.stderr)
            return 1
        for name in names:
            print(f"{'updated' if args.update else 'differs'}: {scenario.folder / name}")
        stale += len(names)
    if stale and not args.update:
        print("run with --update to rewrite them, then review the diff", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
