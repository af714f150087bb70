"""The controllers by kind: `REGISTRY.for_kind(kind)`, and `reconcile`, which runs one and turns the errors
it raises into results.

Who calls it: `nodus.reconciler.apply` (each resource of a wave), `nodus.reconciler.refresh` (`observe` of
every kind), `nodus get`/`describe` (heartbeats, through `heartbeat_at`) and
`nodus.reconciler.controllers.coverage` (which kinds run, for the plan renderers and health).

Adding a controller for a kind is its module (a class with `reconcile(record, context)`, see
`controllers/base.py`) and one `REGISTRY.register(...)` line below: the kind then leaves the stored-only set
and every "stored only" message about it stops on its own. Any kind not registered goes through the one
stored-only controller (`controllers/stored_only.py`); a kind nothing runs yet but whose resources are admitted
(`admit`, before a plan is written) registers a stored-only controller of its own with `runs=False`, and stays
in the stored-only set.
"""

from __future__ import annotations

from collections.abc import Iterator

from nodus.errors import PermanentError, TemporaryError
from nodus.reconciler.controllers.agentgroup_controller import AgentGroupController
from nodus.reconciler.controllers.base import Context, Controller, Done, Requeue, Result, failure_status
from nodus.reconciler.controllers.budget_controller import BudgetController
from nodus.reconciler.controllers.environment_controller import EnvironmentController
from nodus.reconciler.controllers.inferenceendpoint_controller import InferenceEndpointController
from nodus.reconciler.controllers.job_controller import JobController
from nodus.reconciler.controllers.runtime_controller import TrainingRuntimeController
from nodus.reconciler.controllers.secret_controller import SecretController
from nodus.reconciler.controllers.stored_only import StoredOnlyController
from nodus.reconciler.controllers.trainingjob_controller import TrainingJobController
from nodus.reconciler.controllers.volume_controller import VolumeController
from nodus.reconciler.state.records import JSONObject, ResourceRecord


class Registry:
    """Controllers keyed by kind, in the order they were registered; the stored-only one for the rest."""

    def __init__(self, stored_only: Controller) -> None:
        self._by_kind: dict[str, Controller] = {}
        self._stored_only_by_kind: dict[str, Controller] = {}
        """Kinds nothing runs yet that still admit their resources (AgentGroup): stored only, all the same."""
        self.stored_only = stored_only

    def register(self, controller: Controller, *, runs: bool = True) -> None:
        """`runs=False`: the kind stays stored only (not in `kinds()`, not iterated by refresh); only its
        controller's hooks (`admit`, `reconcile` saying it is stored only) are its own."""
        if controller.kind in self._by_kind or controller.kind in self._stored_only_by_kind:
            raise ValueError(f"a controller for {controller.kind} is registered already")
        (self._by_kind if runs else self._stored_only_by_kind)[controller.kind] = controller

    def for_kind(self, kind: str) -> Controller:
        return self._by_kind.get(kind) or self._stored_only_by_kind.get(kind, self.stored_only)

    def has_controller(self, kind: str) -> bool:
        return kind in self._by_kind

    def kinds(self) -> frozenset[str]:
        """The kinds a controller runs (every other kind is stored only)."""
        return frozenset(self._by_kind)

    def __iter__(self) -> Iterator[Controller]:
        return iter(self._by_kind.values())


REGISTRY = Registry(StoredOnlyController())
REGISTRY.register(VolumeController())
REGISTRY.register(EnvironmentController())
REGISTRY.register(TrainingRuntimeController())
REGISTRY.register(TrainingJobController())
REGISTRY.register(JobController())
REGISTRY.register(InferenceEndpointController())
REGISTRY.register(SecretController())
REGISTRY.register(BudgetController())
REGISTRY.register(AgentGroupController(), runs=False)


def reconcile(record: ResourceRecord, context: Context, registry: Registry | None = None) -> Result:
    """The controller of the record's kind, run once: a TemporaryError it raises is a Requeue after the error's
    delay, a PermanentError a Done whose status is Failed (both keep the error; the status says why, with the
    controller's failure reason). Any other error is raised as it is."""
    controller = (registry or REGISTRY).for_kind(record.key.kind)
    try:
        return controller.reconcile(record, context)
    except TemporaryError as error:
        status = _keeping_generation(record, failure_status(controller, error))
        return Requeue(status, error.delay, controller.failure_reason, error=error)
    except PermanentError as error:
        return Done(_keeping_generation(record, failure_status(controller, error)), error=error)


def _keeping_generation(record: ResourceRecord, status: JSONObject) -> JSONObject:
    """A failed pass's status, keeping the generation the resource runs (`launchGeneration`): a pass that raised
    launched nothing, so the run it has is still the one its status describes (never taken for a replacement)."""
    launched = record.status.get("launchGeneration")
    return status if launched is None else {**status, "launchGeneration": launched}
