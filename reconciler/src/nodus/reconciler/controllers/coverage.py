"""Which kinds a controller runs, and what nodus says about the kinds that nothing runs yet.

Who calls it: the callers of the plan renderers (`nodus plan`, `apply`, the SDK's preview and the golden test:
`stored_only_notes`, which they hand to the pure `nodus.reconciler.planning.render` for the stored-only line
under the action), the health of `nodus get -o wide` (`nodus.reconciler.gitops.sync_status`: `Unknown`, never
`Healthy`, for something that does not run), `nodus describe` and the waits.

The set is the registry's (`nodus.reconciler.controllers.registry`): registering a controller for a kind takes
it out of the stored-only set, and every message below stops on its own.
"""

from __future__ import annotations

from nodus.reconciler.controllers import registry
from nodus.reconciler.controllers.stored_only import (
    NO_CONTROLLER,
    UNSUPPORTED_PHASE,
    no_controller_message,
    stored_only_note,
    stored_only_status,
)
from nodus.reconciler.planning.diff import Plan

CONTROLLED_KINDS: frozenset[str] = registry.REGISTRY.kinds()
"""Kinds `nodus apply` acts on (builds, launches, imports, readies); every other kind is only stored."""

__all__ = [
    "CONTROLLED_KINDS",
    "NO_CONTROLLER",
    "UNSUPPORTED_PHASE",
    "has_controller",
    "no_controller_message",
    "stored_only_note",
    "stored_only_notes",
    "stored_only_status",
]


def has_controller(kind: str) -> bool:
    return registry.REGISTRY.has_controller(kind)


def stored_only_notes(plan: Plan) -> dict[str, str]:
    """The `stored only` note of each kind the plan creates or changes that nothing runs, by kind: what the plan
    renderers (`render_table`, `render_markdown`: `stored_only=`) say after each of its resources."""
    kinds = {action.key.kind for action in plan.changes if action.type != "delete"}
    return {kind: stored_only_note(kind) for kind in sorted(kinds) if not has_controller(kind)}
