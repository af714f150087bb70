"""Refreshing observed state: each kind's controller copies what its running work reports into the records.

Who calls it: where the reconcile loop runs, under the apply lease: `nodus refresh` (`nodus.cli.refresh`),
`nodus wait`, `nodus apply --wait` and `nodus controller` (`nodus.reconciler.gitops.sync`). Never `nodus get`,
`describe` or `plan`: those are pure reads.

A service's supervisor runs `python -m nodus.reconciler.refresh --path ROOT --state-dir DIR [--state URL] KIND
[--project P NAME...]`
each time its service becomes ready or stops being ready (`executors.service.Report`, set by the InferenceEndpoint
controller): only those records are refreshed (`refresh_records`), so a started endpoint is Running, and routed by
the gateway, without a later `nodus` command. It does not take the apply lease: a service's observation only reads
the service's state, and a status write is a compare-and-set (`controllers.status.write_status`). A record that is
gone or being deleted is left alone; a project or store it cannot open is one line on stderr, exit 2.

What happens is the controllers' (`Controller.observe`, through `nodus.reconciler.controllers.registry`): a
job whose supervisor is gone is recovered (`controllers/runs.recover`: restarted from its state folder while
`spec.recovery.maxAttempts` allows, else Failed with reason SupervisorLost); a TrainingJob that Succeeded with
`spec.exportTo` has its outputs exported (`nodus.reconciler.controllers.export`). Nothing new is launched here.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from nodus.errors import NodusError
from nodus.reconciler.apply import holding_lease
from nodus.reconciler.controllers.base import Context
from nodus.reconciler.controllers.registry import REGISTRY, Registry
from nodus.reconciler.controllers.status import write_status
from nodus.reconciler.project import Project
from nodus.reconciler.state.records import JSONObject, ResourceKey, StateStore
from nodus.specs.status_names import Phase


@dataclass(frozen=True)
class Change:
    """One record a refresh changed: its status before and after, and what the controller did to it."""

    key: ResourceKey
    before: JSONObject
    after: JSONObject
    notes: Sequence[str] = ()

    def lines(self) -> list[str]:
        """`TrainingJob/x: Running -> Succeeded`, or `TrainingJob/x: Running (stage Training, step 3/8)`, then
        one line per note (`TrainingJob/x: its supervisor was lost: restarted it (attempt 2)`)."""
        before, after = self.before.get("phase") or "-", self.after.get("phase") or "-"
        reason = f" ({self.after['reason']})" if self.after.get("reason") and after != Phase.RUNNING else ""
        if before != after:
            head = f"{self.key}: {before} -> {after}{reason}"
        else:
            head = f"{self.key}: {after}{reason}" + (f" ({_progress(self.after)})" if _progress(self.after) else "")
        return [head, *(f"{self.key}: {note}" for note in self.notes)]


def _progress(status: JSONObject) -> str:
    parts = []
    if status.get("stage"):
        parts.append(f"stage {status['stage']}")
    if status.get("step") is not None:
        total = f"/{status['totalSteps']}" if status.get("totalSteps") else ""
        parts.append(f"step {status['step']}{total}")
    return ", ".join(parts)


def refresh(project: Project, store: StateStore, registry: Registry = REGISTRY) -> list[Change]:
    """Let every controller observe its resources and write what changed (the caller holds the lease, or is a
    test); the changes, in the registry's order of kinds."""
    context = Context(project, store, action="refresh")
    changes: list[Change] = []
    for controller in registry:
        for record in store.list(controller.kind):
            seen = controller.observe(record, context)
            if seen is None:
                continue
            written = write_status(store, record, seen.status, seen.events)
            if written or seen.notes:
                after = store.get(record.key)
                changes.append(Change(record.key, record.status, after.status if after else seen.status, seen.notes))
    return changes


def refresh_records(
    project: Project, store: StateStore, kind: str, names: Sequence[str] = (), namespace: str | None = None
) -> list[Change]:
    """Refresh the records of `kind` (those named, of project `namespace`; all of the kind when none is named) as
    `refresh` does, without the lease (the caller's kind observes without acting: services)."""
    controller = REGISTRY.for_kind(kind)
    context = Context(project, store, action="refresh")
    changes: list[Change] = []
    for record in store.list(kind, namespace):
        if record.deleting or (names and record.key.name not in names):
            continue
        seen = controller.observe(record, context)
        if seen is not None and write_status(store, record, seen.status, seen.events):
            after = store.get(record.key)
            changes.append(Change(record.key, record.status, after.status if after else seen.status, seen.notes))
    return changes


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m nodus.reconciler.refresh", description="refresh some records")
    parser.add_argument("kind")
    parser.add_argument("names", nargs="*")
    parser.add_argument("--path", type=Path, required=True, help="the project folder")
    parser.add_argument("--state", help="the state store (default: the project's)")
    parser.add_argument("--state-dir", type=Path, help="the project's state folder (default: ROOT/.nodus)")
    parser.add_argument("--project", dest="namespace", help="the nodus project of NAMES")
    args = parser.parse_args(argv)
    try:
        if not args.path.is_dir():
            return 0  # the project is gone: nothing to tell
        project = Project.find(args.path, state=args.state, state_dir=args.state_dir)
        store = project.open_state(create=False)
        try:
            for change in refresh_records(project, store, args.kind, args.names, args.namespace):
                print("\n".join(change.lines()), flush=True)
        finally:
            store.close()
    except NodusError as error:
        print(f"nodus refresh: {' '.join(error.lines())}", file=sys.stderr)
        return 2
    return 0


def refresh_under_lease(project: Project, store: StateStore, operation: str = "refresh") -> list[Change]:
    """`refresh` holding the apply lease: no apply runs meanwhile; a live holder fails fast (LeaseHeld)."""
    with holding_lease(store, operation):
        return refresh(project, store)


if __name__ == "__main__":
    sys.exit(main())
