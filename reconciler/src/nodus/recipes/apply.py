"""Applying what a recipe made, through the functions `nodus apply --build` uses.

Who calls it: `nodus.recipes.jobs` (`.preview()` and `.run()` of a recipe's job). The documents are read
like files (`nodus.specs.parse`, so a bad field is a located one-line error), planned against the project's
state store (`nodus.reconciler.planning`) and applied under the apply lease (`nodus.reconciler.apply`), which
admits the TrainingJob, writes it and launches it once. An Environment the recipe packaged is built first with
nodus-build when its image is not in nodus.lock yet, with the build options of `Options` (a prebuilt base
image, `--base`, saves the minutes a base build takes).
"""

from __future__ import annotations

import os
import sys
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from nodus.builder.build import BuildOptions, build_paths
from nodus.builder.lockfile import Lock
from nodus.builder.oci import tags_of
from nodus.errors import BuildError
from nodus.reconciler.apply import ApplyOptions, ApplyReport, apply_plan, operations_of, refusals
from nodus.reconciler.controllers.placement import placement_of
from nodus.reconciler.planning.desired import Desired, desired_from
from nodus.reconciler.planning.diff import Plan, plan
from nodus.reconciler.planning.managed import with_managed
from nodus.reconciler.project import Project
from nodus.reconciler.state.records import StateStore
from nodus.specs.parse import parse_resources, parse_text

BASE_VARIABLE = "NODUS_BUILD_BASE"
"""The base image for builds the SDK starts (`nodus-build --base`), when `Options.base` is not set."""
Reporter = Callable[[str], None]


def _to_stderr(line: str) -> None:
    print(f"nodus: {line}", file=sys.stderr, flush=True)


@dataclass(frozen=True)
class Options:
    """Where a recipe applies and how it builds: what `nodus apply --build` takes as flags."""

    path: Path | None = None
    """A folder of the project (its nodus.lock, else its git root); default: the current folder."""
    state: str | None = None
    """The state store (a SQLite path or postgresql://...); default: `.nodus/state.db` or NODUS_STATE."""
    base: str | None = None
    """`nodus-build --base`: `oci:LAYOUT:TAG` or REGISTRY/REPO@sha256:...; default: NODUS_BUILD_BASE, else the
    base in the project's store (built with mmdebstrap the first time)."""
    network: str = "none"
    """The build's freeze-step network: a packaged reward fetches nothing, so none."""
    report: Reporter = field(default=_to_stderr)
    """Progress lines (building, created, launched)."""

    def project(self) -> Project:
        return Project.find(self.path, state=self.state)

    def build_options(self) -> BuildOptions:
        return BuildOptions(network=self.network, base=self.base or os.environ.get(BASE_VARIABLE) or None)


def desired_of(text: str, file: Path) -> list[Desired]:
    """The resources of a document written by a recipe, checked like a file `nodus apply` reads."""
    result = parse_text(text, str(file))
    result.raise_for_errors()
    return desired_from(result.resources)


def with_runtimes(desired: list[Desired]) -> list[Desired]:
    """`desired` plus the managed runtimes (`nodus/grpo-lora`, ...) and catalog Environments
    (`nodus/gsm8k@1.0.0`, ...) its resources name, as `nodus apply` adds them."""
    return with_managed(desired)


def desired_from_file(file: Path) -> list[Desired]:
    result = parse_resources([file])
    result.raise_for_errors()
    return desired_from(result.resources)


def is_built(project: Project, name: str, version: str, namespace: str | None = None) -> bool:
    """Whether nodus.lock has the Environment version (of project `namespace`) and the local image store has its
    image."""
    entry = Lock.load(project.lock_path).get(name, version, namespace)
    return entry is not None and bool(tags_of(project.files.images, entry.image))


def ensure_built(
    project: Project, spec_file: Path, name: str, version: str, options: Options, namespace: str | None = None
) -> None:
    """Build the Environment of `spec_file` (of project `namespace`) with nodus-build unless its image is there."""
    if is_built(project, name, version, namespace):
        return
    options.report(f"Environment/{name}: building its grader image (nodus-build)")
    results = build_paths(
        [spec_file],
        store=project.files,
        lock_path=project.lock_path,
        options=options.build_options(),
        reporter=lambda environment, step, detail: options.report(f"Environment/{environment}: {step} {detail}"),
        only=lambda parsed: parsed.resource.metadata.name == name,
    )
    failed = [result for result in results if result.status == "failed"]
    if failed:
        raise BuildError(f"Environment/{name}: the build failed: {failed[0].error}", hint=failed[0].hint or None)
    if not results:
        raise BuildError(f"{spec_file}: no Environment {name} to build")


def preview(project: Project, desired: Sequence[Desired]) -> tuple[Plan, list[str]]:
    """The plan of `desired` against the store and admission's refusals of its TrainingJobs
    (`file:line: TrainingJob/NAME: Reason: field: message`); nothing is written."""
    store = project.open_state()
    try:
        made = plan(desired, store.list(), observed_serial=store.serial())
        return made, [
            refusal.line()
            for refusal in refusals(operations_of(made.actions), store, project.root, placement=placement_of(project))
        ]
    finally:
        store.close()


def apply_desired(
    project: Project,
    desired: Sequence[Desired],
    options: Options,
    *,
    operation: str,
    check: Callable[[Plan], None] | None = None,
) -> tuple[Plan, ApplyReport]:
    """Plan `desired` under the apply lease, let `check` refuse the plan, and apply it (building if need be)."""

    def make_plan(store: StateStore) -> Plan:
        made = plan(desired, store.list(), observed_serial=store.serial())
        if check is not None:
            check(made)
        return made

    store = project.open_state()
    try:
        return apply_plan(
            make_plan,
            project=project,
            store=store,
            options=ApplyOptions(build=True, network=options.network),
            reporter=lambda resource, message: options.report(f"{resource}: {message}"),
            operation=operation,
        )
    finally:
        store.close()
