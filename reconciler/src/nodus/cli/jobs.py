"""`nodus logs`, `nodus cp`, `nodus cancel`, `nodus delete` and `nodus patch`: acting on running work.

Who calls it: `nodus.cli.main` registers the commands. They find the project and its state store
(`nodus.reconciler.project`) and the local executor's job folders (`nodus.reconciler.controllers.trainingjob`).
`cp` verifies every file against the sha256 the supervisor recorded when it collected the outputs; `patch`
takes the apply lease, validates the patched resource like a file, and refuses a lower spending cap.
"""

from __future__ import annotations

import json
import shutil
import sys
import time
from pathlib import Path
from typing import Any

import click

from nodus.cli.console import err_line, line
from nodus.cli.resources import split_target
from nodus.errors import ConfigError
from nodus.reconciler.executor.job import file_sha256, read_jsonl
from nodus.reconciler.project import Project
from nodus.reconciler.state.records import DEFAULT_PROJECT, ResourceKey
from nodus.reconciler.views.warnings import failed_grading_lines

JOB_KINDS = ("TrainingJob", "Job")


def _job_key(target: str, namespace: str | None) -> ResourceKey:
    kind, name = split_target(target)
    if name is None or kind not in JOB_KINDS:
        raise ConfigError(f"{target!r} is not a job", hint="name it as tj/NAME or job/NAME")
    return ResourceKey(kind, namespace or DEFAULT_PROJECT, name)


@click.command("logs")
@click.argument("target")
@click.option("-f", "--follow", is_flag=True, help="Keep printing until the job ends.")
@click.option("-n", "--project", "namespace", default=None)
@click.option("--path", type=click.Path(path_type=Path), help="Project folder (default: found from here).")
def logs(target: str, follow: bool, namespace: str | None, path: Path | None) -> None:
    """Print a job's trainer log (job/NAME or tj/NAME; a TrainingJob's Job has the same name)."""
    from nodus.reconciler.controllers.trainingjob import executor

    key = _job_key(target, namespace)
    jobs = executor(Project.find(path))
    if not jobs.exists(key.project, key.name):
        raise ConfigError(f"{key.kind}/{key.name} has no job yet", hint="nodus get tj shows its phase")
    log = jobs.files(key.project, key.name).trainer_log
    offset = 0
    while True:
        if log.exists():
            with log.open("rb") as handle:
                handle.seek(offset)
                chunk = handle.read()
            offset += len(chunk)
            sys.stdout.write(chunk.decode("utf-8", errors="replace"))
            sys.stdout.flush()
        if not follow or jobs.status(key.project, key.name).get("phase") in ("Succeeded", "Failed", "Cancelled"):
            if follow and log.exists() and log.stat().st_size > offset:
                continue
            gradings = jobs.files(key.project, key.name).gradings_log  # failed gradings: where their evidence is
            for text in failed_grading_lines(read_jsonl(gradings), gradings):
                err_line(text)
            return
        time.sleep(0.5)


@click.command("cp")
@click.argument("source")
@click.argument("destination", type=click.Path(path_type=Path))
@click.option("-n", "--project", "namespace", default=None)
@click.option("--path", type=click.Path(path_type=Path), help="Project folder (default: found from here).")
def cp(source: str, destination: Path, namespace: str | None, path: Path | None) -> None:
    """Copy an output out of a finished job: `nodus cp tj/NAME:outputs/FILE DEST` (verified by sha256)."""
    from nodus.reconciler.controllers.trainingjob import executor

    target, colon, inner = source.partition(":")
    if not colon or not inner.startswith("outputs/"):
        raise ConfigError(f"{source!r} is not KIND/NAME:outputs/PATH", hint="nodus cp tj/run:outputs/results.json .")
    key = _job_key(target, namespace)
    jobs = executor(Project.find(path))
    if not jobs.exists(key.project, key.name):
        raise ConfigError(f"{key.kind}/{key.name} has no job", hint="nodus get tj shows its phase")
    files = jobs.files(key.project, key.name)
    relative = inner.removeprefix("outputs/").strip("/")
    recorded = _recorded(files.outputs_manifest)
    if relative not in recorded:
        known = ", ".join(sorted(recorded)[:8]) or "none yet (the job has not finished)"
        raise ConfigError(f"{key.kind}/{key.name} has no output {relative!r}", hint=f"outputs: {known}")
    found = files.outputs / relative
    digest = file_sha256(found) if found.is_file() and not found.is_symlink() else None
    if digest != recorded[relative]["sha256"]:
        raise ConfigError(
            f"outputs/{relative} of {key.kind}/{key.name} no longer matches the sha256 recorded when it was collected",
            hint="the file changed after the job finished; nothing was copied",
        )
    target_path = destination / Path(relative).name if destination.is_dir() else destination
    shutil.copyfile(found, target_path)
    line(f"{target_path} ({recorded[relative]['size']} bytes, sha256 {recorded[relative]['sha256'][:12]}... verified)")


