"""The Secret controller: a Secret is Ready once stored; its values stay where it says they are.

Who calls it: `nodus.reconciler.controllers.registry` (registered for Secret). A Secret names keys and where their
values live (the applying process's environment, with `envPrefix`, or a dotenv file: `nodus.specs.secret`); the runs
and the Ray executor that name it read a value at the moment they need it (`nodus.reconciler.secret_values`), and
nothing stores one. So there is nothing to run: the status says which keys it offers and where they are read from,
never a value, and whether each can be read from here now is said by the run that needs it, in one line.
"""

from __future__ import annotations

from nodus.reconciler.controllers.base import Context, ControllerBase, Done
from nodus.reconciler.state.records import ResourceRecord
from nodus.specs.status_names import Phase


class SecretController(ControllerBase):
    kind = "Secret"

    def reconcile(self, record: ResourceRecord, context: Context) -> Done:
        spec = record.spec["spec"]
        keys = list(spec.get("keys") or [])
        if spec.get("provider", "Env") == "File":
            where = f"the dotenv file {spec.get('path')}"
        else:
            where = "the environment of the process that reads it" + (
                f" (variables {spec['envPrefix']}KEY)" if spec.get("envPrefix") else ""
            )
        message = f"{len(keys)} key{'s' if len(keys) != 1 else ''} read from {where} when a run needs them; none stored"
        return Done({"phase": Phase.READY, "keys": keys, "message": message})
