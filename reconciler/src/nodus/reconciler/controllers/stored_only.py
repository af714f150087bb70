"""The one controller of every kind nodus has no controller for yet: the resource is stored, and said so.

Who uses it: `nodus.reconciler.controllers.registry` hands it out for any kind nothing else is registered
for; the messages below are also what the plan renderers, `nodus get -o wide` (health Unknown, never
Healthy) and `nodus describe` say (through `nodus.reconciler.controllers.coverage`). Its status is
Unsupported/NoController, not Pending (nothing will pick it up) and not Running (nothing runs it).
"""

from __future__ import annotations

from nodus.reconciler.controllers.base import Context, ControllerBase, Done
from nodus.reconciler.state.records import JSONObject, ResourceRecord
from nodus.specs.status_names import Phase, Reason

UNSUPPORTED_PHASE = Phase.UNSUPPORTED
"""The phase of a stored-only resource: not Pending (nothing will pick it up), not Running (nothing runs it)."""
NO_CONTROLLER = Reason.NO_CONTROLLER
"""Its reason."""


def no_controller_message(kind: str) -> str:
    """`nodus has no controller for InferenceEndpoint yet (nothing runs it)`."""
    return f"nodus has no controller for {kind} yet (nothing runs it)"


def stored_only_note(kind: str) -> str:
    """What plan and apply print after the resource: `stored only: nodus has no controller for ...`."""
    return f"stored only: {no_controller_message(kind)}"


def stored_only_status(kind: str) -> JSONObject:
    """The status `nodus apply` records for a resource of a kind without a controller."""
    return {"phase": UNSUPPORTED_PHASE, "reason": NO_CONTROLLER, "message": no_controller_message(kind)}


class StoredOnlyController(ControllerBase):
    """Stores the resource with the Unsupported status and says so at each apply that changes it."""

    kind = "*"

    def reconcile(self, record: ResourceRecord, context: Context) -> Done:
        # Stored, and said so: nothing runs it, so it must not look created-and-running.
        if context.action != "noop":
            context.report(str(record.key), stored_only_note(record.key.kind))
        return Done(stored_only_status(record.key.kind))
