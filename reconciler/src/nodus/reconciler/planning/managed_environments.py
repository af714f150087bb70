"""Managed Environments: the catalog's Environments (`nodus/graph-coloring@1.0.0`, `nodus/gsm8k@1.0.0`, ...) join
the desired state of a plan when a resource of the plan names one, as managed runtimes do, so that
`environment: {name: nodus/graph-coloring@1.0.0}` works without the user writing the Environment.

Who calls it: `nodus.reconciler.planning.managed.with_managed` (what `nodus plan`, `apply`, the dry run, the
GitOps sync and the SDK plan from); the Environment controller (`catalog_file`, to build a managed Environment
from its catalog folder); `nodus get environments -n nodus` and `describe` (`read_catalog`, `examples_of`); the
SDK's `TrainingJob.from_example`. Like `managed`, it reads files: `catalog/<name>/environment.yaml`, one
Environment each with `metadata.project: nodus`. A resource names one through `TrainingJob.spec.environment.name`
or an evaluation AgentGroup's `spec.evaluation.environment`; an Environment the user's files define themselves
is theirs and is left alone. In a plan it shows as `+ Environment/nodus/graph-coloring` with the source
`managed:catalog/graph-coloring/environment.yaml`.

Where the catalog is: the folder in `NODUS_CATALOG_DIR` when set (tests, a catalog of one's own); else a
wheel's packaged copy beside the `nodus` package (`nodus/catalog/`), else the workspace's `catalog/` of the
source checkout this module runs from (an editable install: the live files).
"""

from __future__ import annotations

import dataclasses
import os
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Final

from nodus.errors import SpecError
from nodus.reconciler.planning.desired import Desired
from nodus.reconciler.planning.managed_files import MANAGED_PROJECT, read_managed
from nodus.reconciler.references import environment_ref, split_ref
from nodus.reconciler.state.records import DEFAULT_PROJECT, JSONObject, ResourceKey

CATALOG_DIR_VARIABLE: Final = "NODUS_CATALOG_DIR"
SOURCE_PREFIX: Final = "managed:catalog/"
ENVIRONMENT_FILE: Final = "environment.yaml"
EXAMPLES_FOLDER: Final = "examples"


@dataclass(frozen=True)
class CatalogEnvironment:
    """One catalog Environment: its desired state (source `managed:catalog/<folder>/environment.yaml`) and file."""

    desired: Desired
    file: Path
    """The catalog's `environment.yaml`: what the Environment controller builds from (its `package.path: .`)."""

    @property
    def folder(self) -> Path:
        return self.file.parent


def catalog_folders() -> list[Path]:
    """The folders that may hold the catalog (each a folder of `<name>/environment.yaml`); the first wins."""
    override = os.environ.get(CATALOG_DIR_VARIABLE)
    if override:
        return [Path(override)]
    here = Path(__file__).resolve()
    # here: <workspace>/reconciler/src/nodus/reconciler/planning/managed_environments.py
    candidates = [here.parents[2] / "catalog"]
    if len(here.parents) > 5:
        candidates.append(here.parents[5] / "catalog")
    return [folder for folder in candidates if folder.is_dir()]


def read_catalog(folders: Iterable[Path] | None = None) -> tuple[dict[ResourceKey, CatalogEnvironment], list[str]]:
    """Every catalog Environment by key (the first folder wins), and the problems of the catalog files that could
    not be read (`file:line:col: ...`, one line each)."""
    found: dict[ResourceKey, CatalogEnvironment] = {}
    items, problems = read_managed(
        catalog_folders() if folders is None else folders, f"*/{ENVIRONMENT_FILE}", "Environment"
    )
    for path, item in items:
        source = f"{SOURCE_PREFIX}{path.parent.name}/{path.name}"
        found.setdefault(item.key, CatalogEnvironment(dataclasses.replace(item, source=source), path))
    return found, problems


