"""The Environment controller behind the registry: `reconcile_environment`, building with `--build`.

Who calls it: `nodus.reconciler.controllers.registry` (registered for Environment). With `--build`
(`ApplyOptions.build`), an Environment that is not Ready is built with nodus-build first (the same code path
as the `nodus-build` CLI, for this one Environment of its spec file); a failed build or one that could not
start is Failed with BuildFailed. One not Ready after this pass is said after the resource.

A catalog Environment (source `managed:catalog/<name>/environment.yaml`, joined to the plan because a job names
`nodus/<name>@<version>`) is built without `--build`, from its catalog file: the user never wrote it, so there is
no spec file of theirs to run nodus-build on, and like a managed runtime it must just work when named. Its
package is the catalog's own pinned folder, so the build is the same on every machine.
"""

from __future__ import annotations

from pathlib import Path

from nodus.builder import build as builder
from nodus.reconciler.controllers.base import Context, ControllerBase, Done
from nodus.reconciler.controllers.blocking import environment_not_built
from nodus.reconciler.controllers.environment import reconcile_environment
from nodus.reconciler.planning.managed_environments import catalog_file, is_managed_source
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
    managed = is_managed_source(context.source)
    if managed:
        spec_file = catalog_file(context.source)
    else:
        spec_file = Path(context.source.rsplit(":", 2)[0]) if context.source else None
    name = document["metadata"]["name"]

    def build(path: Path) -> tuple[bool, str]:
        what = f"building from the catalog ({path})" if managed else "building (nodus-build)"
        context.report(f"Environment/{name}", what)
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
        build=build if options.build or managed else None,
    )
