"""The AgentGroup controller: nothing runs an AgentGroup yet, but an evaluation group is admitted.

Who calls it: `nodus.reconciler.controllers.registry` (registered for AgentGroup as stored only, so the kind
stays in the stored-only set: its status is Unsupported/NoController and plan says `stored only`). Its `admit`
refuses an evaluation group whose `spec.evaluation.environment` names no Environment at that version
(`controllers.admission.agent_group_refusals`), before anything of the plan is written.
"""

from __future__ import annotations

from nodus.reconciler.controllers.admission import agent_group_refusals
from nodus.reconciler.controllers.base import AdmissionContext, Refusal
from nodus.reconciler.controllers.stored_only import StoredOnlyController
from nodus.reconciler.state.records import JSONObject, ResourceRecord


class AgentGroupController(StoredOnlyController):
    kind = "AgentGroup"

    def admit(self, record: ResourceRecord | None, desired: JSONObject, context: AdmissionContext) -> list[Refusal]:
        return agent_group_refusals(desired, context)
