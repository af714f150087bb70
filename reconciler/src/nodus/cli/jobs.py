"""`nodus logs`, `nodus cp`, `nodus cancel`, `nodus delete` and `nodus patch`: acting on running work.

Who calls it: `nodus.cli.main` registers the commands. They find the project and its state store
(`nodus.reconciler.project`) and the project's executor (`nodus.reconciler.controllers.trainingjob.executor`),
which they ask through the Executor protocol, never reading a job folder. `cp` copies files and folders (`-r`)
of outputs, each verified by the executor against the sha256 recorded when it collected them, from the
generation launched last or, with `--generation N`, from an earlier one a replacement set aside (`logs` takes
`--generation` too); `patch` takes the apply lease, validates the patched resource like a file, and refuses a
lower spending cap.
"""

from __future__ import annotations

import json
import os
import sys
import time
from collections.abc import Mapping
from pathlib import Path, PurePosixPath
from typing import Any

import click

from nodus.cli.console import err_line, line
from nodus.cli.resources import split_target
from nodus.errors import ConfigError, NodusError
from nodus.reconciler.executors import Executor, OutputFile
from nodus.reconciler.executors.kept import kept
from nodus.reconciler.project import Project
from nodus.reconciler.state.records import DEFAULT_PROJECT, ResourceKey
from nodus.reconciler.views.warnings import failed_grading_lines
from nodus.specs.status_names import ENDED_PHASES

JOB_KINDS = ("TrainingJob", "Job")


def _job_key(target: str, namespace: str | None) -> ResourceKey:
    kind, name = split_target(target)
    if name is None or kind not in JOB_KINDS:
        raise ConfigError(f"{target!r} is not a job", hint="name it as tj/NAME or job/NAME")
    return ResourceKey(kind, namespace or DEFAULT_PROJECT, name)


GENERATION_HELP = (
    "Which generation of the job (1, 2, ...: each replacement of a TrainingJob is a new one); "
    "default: the one launched last."
)


@click.command("logs")
@click.argument("target")
@click.option("-f", "--follow", is_flag=True, help="Keep printing until the job ends.")
@click.option("--generation", type=click.IntRange(min=1), default=None, help=GENERATION_HELP)
@click.option("-n", "--project", "namespace", default=None)
@click.option("--path", type=click.Path(path_type=Path), help="Project folder (default: found from here).")
def logs(target: str, follow: bool, generation: int | None, namespace: str | None, path: Path | None) -> None:
    """Print a job's trainer log (job/NAME or tj/NAME; a TrainingJob's Job has the same name).

    An earlier generation's log stays readable after a replacement: `nodus logs tj/NAME --generation 1`.
    """
    from nodus.reconciler.controllers.trainingjob import executor

    key = _job_key(target, namespace)
    project = Project.find(path)
    try:
        jobs = executor(project)
        if not jobs.exists(key.project, key.name):
            raise ConfigError(f"{key.kind}/{key.name} has no job yet", hint="nodus get tj shows its phase")
        log = jobs.logs(key.project, key.name, generation)
    except NodusError as exc:
        # Reads need no executor: a run that ended is kept on this host (`executors.kept`), read from there.
        found = kept(project.jobs, key.project, key.name, generation)
        if found is None:
            raise
        err_line(
            f"note: live state could not be read ({exc.message}); showing the kept log of generation {found.generation}"
        )
        _write(found.log.encode("utf-8"))
        for text in failed_grading_lines(found.gradings, found.where):
            err_line(text)
        return
    while True:
        _write(log.read())
        if not follow or log.ended():
            while follow and (rest := log.read()):
                _write(rest)  # written before it ended
            gradings = jobs.gradings(key.project, key.name, generation)  # failed gradings: where their evidence is
            for text in failed_grading_lines(gradings.records, gradings.where):
                err_line(text)
            return
        time.sleep(0.5)


def _write(chunk: bytes) -> None:
    if chunk:
        sys.stdout.write(chunk.decode("utf-8", errors="replace"))
        sys.stdout.flush()


