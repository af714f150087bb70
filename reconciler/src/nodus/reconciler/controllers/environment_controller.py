"""The Environment controller behind the registry: `reconcile_environment`, building with `--build`.

Who calls it: `nodus.reconciler.controllers.registry` (registered for Environment). With `--build`
(`ApplyOptions.build`), an Environment that is not Ready is built with nodus-build first (the same code path
as the `nodus-build` CLI, for this one Environment of its spec file); a failed build or one that could not
start is Failed with BuildFailed. One not Ready after this pass is said after the resource.
"""

from __future__ import annotations

from pathlib import Path

from nodus.builder import build as builder
from nodus.reconciler.controllers.base import Context, ControllerBase, Done
from nodus.reconciler.controllers.blocking import environment_not_built
from nodus.reconciler.controllers.environment import reconcile_environment
from nodus.reconciler.state.records import JSONObject, ResourceRecord, StateStore
from nodus.specs.status_names import Phase, Reason


class EnvironmentController(ControllerBase):
    kind = "Environment"
    failure_reason: str = Reason.BUILD_FAILED

    def reconcile(self, record: ResourceRecord, context: Context) -> Done:
        status = _reconcile(record.spec, context)
        notes: list[str] = []
        if status.get("phase") != Phase.READY:
            notes.append(f"{status.get('phase')}: {status.get('message', status.get('reason', ''))}")
        return Done(status, notes=notes)

    def blocked_by(self, record: ResourceRecord, store: StateStore) -> str | None:
        return environment_not_built(record)


def _reconcile(document: JSONObject, context: Context) -> JSONObject:
    project, options = context.project, context.options
    spec_file = Path(context.source.rsplit(":", 2)[0]) if context.source else None
    name = document["metadata"]["name"]

    def build(path: Path) -> tuple[bool, str]:
        context.report(f"Environment/{name}", "building (nodus-build)")
        results = builder.build_paths(
            [path],
            store=project.files,
            lock_path=project.lock_path,
            options=builder.BuildOptions(network=options.network),
            only=lambda parsed: parsed.resource.metadata.name == name,
        )
        failed = [r for r in results if r.status == "failed"]
        return (not failed, failed[0].error if failed else "")

    return reconcile_environment(
        document,
        spec_file=spec_file,
        lock_path=project.lock_path,
        images=project.files.images,
        build=build if options.build else None,
    )