def named_environments(desired: Iterable[Desired]) -> set[ResourceKey]:
    """The Environments the plan's TrainingJobs and evaluation AgentGroups name (any project)."""
    named: set[ResourceKey] = set()
    for item in desired:
        if item.key.kind == "TrainingJob":
            reference = environment_ref(item.document)
            if reference is not None:
                named.add(reference[0])
        elif item.key.kind == "AgentGroup":
            key = _agent_group_environment(item.document)
            if key is not None:
                named.add(key)
    return named


def _agent_group_environment(group: JSONObject) -> ResourceKey | None:
    evaluation = (group.get("spec") or {}).get("evaluation")
    if not evaluation or not evaluation.get("environment"):
        return None
    project = str((group.get("metadata") or {}).get("project") or DEFAULT_PROJECT)
    reference = str(evaluation["environment"]).partition("@")[0]
    env_project, name = split_ref(reference, project)
    return ResourceKey("Environment", env_project, name)


def with_managed_environments(desired: list[Desired], folders: Iterable[Path] | None = None) -> list[Desired]:
    """`desired` plus the catalog Environments its resources name and its files do not define.

    A `nodus/...` Environment that is not in the catalog is left out: admission then refuses the job
    (EnvironmentNotFound) unless the store already has it. One named at another version than the catalog's
    joins too, so admission says which version the catalog has (EnvironmentVersionNotFound).
    """
    defined = {item.key for item in desired}
    wanted = sorted(key for key in named_environments(desired) - defined if key.project == MANAGED_PROJECT)
    if not wanted:
        return desired
    catalog, problems = read_catalog(folders)
    missing = [key for key in wanted if key not in catalog]
    if missing and problems:
        # The Environment asked for may be in the file that could not be read: say so rather than "not found".
        raise SpecError(problems, hint="a catalog Environment's environment.yaml is broken; reinstall nodus")
    return [*desired, *(catalog[key].desired for key in wanted if key in catalog)]


def is_managed_source(source: str | None) -> bool:
    return bool(source and source.startswith(SOURCE_PREFIX))


def catalog_file(source: str | None, folders: Iterable[Path] | None = None) -> Path | None:
    """The catalog file a `managed:catalog/<name>/environment.yaml` source names, or None (not managed, or no
    longer in the catalog)."""
    if not source or not is_managed_source(source):
        return None
    relative = source.removeprefix(SOURCE_PREFIX)
    for folder in catalog_folders() if folders is None else folders:
        path = folder / relative
        if path.is_file():
            return path
    return None


def examples_of(entry: CatalogEnvironment) -> list[Path]:
    """The ready TrainingJob templates of a catalog Environment (`catalog/<name>/examples/*.yaml`), sorted."""
    return sorted((entry.folder / EXAMPLES_FOLDER).glob("*.yaml"))


def find(reference: str, folders: Iterable[Path] | None = None) -> CatalogEnvironment:
    """The catalog Environment `nodus/<name>@<version>` (the project may be left out; the version must be the
    catalog's). LookupError, with a one-line message naming what the catalog has, when there is none."""
    name_part, _, version = reference.partition("@")
    project, name = split_ref(name_part, MANAGED_PROJECT)
    if project != MANAGED_PROJECT:
        raise LookupError(f"{reference}: not a catalog Environment (the catalog's are nodus/<name>@<version>)")
    catalog, problems = read_catalog(folders)
    entry = catalog.get(ResourceKey("Environment", MANAGED_PROJECT, name))
    if entry is None:
        known = ", ".join(sorted(key.name for key in catalog)) or "none found"
        broken = f"; unreadable catalog files: {problems[0]}" if problems else ""
        raise LookupError(f"{reference}: no catalog Environment {name} (the catalog has: {known}){broken}")
    have = str(entry.desired.document["spec"]["version"])
    if version and version != have:
        raise LookupError(f"{reference}: the catalog has {name} at version {have}, not {version}")
    return entry
