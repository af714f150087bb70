"""Managed runtimes: nodus's own TrainingRuntimes (`nodus/grpo-lora`, `nodus/evaluate`, ...) join the desired
state of a plan when a TrainingJob of the plan names one, so that `runtime: nodus/grpo-lora` works without the
user writing the runtime.

Who calls it: `nodus plan` and `nodus apply` (`nodus.cli.plan_apply.read_desired`), after the user's files are
read. Unlike the rest of `planning` it reads files: the catalog's YAML files, one TrainingRuntime each, with
`metadata.project: nodus` and `spec.managed: true`. A runtime the user's files define themselves is theirs and
is left alone. In the plan a managed runtime shows as `+ TrainingRuntime/nodus/grpo-lora` with the source
`managed:runtimes/grpo-lora.yaml`.

Where the catalog is: the folder in `NODUS_RUNTIMES_DIR` when set (tests, a catalog of one's own); else beside
the `nodus.runtimes` package, found with `importlib.util.find_spec`, which locates the package without
importing it (importing the trainers pulls in torch): in a wheel the YAMLs are in the package's `catalog/`
folder (a hatch force-include of `runtimes/*.yaml`), in this editable workspace they are in `runtimes/`, the
distribution's folder three levels above the package.
"""

from __future__ import annotations

import dataclasses
import importlib.util
import os
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Final

from nodus.errors import ConfigError, SpecError
from nodus.reconciler.planning.desired import Desired, desired_from
from nodus.reconciler.planning.managed_environments import with_managed_environments
from nodus.reconciler.planning.managed_files import MANAGED_PROJECT, read_managed
from nodus.reconciler.references import runtime_key
from nodus.reconciler.state.records import ResourceKey
from nodus.specs.parse import parse_resources

RUNTIMES_DIR_VARIABLE: Final = "NODUS_RUNTIMES_DIR"
SOURCE_PREFIX: Final = "managed:runtimes/"
DISTRIBUTION: Final = "nodus-runtimes"


def catalog_folders() -> list[Path]:
    """The folders that may hold the managed runtimes' YAML files, the first that has a runtime wins."""
    override = os.environ.get(RUNTIMES_DIR_VARIABLE)
    if override:
        return [Path(override)]
    try:
        spec = importlib.util.find_spec("nodus.runtimes")
    except (ImportError, ValueError):
        return []
    if spec is None or not spec.submodule_search_locations:
        return []
    folders: list[Path] = []
    for location in spec.submodule_search_locations:
        package = Path(location)
        # Editable: runtimes/src/nodus/runtimes -> runtimes/, the live files (a wheel's copy would be stale).
        distribution = package.parents[2] if len(package.parents) > 2 else None
        if distribution is not None and _is_runtimes_distribution(distribution):
            folders.append(distribution)
        folders.append(package / "catalog")
    return [folder for folder in folders if folder.is_dir()]


def _is_runtimes_distribution(folder: Path) -> bool:
    try:
        text = (folder / "pyproject.toml").read_text(encoding="utf-8")
    except OSError:
        return False
    return f'name = "{DISTRIBUTION}"' in text


def read_catalog(folders: Iterable[Path] | None = None) -> tuple[dict[ResourceKey, Desired], list[str]]:
    """Every managed runtime in the catalog folders by key (the first folder wins), and the problems of the
    catalog files that could not be read (`file:line:col: ...`, one line each)."""
    found: dict[ResourceKey, Desired] = {}
    items, problems = read_managed(catalog_folders() if folders is None else folders, "*.yaml", "TrainingRuntime")
    for path, item in items:
        if item.document["spec"].get("managed"):
            found.setdefault(item.key, dataclasses.replace(item, source=f"{SOURCE_PREFIX}{path.name}"))
    return found, problems


def with_managed_runtimes(desired: list[Desired], folders: Iterable[Path] | None = None) -> list[Desired]:
    """`desired` plus the managed runtimes its TrainingJobs name and its files do not define.

    A `nodus/...` runtime that is not in the catalog is left out: admission then refuses the job
    (RuntimeNotFound) unless the store already has that runtime.
    """
    defined = {item.key for item in desired}
    wanted = sorted(
        {runtime_key(item.document) for item in desired if item.key.kind == "TrainingJob"} - defined,
    )
    wanted = [key for key in wanted if key.project == MANAGED_PROJECT]
    if not wanted:
        return desired
    catalog, problems = read_catalog(folders)
    missing = [key for key in wanted if key not in catalog]
    if missing and problems:
        # The runtime asked for may be in the file that could not be read: say so rather than "not found".
        raise SpecError(problems, hint="a managed runtime's YAML file is broken; reinstall nodus-runtimes")
    return [*desired, *(catalog[key] for key in wanted if key in catalog)]


def read_desired(
    paths: Iterable[Path], *, shown: str | None = None, hint: str, note: Callable[[str], None] | None = None
) -> list[Desired]:
    """Every resource under `paths`, with the managed runtimes and catalog Environments it names: what `nodus
    plan`, `nodus apply` and `nodus controller` plan from. A spec error is raised whole (one line per problem);
    no resource at all is an error too, as an empty folder is far more likely a wrong path than a wish to
    destroy everything.
    `shown`: how messages name the paths; `hint`: what to check when nothing was found; `note`: where what was
    left out on purpose is said (a saved dry run's output)."""
    paths = list(paths)
    result = parse_resources(paths)
    result.raise_for_errors()
    resources, notes, refused = result.without_dry_runs(path for path in paths if path.is_file())
    if refused:
        raise SpecError([str(problem) for problem in refused], hint="nodus apply -f the TrainingJob's own file")
    if note is not None:
        for problem in notes:
            note(str(problem))
    if not resources:
        where = shown or ", ".join(str(path) for path in paths)
        raise ConfigError(f"{where}: no nodus resources found", hint=hint)
    return with_managed(desired_from(resources))


def with_managed(desired: list[Desired]) -> list[Desired]:
    """`desired` plus what nodus manages that it names: the catalog Environments its TrainingJobs and evaluation
    AgentGroups name (`nodus.reconciler.planning.managed_environments`) and the managed runtimes of its jobs."""
    return with_managed_environments(with_managed_runtimes(desired))
