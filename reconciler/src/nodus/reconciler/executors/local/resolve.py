"""A workload resolved on this host: the JobSpec the local supervisor runs, with the paths it needs.

Who calls it: `LocalExecutor.launch` (`executors/local/executor.py`), once per launch, before it writes the job
folder. What the workload names by content becomes a place on this machine:

- the Environment's task manifests: copied from the project's content store into
  `manifests/by-environment/<project>-<name>@<version>/<split>-<seed>.jsonl`, shared by every run of that version
  (any other seed is written by the first run that asks for it);
- the package: its `file://` host hint, for process-mode graders (container mode runs the grader image);
- the model: the project's imported copy of a pinned URI, or the Volume's revision folder (NODUS_INPUT_MODEL), the
  LoRA adapters the trainer merges into it first (NODUS_INPUT_ADAPTERS), and a distillation's teacher the same way
  (NODUS_INPUT_TEACHER);
- the data: the data Volume's revision folder (NODUS_INPUT_DATA);
- the command: `python`/`python3` of a TrainingJob's runtime run on the host (no image) is the interpreter nodus
  runs in, the one that has the managed runtimes' trainers installed with it; an image's command, and a Job's
  (the user's own command, run as written), stay as they are.

A workload that names something this host does not have fails here with ConfigError naming the artifact: the
controllers launch only once the model is imported and the Volume Ready, so that means the host lost it since.
"""

from __future__ import annotations

import contextlib
import os
import sys
import tempfile
from pathlib import Path
from typing import Final
from urllib.parse import unquote, urlparse

from nodus.errors import ConfigError, NodusError
from nodus.reconciler.model_cache import imported, model_folder
from nodus.reconciler.project import Project

from ..workload import AdapterArtifact, EnvironmentArtifact, ModelArtifact, Workload
from .job import EnvironmentSpec, JobSpec
from .single_node_launchers import launched

HOST_PYTHONS: Final = frozenset({"python", "python3"})
MODEL_VARIABLE: Final = "NODUS_INPUT_MODEL"
TEACHER_VARIABLE: Final = "NODUS_INPUT_TEACHER"
DATA_VARIABLE: Final = "NODUS_INPUT_DATA"
ADAPTERS_VARIABLE: Final = "NODUS_INPUT_ADAPTERS"
"""The LoRA adapter folders (os.pathsep between them, in training order) the trainer merges into NODUS_INPUT_MODEL."""


def resolve(workload: Workload, project: Project | None, *, python: str = sys.executable) -> JobSpec:
    """The JobSpec of `workload` on this host. `project` holds the content store (manifests), the imported
    models and the Volumes; without one (an executor over a bare jobs folder, in tests) a workload may name
    none of them."""
    env = dict(workload.env)
    label = f"workload {workload.key.project}/{workload.key.name}"
    if workload.model is not None:
        env[MODEL_VARIABLE] = str(model_path(workload.model, workload.key.project, label, project))
        if workload.model.adapters:
            env[ADAPTERS_VARIABLE] = os.pathsep.join(
                str(adapter_path(adapter, workload.key.project, label, project)) for adapter in workload.model.adapters
            )
    if workload.teacher is not None:
        env[TEACHER_VARIABLE] = str(model_path(workload.teacher, workload.key.project, f"{label}: teacher", project))
    if workload.data is not None:
        env[DATA_VARIABLE] = str(data_path(workload, label, project))
    environment = None
    if workload.environment is not None:
        environment = environment_spec(workload.environment, workload, project)
    command = host_command(workload.command, workload.image, python) if workload.key.kind == "TrainingJob" else None
    resources = workload.resources
    if resources is not None and resources.nodes == 1 and workload.image is None:
        gpus = resources.gpu.count if resources.gpu is not None else 0
        command = launched(command or workload.command, resources.launcher, gpus, python, label)
    return JobSpec(
        name=workload.key.name,
        project=workload.key.project,
        command=command or workload.command,
        kind=workload.key.kind,
        generation=workload.generation,
        attempt=workload.attempt,
        env=env,
        environment=environment,
        params=dict(workload.params),
        price_per_hour_usd=workload.price_per_hour_usd,
        max_cost_usd=workload.max_cost_usd,
        accounting_interval_s=workload.intervals.accounting_s,
        heartbeat_interval_s=workload.intervals.heartbeat_s,
        stop_grace_s=workload.intervals.stop_grace_s,
        image=workload.image,
        secrets=tuple(ref.model_dump(mode="json") for ref in workload.secrets),
    )


def host_command(command: tuple[str, ...], image: str | None, python: str = sys.executable) -> tuple[str, ...]:
    """The command as this host runs it: a host `python` is nodus's own interpreter (a `python` on PATH can be
    any: the system one, another virtual environment's, neither with torch and the trainers)."""
    if image is None and command[0] in HOST_PYTHONS:
        return (python, *command[1:])
    return command