def _recorded(manifest: Path) -> dict[str, dict[str, Any]]:
    try:
        files = json.loads(manifest.read_text(encoding="utf-8")).get("files", {})
    except FileNotFoundError:
        return {}
    return files if isinstance(files, dict) else {}


@click.command("cancel")
@click.argument("target")
@click.option("-n", "--project", "namespace", default=None)
@click.option("--path", type=click.Path(path_type=Path), help="Project folder (default: found from here).")
def cancel(target: str, namespace: str | None, path: Path | None) -> None:
    """Stop a job for good (its outputs so far stay)."""
    from nodus.reconciler.controllers.trainingjob import executor

    key = _job_key(target, namespace)
    jobs = executor(Project.find(path))
    if not jobs.exists(key.project, key.name):
        raise ConfigError(f"{key.kind}/{key.name} has no job to cancel")
    jobs.cancel(key.project, key.name)
    line(f"{key.kind.lower()}/{key.name} cancel requested")


@click.command("delete")
@click.argument("target")
@click.option("-n", "--project", "namespace", default=None)
@click.option("--state", help="State store: a SQLite path or postgresql://...")
@click.option("--path", type=click.Path(path_type=Path), help="Project folder (default: found from here).")
def delete(target: str, namespace: str | None, state: str | None, path: Path | None) -> None:
    """Delete a resource from the state (a job is cancelled first). Its file, if any, still plans it back."""
    from nodus.reconciler.apply import Operation, apply_operations, holding_lease

    kind, name = split_target(target)
    if name is None:
        raise ConfigError("delete needs KIND/NAME")
    project = Project.find(path, state=state)
    store = project.open_state()
    key = ResourceKey(kind, namespace or DEFAULT_PROJECT, name)
    try:
        if store.get(key) is None:
            raise ConfigError(f"{kind}/{name} not found")
        with holding_lease(store, f"delete {key}"):
            apply_operations([Operation("delete", key, None)], project=project, store=store)
        line(f"{kind.lower()}/{name} deleted")
    finally:
        store.close()


def merge_patch(document: Any, patch: Any) -> Any:
    """RFC 7386 JSON merge patch: objects merge, null removes, anything else replaces."""
    if not isinstance(patch, dict):
        return patch
    merged = dict(document) if isinstance(document, dict) else {}
    for name, value in patch.items():
        if value is None:
            merged.pop(name, None)
        else:
            merged[name] = merge_patch(merged.get(name), value)
    return merged


@click.command("patch")
@click.argument("target")
@click.option(
    "-p", "--patch", "patch_text", required=True, help='JSON merge patch, e.g. \'{"spec":{"maxCostUSD":"40"}}\'.'
)
@click.option("--type", "patch_type", type=click.Choice(["merge"]), default="merge", show_default=True)
@click.option("-n", "--project", "namespace", default=None)
@click.option("--state", help="State store: a SQLite path or postgresql://...")
@click.option("--path", type=click.Path(path_type=Path), help="Project folder (default: found from here).")
def patch(
    target: str, patch_text: str, patch_type: str, namespace: str | None, state: str | None, path: Path | None
) -> None:
    """Change a stored resource in place (raise a cap, suspend or resume: spec.state), then reconcile it."""
    from nodus.reconciler.apply import Operation, apply_operations, holding_lease
    from nodus.reconciler.planning.desired import document_of
    from nodus.specs.registry import BY_KIND

    kind, name = split_target(target)
    if name is None:
        raise ConfigError("patch needs KIND/NAME")
    try:
        change = json.loads(patch_text)
    except ValueError as exc:
        raise ConfigError(f"-p is not JSON: {exc}") from None
    project = Project.find(path, state=state)
    store = project.open_state()
    key = ResourceKey(kind, namespace or DEFAULT_PROJECT, name)
    try:
        with holding_lease(store, f"patch {key}"):
            record = store.get(key)
            if record is None:
                raise ConfigError(f"{kind}/{name} not found")
            patched = merge_patch(record.spec, change)
            try:
                resource = BY_KIND[kind].model_validate(patched)
            except Exception as exc:  # pydantic's ValidationError: one line per problem is enough here
                first = str(exc).splitlines()
                raise ConfigError(f"{kind}/{name}: the patched resource is not valid: {' '.join(first[1:3])}") from None
            document = document_of(resource)
            apply_operations(
                [Operation("update", key, document, record.status.get("source"))], project=project, store=store
            )
        err_line(f"{kind.lower()}/{name} patched")
    finally:
        store.close()
