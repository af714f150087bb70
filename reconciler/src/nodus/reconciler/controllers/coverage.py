"""Which kinds a controller runs, and what nodus says about the kinds that nothing runs yet.

Who calls it: `nodus.reconciler.apply` (a resource of a kind without a controller is stored, gets the
`stored_only_status` and its line is reported), the plan renderers (`nodus.reconciler.planning.render`: the
same line under the action), the health of `nodus get -o wide` (`nodus.reconciler.controller.sync_status`:
`Unknown`, never `Healthy`, for something that does not run) and `nodus describe`.

Every kind the specs know is either in `CONTROLLED_KINDS` or stored only. Adding a controller for a kind is
its module, its branch in `apply._reconcile` and its name here: the kind then leaves the stored-only set, and
every message above stops on its own.
"""

from __future__ import annotations

from nodus.reconciler.state.records import JSONObject

CONTROLLED_KINDS: frozenset[str] = frozenset({"Environment", "TrainingRuntime", "TrainingJob", "Job", "Volume"})
"""Kinds `nodus apply` acts on (builds, launches, imports, readies); every other kind is only stored."""

UNSUPPORTED_PHASE = "Unsupported"
"""The phase of a stored-only resource: not Pending (nothing will pick it up), not Running (nothing runs it)."""
NO_CONTROLLER = "NoController"
"""Its reason."""


def has_controller(kind: str) -> bool:
    return kind in CONTROLLED_KINDS


def no_controller_message(kind: str) -> str:
    """`nodus has no controller for InferenceEndpoint yet (nothing runs it)`."""
    return f"nodus has no controller for {kind} yet (nothing runs it)"


def stored_only_note(kind: str) -> str:
    """What plan and apply print after the resource: `stored only: nodus has no controller for ...`."""
    return f"stored only: {no_controller_message(kind)}"


def stored_only_status(kind: str) -> JSONObject:
    """The status `nodus apply` records for a resource of a kind without a controller."""
    return {"phase": UNSUPPORTED_PHASE, "reason": NO_CONTROLLER, "message": no_controller_message(kind)}