@click.command("cp")
@click.argument("source")
@click.argument("destination")
@click.option("-r", "--recursive", is_flag=True, help="Copy a folder of outputs (adapter/, or outputs/ for all).")
@click.option("--generation", type=click.IntRange(min=1), default=None, help=GENERATION_HELP)
@click.option("-n", "--project", "namespace", default=None)
@click.option("--path", type=click.Path(path_type=Path), help="Project folder (default: found from here).")
def cp(
    source: str,
    destination: str,
    recursive: bool,
    generation: int | None,
    namespace: str | None,
    path: Path | None,
) -> None:
    """Copy outputs out of a finished job, each verified against the sha256 recorded when it was collected; copy
    files into a Volume (a new revision) or out of it.

    `nodus cp tj/NAME:outputs/results.json ./results.json`; `nodus cp -r tj/NAME:outputs/adapter ./adapter`.
    As `cp`: a DESTINATION ending in `/`, or an existing folder, is a folder to copy into; missing parent
    folders are made; an existing file is replaced. A replacement of the TrainingJob keeps the earlier
    generation's outputs: `--generation 1` copies from it.
    `nodus cp ./chats.jsonl vol/support-chats:chats.jsonl` uploads and commits the Volume's next revision (`-r`: a
    folder); `nodus cp vol/support-chats:chats.jsonl ./chats.jsonl` copies a file out of its latest revision.
    """
    from nodus.reconciler.controllers.trainingjob import executor

    if _is_volume(destination) or _is_volume(source):
        _volume_cp(source, destination, recursive=recursive, namespace=namespace, path=path)
        return

    target, colon, inner = source.partition(":")
    inner_path = inner.strip("/")
    if not colon or not (inner_path == "outputs" or inner_path.startswith("outputs/")):
        raise ConfigError(f"{source!r} is not KIND/NAME:outputs/PATH", hint="nodus cp tj/run:outputs/results.json .")
    key = _job_key(target, namespace)
    jobs = executor(Project.find(path))
    if not jobs.exists(key.project, key.name):
        raise ConfigError(f"{key.kind}/{key.name} has no job", hint="nodus get tj shows its phase")
    label = f"{key.kind}/{key.name}" + (f" generation {generation}" if generation is not None else "")
    relative = inner_path.removeprefix("outputs").strip("/")
    outputs = jobs.outputs(key.project, key.name, generation)
    if outputs is None:
        phase = jobs.observe(key.project, key.name, generation).phase
        why = "it has not finished" if phase not in ENDED_PHASES else f"it ended {phase}"
        raise ConfigError(f"{label} has no outputs: {why}", hint=_earlier_hint(jobs, key) or None)
    wanted = outputs.files
    copies, root = _copies(relative, wanted, destination, recursive=recursive, label=label, source=source)
    done = jobs.copy_outputs(key.project, key.name, copies, label=label, root=root, generation=generation)
    if len(done) == 1 and relative in wanted:
        entry = wanted[relative]
        line(f"{done[0]} ({entry.size} bytes, sha256 {entry.sha256[:12]}... verified)")
    else:
        size = sum(wanted[name].size for name, _ in copies)
        line(f"{root} ({len(done)} files, {size} bytes, each verified against its sha256)")


VOLUME_KINDS = ("vol/", "volume/", "volumes/")


def _is_volume(target: str) -> bool:
    return target.startswith(VOLUME_KINDS) and ":" in target


