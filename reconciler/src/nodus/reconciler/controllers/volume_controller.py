"""The Volume controller behind the registry: `reconcile_volume` in the one controller signature.

Who calls it: `nodus.reconciler.controllers.registry` (registered for Volume). A Volume's `source.path` is
relative to its spec file, which the operation's `file:line` names.
"""

from __future__ import annotations

from pathlib import Path

from nodus.reconciler.controllers.base import Context, ControllerBase, Done
from nodus.reconciler.controllers.volume import reconcile_volume
from nodus.reconciler.state.records import ResourceRecord


class VolumeController(ControllerBase):
    kind = "Volume"

    def reconcile(self, record: ResourceRecord, context: Context) -> Done:
        spec_file = Path(context.source.rsplit(":", 1)[0]) if context.source else None
        return Done(reconcile_volume(record, project=context.project, spec_file=spec_file))
