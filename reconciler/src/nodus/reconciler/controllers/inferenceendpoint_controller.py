"""The InferenceEndpoint controller behind the registry: `reconcile_endpoint` in the one controller signature.

Who calls it: `nodus.reconciler.controllers.registry` (registered for InferenceEndpoint). The decisions are in
`controllers/endpoint.py`; admission refuses a catalog id the model table does not have, at plan time.
"""

from __future__ import annotations

from nodus.reconciler.controllers.base import AdmissionContext, Context, ControllerBase, Done, Refusal, Requeue
from nodus.reconciler.controllers.endpoint import (
    GATEWAY,
    gateway_needed,
    observe_endpoint,
    reconcile_endpoint,
    service_host,
)
from nodus.reconciler.endpoints.model_table import load_models
from nodus.reconciler.state.records import JSONObject, ResourceRecord, StateStore
from nodus.specs.status_names import Phase, Reason

STARTING_POLL_S = 2.0
"""How soon a starting endpoint is looked at again (its model loads in seconds here, minutes on a GPU host)."""


class InferenceEndpointController(ControllerBase):
    kind = "InferenceEndpoint"

    def reconcile(self, record: ResourceRecord, context: Context) -> Done | Requeue:
        status = reconcile_endpoint(record, project=context.project, store=context.store)
        if status.get("phase") == Phase.PENDING and status.get("reason") in (None, Reason.NOT_READY):
            return Requeue(status, STARTING_POLL_S, Reason.NOT_READY)
        return Done(status)

    def admit(self, record: ResourceRecord | None, desired: JSONObject, context: AdmissionContext) -> list[Refusal]:
        model = desired["spec"].get("model")
        if isinstance(model, str):
            table = load_models(context.project_root)
            if table.get(model) is None:
                known = ", ".join(sorted(table.entries)) or "none"
                message = f"spec.model: {model} is not in the model table (it has: {known})"
                return [Refusal(Reason.MODEL_NOT_FOUND, message)]
        return []

    def observe(self, record: ResourceRecord, context: Context) -> Done | None:
        status = observe_endpoint(record, context.project)
        return None if status is None or status == record.status else Done(status)

    def finalize(self, record: ResourceRecord, context: Context) -> None:
        services = service_host(context.project)
        services.stop_service(record.key.project, record.key.name)
        if not gateway_needed(context.store, record.key):  # nothing to call through the gateway any more
            services.stop_service(GATEWAY.project, GATEWAY.name)

    def blocked_by(self, record: ResourceRecord, store: StateStore) -> str | None:
        if record.status.get("phase") == Phase.FAILED or record.status.get("reason") == Reason.MODEL_NOT_PINNED:
            return str(record.status.get("message") or record.status.get("reason") or "Failed")
        return None
