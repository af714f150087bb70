"""Environments whose package code changed while their version stayed: what `nodus plan` warns about.

Who calls it: `nodus plan` and `nodus apply` (`nodus.cli.plan_apply`), with the files' resources and the project's
`nodus.lock`. A path package's files are hashed exactly as nodus-build hashes them (`nodus.builder.plan.
source_digest`, the spec file itself left out when it sits in the package folder) and compared with the source
digest the lock recorded for that name@version. They differ when someone edited the code without bumping
`spec.version`: the spec is unchanged, so the plan alone would say `No changes`, while the image of that version
is still the old code (a published version never changes). `nodus-build --check` says stale for the same reason.

Unlike the pure planner it reads files (the lock and the package folders), so it is its own module.
"""

from __future__ import annotations

from collections.abc import Iterable
from pathlib import Path

from nodus.builder.lockfile import Lock
from nodus.builder.plan import package_folder, source_digest
from nodus.reconciler.planning.desired import Desired
from nodus.specs.environment import Environment


def stale_sources(desired: Iterable[Desired], lock_path: Path) -> list[str]:
    """One line per Environment of `desired` whose package files no longer hash to what `lock_path` recorded:
    `file: Environment/NAME: spec.version: ...; bump spec.version ...`. Empty when there is no lock, or an entry
    records no source digest (built before nodus-build recorded it, or a pip or image package)."""
    environments = [item for item in desired if item.key.kind == "Environment"]
    if not environments or not lock_path.is_file():
        return []
    lock = Lock.load(lock_path)
    found: list[str] = []
    for item in environments:
        resource = item.resource
        if not isinstance(resource, Environment):
            continue
        name, version = resource.metadata.name, resource.spec.version
        entry = lock.get(name, version, item.key.project)
        spec_file = Path(item.source.rsplit(":", 1)[0])
        folder = package_folder(resource, spec_file.parent)
        if entry is None or not entry.source or folder is None or not folder.is_dir():
            continue
        digest = source_digest(folder, skip=_spec_file_in(folder, spec_file))
        if lock.source_changed(name, version, digest, item.key.project):
            found.append(
                f"{spec_file}: Environment/{name}: spec.version: the package's files in {folder} changed since "
                f"{name}@{version} was built (nodus.lock records source {entry.source[:19]}, the files are "
                f"{digest[:19]}); {version} is still the old image: bump spec.version to build and use the change"
            )
    return found


def _spec_file_in(folder: Path, spec_file: Path) -> list[str]:
    """The spec file, relative to the package folder, when it lives there (nodus-build leaves it out too)."""
    try:
        return [spec_file.resolve().relative_to(folder.resolve()).as_posix()]
    except ValueError:
        return []
