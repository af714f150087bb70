"""Which kinds a controller runs, and what nodus says about the kinds that nothing runs yet.

Who calls it: the plan renderers (`nodus.reconciler.planning.render`: the stored-only line under the
action), the health of `nodus get -o wide` (`nodus.reconciler.gitops.sync_status`: `Unknown`, never
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

CONTROLLED_KINDS: frozenset[str] = registry.REGISTRY.kinds()
"""Kinds `nodus apply` acts on (builds, launches, imports, readies); every other kind is only stored."""

__all__ = [
    "CONTROLLED_KINDS",
    "NO_CONTROLLER",
    "UNSUPPORTED_PHASE",
    "has_controller",
    "no_controller_message",
    "stored_only_note",
    "stored_only_status",
]


def has_controller(kind: str) -> bool:
    return registry.REGISTRY.has_controller(kind)