def _volume_cp(source: str, destination: str, *, recursive: bool, namespace: str | None, path: Path | None) -> None:
    """`nodus cp` into a Volume (an upload: its next revision) or out of it (verified against its manifest); a link
    is never followed either way (`nodus.reconciler.controllers.volume_files`)."""
    from nodus.reconciler.controllers.volume_files import download, inside_volume, local_files, upload

    project = Project.find(path)
    store = project.open_state()
    try:
        if _is_volume(destination):
            target, _, inner = destination.partition(":")
            key = ResourceKey("Volume", namespace or DEFAULT_PROJECT, target.split("/", 1)[1])
            label = f"Volume/{key.name}"
            base = inside_volume(inner, label) if inner else ""  # `vol/NAME:` is its top; `vol/NAME:/x` is refused
            local = Path(source)
            if local.is_dir() and not local.is_symlink():
                if not recursive:
                    raise ConfigError(
                        f"{source} is a folder: pass -r to upload it", hint=f"nodus cp -r {source} {destination}"
                    )
                files = local_files(local, base, label)
            else:
                relative = base
                if not inner or inner.endswith("/"):
                    relative = "/".join(part for part in (base, local.name) if part)
                files = [(local, inside_volume(relative, label))]
            revision, manifest = upload(project, store, key, files)
            size = sum(int(entry["size"]) for entry in manifest["files"].values())
            line(
                f"Volume/{key.name} revision {revision}: {len(files)} file{'s' if len(files) != 1 else ''} uploaded "
                f"({len(manifest['files'])} files, {size} bytes, a sha256 each)"
            )
            return
        target, _, inner = source.partition(":")
        key = ResourceKey("Volume", namespace or DEFAULT_PROJECT, target.split("/", 1)[1])
        relative = inside_volume(inner, f"Volume/{key.name}")
        final = Path(destination)
        if destination.endswith(("/", os.sep)) or final.is_dir():
            final = final / PurePosixPath(relative).name
        final = download(project, store, key, relative, final)
        line(f"{final} ({final.stat().st_size} bytes, verified against its sha256)")
    finally:
        store.close()


def _copies(
    relative: str, wanted: Mapping[str, OutputFile], destination: str, *, recursive: bool, label: str, source: str
) -> tuple[list[tuple[str, Path]], Path]:
    """(output, final path) for each file a copy of `outputs/relative` makes, and the folder or file it makes."""
    into = destination.endswith(("/", os.sep)) or Path(destination).is_dir()
    given = Path(destination)
    if relative in wanted:
        final = given / PurePosixPath(relative).name if into else given
        return [(relative, final)], final
    prefix = f"{relative}/" if relative else ""
    members = sorted(name for name in wanted if name.startswith(prefix))
    if not members:
        listed = ", ".join(sorted(wanted)) or "none (the run wrote no files)"
        raise ConfigError(f"{label} has no output {('outputs/' + relative)!r}", hint=f"outputs: {listed}")
    shown = f"outputs/{relative}" if relative else "outputs"
    if not recursive:
        raise ConfigError(
            f"{shown} of {label} is a folder ({len(members)} files): pass -r to copy it",
            hint=f"nodus cp -r {source} {destination}",
        )
    root = given / (PurePosixPath(relative).name or "outputs") if into else given
    if root.exists() and not root.is_dir():
        raise ConfigError(f"{root} is a file: the folder {shown} of {label} cannot be copied onto it")
    return [(name, root / name[len(prefix) :]) for name in members], root


def _earlier_hint(jobs: Executor, key: ResourceKey) -> str:
    """Where earlier generations' outputs are, when there are any."""
    earlier = jobs.earlier_generations(key.project, key.name)
    if not earlier:
        return ""
    short = "tj" if key.kind == "TrainingJob" else "job"
    numbers = ", ".join(str(number) for number in earlier)
    return f"earlier generations: {numbers} (nodus cp {short}/{key.name}:outputs/PATH DEST --generation N)"


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
    kind, name = split_target(target)
    if name is None:
        raise ConfigError("patch needs KIND/NAME")
    try:
        change = json.loads(patch_text)
    except ValueError as exc:
        raise ConfigError(f"-p is not JSON: {exc}") from None
    patch_resource(ResourceKey(kind, namespace or DEFAULT_PROJECT, name), change, state=state, path=path)


def patch_resource(
    key: ResourceKey, change: Any, *, state: str | None, path: Path | None, said: str = "patched"
) -> None:
    """Merge `change` into the stored resource under the apply lease, validate it like a file, then reconcile it
    (`nodus patch`, and `nodus stop/start ep/NAME`, which patch `spec.state`)."""
    from nodus.reconciler.apply import Operation, apply_operations, holding_lease
    from nodus.reconciler.planning.desired import document_of
    from nodus.specs.registry import BY_KIND

    kind, name = key.kind, key.name
    project = Project.find(path, state=state)
    store = project.open_state()
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
        err_line(f"{kind.lower()}/{name} {said}")
    finally:
        store.close()
