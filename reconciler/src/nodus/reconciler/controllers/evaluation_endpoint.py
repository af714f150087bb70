"""A TrainingJob that evaluates through an InferenceEndpoint (`spec.evaluation.endpoint`): what its trainer calls.

Who calls it: the TrainingJob controller at launch (`reconcile_trainingjob`). The `nodus/evaluate` runtime answers the
Environment's held-out tasks through the endpoint's own base URL on the project's gateway instead of loading a model
(`nodus.runtimes.endpoint_generation`), so a trained adapter is served and measured by the path users call: the same
gateway, key, limits, holds and receipts. The trainer gets NODUS_ENDPOINT_URL (the endpoint's `status.url`),
NODUS_ENDPOINT_MODEL (the model the endpoint serves) and NODUS_API_KEY (by reference, from the Secret named:
`run_secrets`). No model is imported for the run. An endpoint that is not Running yet holds the run Pending.
"""

from __future__ import annotations

from dataclasses import dataclass

from nodus.errors import ConfigError
from nodus.reconciler.controllers.run_secrets import secret_ref
from nodus.reconciler.executors.workload import SecretRef
from nodus.reconciler.project import Project
from nodus.reconciler.state.records import JSONObject, ResourceKey, ResourceRecord, StateStore
from nodus.specs.status_names import Phase, Reason

API_KEY = "NODUS_API_KEY"


@dataclass(frozen=True)
class ThroughEndpoint:
    env: dict[str, str]
    key: SecretRef


def evaluation_endpoint(
    record: ResourceRecord, *, project: Project, store: StateStore
) -> tuple[ThroughEndpoint | None, JSONObject | None]:
    """(what the trainer gets, None), or (None, the status to wait with); (None, None) for a run without one."""
    endpoint = ((record.spec["spec"].get("evaluation") or {}).get("endpoint")) or None
    if endpoint is None:
        return None, None
    name = str(endpoint["name"])
    found = store.get(ResourceKey("InferenceEndpoint", record.key.project, name))
    if found is None or found.status.get("phase") != Phase.RUNNING or not found.status.get("url"):
        phase = "missing" if found is None else str(found.status.get("phase") or Phase.PENDING)
        message = f"spec.evaluation.endpoint: InferenceEndpoint {name} is {phase}, not Running"
        return None, {"phase": Phase.PENDING, "reason": Reason.NOT_READY, "message": message}
    label = f"TrainingJob/{record.key.name}"
    try:
        key = secret_ref(project, label, "spec.evaluation.endpoint.keySecret", str(endpoint["keySecret"]), API_KEY)
    except ConfigError as exc:
        return None, {"phase": Phase.FAILED, "reason": Reason.LAUNCH_FAILED, "message": exc.message}
    env = {
        "NODUS_ENDPOINT_URL": str(found.status["url"]),
        "NODUS_ENDPOINT_MODEL": str(found.status.get("servedModel") or found.status.get("model") or name),
    }
    return ThroughEndpoint(env, key), None