def environment_spec(artifact: EnvironmentArtifact, workload: Workload, project: Project | None) -> EnvironmentSpec:
    paths = () if artifact.package.host_hint is None else (str(hint_path(artifact.package.host_hint)),)
    return EnvironmentSpec(
        name=artifact.name,
        version=artifact.version,
        image=artifact.grader_image,
        digest=artifact.grader_image_digest if artifact.grader_image is not None else None,
        paths=paths,
        loader=artifact.loader,
        train_tasks=artifact.train_tasks,
        held_out_tasks=artifact.held_out_tasks,
        seed=artifact.seed,
        manifests=None if project is None else str(manifest_folder(artifact, workload, project)),
    )


def manifest_folder(artifact: EnvironmentArtifact, workload: Workload, project: Project) -> Path:
    """The Environment version's manifest folder, with the manifests the workload names copied in from the
    content store (each checked against its sha256 there; one already in place is kept)."""
    where = f"{artifact.project}-{artifact.name}@{artifact.version}"
    folder = project.files.root / "manifests" / "by-environment" / where
    for key, digest in artifact.manifests.items():
        split, _, seed = key.partition("/")
        target = folder / f"{split}-{seed}.jsonl"
        if target.exists():
            continue
        try:
            data = project.files.manifest(digest)
        except NodusError as exc:
            raise ConfigError(
                f"workload {workload.key.project}/{workload.key.name}: environment.manifests[{key!r}]: {exc.message}",
                hint="nodus-build stores the manifests it froze: build the Environment again",
            ) from None
        _write_whole(target, data)
    return folder


def _write_whole(target: Path, data: bytes) -> None:
    """`target` appears whole or not at all (two runs may copy the same manifest at once)."""
    target.parent.mkdir(parents=True, exist_ok=True)
    fd, temporary = tempfile.mkstemp(prefix=f".{target.name}.", suffix=".partial", dir=target.parent)
    try:
        with os.fdopen(fd, "wb") as out:
            out.write(data)
        os.replace(temporary, target)
    except BaseException:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(temporary)
        raise


def model_path(model: ModelArtifact, owner: str, label: str, project: Project | None) -> Path:
    """Where the model is on this host: the imported copy of its URI, or its Volume's revision folder (a Volume of
    project `owner`, the workload's). Errors start with `label`."""
    if project is None:
        raise ConfigError(f"{label}: model: this executor has no project to find models in")
    if model.uri is not None:
        if not imported(project, model.uri):
            raise ConfigError(f"{label}: model.uri: {model.uri} is not imported into {project.files.root / 'models'}")
        return model_folder(project, model.uri)
    assert model.volume is not None  # ModelArtifact names exactly one
    folder = volume_folder(project, owner, model.volume.name, model.volume.revision)
    if not folder.is_dir():
        raise ConfigError(f"{label}: model.volume: Volume {model.volume.name} has no revision {model.volume.revision}")
    if not (folder / "config.json").is_file() and (folder / "model" / "config.json").is_file():
        return folder / "model"  # a run's exported outputs: its full model is in model/, beside results and provenance
    return folder


def adapter_path(adapter: AdapterArtifact, owner: str, label: str, project: Project | None) -> Path:
    """Where a LoRA adapter of the model is on this host: its folder in the Volume's revision."""
    if project is None:
        raise ConfigError(f"{label}: model.adapters: this executor has no project to find Volumes in")
    volume = adapter.volume
    folder = volume_folder(project, owner, volume.name, volume.revision) / adapter.path
    if not (folder / "adapter_config.json").is_file():
        where = f"{adapter.path}/ of " if adapter.path else ""
        detail = f"{where}Volume {volume.name} revision {volume.revision} holds no adapter_config.json"
        raise ConfigError(f"{label}: model.adapters: {detail}")
    return folder


def data_path(workload: Workload, label: str, project: Project | None) -> Path:
    """The data Volume's revision folder on this host (NODUS_INPUT_DATA; `params.json`'s `data.path` is in it)."""
    assert workload.data is not None
    volume = workload.data.volume
    if project is None:
        raise ConfigError(f"{label}: data: this executor has no project to find Volumes in")
    folder = volume_folder(project, workload.key.project, volume.name, volume.revision)
    if not folder.is_dir():
        raise ConfigError(f"{label}: data.volume: Volume {volume.name} has no revision {volume.revision}")
    return folder


def volume_folder(project: Project, volume_project: str, name: str, revision: int) -> Path:
    """A Volume revision's folder, as the Volume controller fills it (`Project.volume_revision`)."""
    return project.volume_revision(volume_project, name, revision)


def hint_path(uri: str) -> Path:
    """The folder a `file://` package hint names."""
    parsed = urlparse(uri)
    if parsed.scheme != "file" or parsed.netloc not in ("", "localhost"):
        raise ConfigError(f"workload: package.hostHint {uri!r} is not a file:// URI of this host")
    return Path(unquote(parsed.path))


def host_hint(folder: Path) -> str:
    """The `file://` URI of a package folder on this host (what `hint_path` reads back)."""
    return folder.resolve().as_uri()
