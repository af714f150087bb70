"""The TrainingRuntime controller: a runtime is a document jobs name, Ready once it is stored.

Who calls it: `nodus.reconciler.controllers.registry` (registered for TrainingRuntime). Admission checks a
job's parameters against the runtime's schema; there is nothing to run for the runtime itself.
"""

from __future__ import annotations

from nodus.reconciler.controllers.base import Context, ControllerBase, Done
from nodus.reconciler.state.records import ResourceRecord
from nodus.specs.status_names import Phase


class TrainingRuntimeController(ControllerBase):
    kind = "TrainingRuntime"

    def reconcile(self, record: ResourceRecord, context: Context) -> Done:
        return Done({"phase": Phase.READY})
