"""Inputs and outputs of Ray jobs through the project's OCI registry, for nodes that do not see the project's folder.

Who calls it: `RayExecutor` on the controller's host (`publish_inputs` before it submits a run, `OutputsCache` for
`nodus cp` and `exportTo`), built by `settings.ray_executor` from `executor.ray.registry`; and the node session on
the Ray node (`fetch_inputs` before it launches, `publish_outputs` once the job succeeded).

What travels, all by digest (the registry checks every blob against its digest, so what arrives is what was sent):
- the grader image, pushed from the project's image store as nodus-build made it (container-mode graders); the node
  pulls it into its own store and loads it into podman under the name the workload gives (`graderImage`), whose id
  must be the workload's `graderImageId`;
- the inputs artifact (`INPUTS_TYPE`, `nodus.builder.file_artifact`): the Environment's task manifests
  (`manifests/<sha256>`), the model's files (`model/<path>`: the imported copy of a pinned URI, or the Volume
  revision), a distillation's teacher (`teacher/<path>`) and the data Volume's revision (`data/<path>`), written
  into the node's store (`node_store`) where the local executor's resolver looks for them;
- the outputs artifact (`OUTPUTS_TYPE`): every file of the job's outputs/ under its path there, each layer's digest
  being the sha256 the supervisor recorded, pushed tagged with the run's submission id; the node's outputs marker
  names it (`artifact: {registry, digest}`), and `OutputsCache` fetches only the files a copy asks for.

Credentials: `NODUS_REGISTRY_USERNAME`/`NODUS_REGISTRY_PASSWORD` where each side runs (a node's come from the
environment its `ray start` had); they never travel in a submission, which anyone with the cluster's token can read.
Process-mode graders read a package folder on the host that applied the job, which a node without the project's
folder does not have: such a workload is refused here, in one line, before anything is submitted.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import tempfile
from collections.abc import Iterator, Mapping, MutableMapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Final

from nodus.builder import registry
from nodus.builder.file_artifact import artifact_files, write_artifact
from nodus.builder.oci import Descriptor, blob_path, read_blob, read_image, tags_of
from nodus.builder.sandbox import load_image
from nodus.builder.store import Store
from nodus.errors import ConfigError, NodusError

from ...model_cache import MANIFEST, imported, model_folder
from ...project import Project
from ..workload import ModelArtifact, Workload

INPUTS_TYPE: Final = "application/vnd.nodus.job-inputs.v1"
OUTPUTS_TYPE: Final = "application/vnd.nodus.job-outputs.v1"
REGISTRY_VARIABLE: Final = "NODUS_CHANNEL_REGISTRY"
INSECURE_VARIABLE: Final = "NODUS_CHANNEL_INSECURE"
INPUTS_VARIABLE: Final = "NODUS_INPUTS"
LAYOUT: Final = "ray-channel"
"""The OCI layout (under a project's or a node's state folder) the channel writes artifacts into and reads them from."""
MANIFESTS_PREFIX: Final = "manifests/"
MODEL_PREFIX: Final = "model/"
TEACHER_PREFIX: Final = "teacher/"
ADAPTER_PREFIX: Final = "adapter"
"""`adapter<N>/`: the N-th LoRA adapter the trainer merges into the model."""
DATA_PREFIX: Final = "data/"
NODE_STORE: Final = "node-store"
"""Beside a node's jobs folder: the store its sessions fill from the registry (images, manifests, models)."""


def node_store(jobs_root: Path) -> Project:
    """The project-shaped store of a node (beside its jobs folder), which the local executor's resolver reads."""
    root = jobs_root.parent / NODE_STORE
    root.mkdir(parents=True, exist_ok=True)
    return Project(root, root / "nodus.lock", Store(root.absolute()), None)


@dataclass(frozen=True)
class RegistryChannel:
    """The registry repository inputs and outputs travel through (`executor.ray.registry`)."""

    ref: registry.RegistryRef

    @classmethod
    def parse(cls, text: str, *, insecure: bool = False) -> RegistryChannel:
        return cls(registry.RegistryRef.parse(text, insecure=insecure))

    def env(self) -> dict[str, str]:
        """What a submission carries so that its node session finds the channel (no credentials)."""
        env = {REGISTRY_VARIABLE: str(self.ref)}
        if self.ref.insecure:
            env[INSECURE_VARIABLE] = "1"
        return env

    @classmethod
    def from_env(cls, environ: MutableMapping[str, str]) -> RegistryChannel | None:
        """The channel a submission named (its variables taken out of `environ`, which the session keeps to itself)."""
        text = environ.pop(REGISTRY_VARIABLE, None)
        insecure = environ.pop(INSECURE_VARIABLE, None) == "1"
        return None if not text else cls.parse(text, insecure=insecure)

    # --- the controller's host ------------------------------------------------------------------------------

    def publish_inputs(self, workload: Workload, project: Project) -> str | None:
        """Push what `workload` names from `project`'s store: the grader image, then the inputs artifact; the
        artifact's digest (None when the workload names no input). ConfigError naming the job and the input."""
        label = f"job {workload.project}/{workload.name}"
        files: dict[str, Path] = {}
        environment = workload.environment
        if environment is not None:
            if environment.grader_image is None:
                raise ConfigError(
                    f"{label}: environment {environment.name}@{environment.version}: process-mode graders read the "
                    "package folder on this host, which a Ray node without the project's folder does not have",
                    hint="run graders in the Environment's image (grading.sandbox: container in nodus.yaml, podman on "
                    "the nodes), or executor.ray.sharedFilesystem: true where the nodes see this folder",
                )
            self._push_image(project, environment.image_digest, f"{label}: environment {environment.name}")
            for key, digest in sorted(environment.manifests.items()):
                path = project.files.manifests / digest.removeprefix("sha256:")
                if not path.is_file():
                    raise ConfigError(
                        f"{label}: environment.manifests[{key!r}]: {digest} is not in {project.files.manifests}",
                        hint="nodus-build stores the manifests it froze: build the Environment again",
                    )
                files[MANIFESTS_PREFIX + digest.removeprefix("sha256:")] = path
        for prefix, folder in _folders(workload, project, label).items():
            for path in sorted(p for p in folder.rglob("*") if p.is_file() and not p.is_symlink()):
                files[prefix + path.relative_to(folder).as_posix()] = path
        if not files:
            return None
        layout = project.files.root / LAYOUT
        with _failures(label, f"its inputs to {self.ref}"):
            manifest = write_artifact(layout, INPUTS_TYPE, files)
            registry.push(layout, manifest.digest, self.ref)
        return manifest.digest

    def _push_image(self, project: Project, digest: str | None, label: str) -> None:
        if digest is None or not tags_of(project.files.images, digest):
            raise ConfigError(
                f"{label}: its image {digest} is not in the project's image store", hint="run nodus-build"
            )
        with _failures(label, f"its grader image {digest} to {self.ref}"):
            registry.push(project.files.images, digest, self.ref)

    # --- the node ---------------------------------------------------------------------------------------------

    def fetch_inputs(self, workload: Workload, digest: str | None, node: Project) -> None:
        """Put what `workload` names into the node's store from the registry: the grader image (into podman too)
        and the inputs artifact `digest`. ConfigError naming the job and what could not be fetched."""
        label = f"job {workload.project}/{workload.name}"
        environment = workload.environment
        if environment is not None and environment.grader_image is not None and environment.image_digest:
            images, tag = node.files.images, environment.image_digest.replace(":", "-")
            with _failures(label, f"its grader image {environment.image_digest} from {self.ref}", pull=True):
                registry.pull(self.ref, environment.image_digest, images, tag=tag)
                config = read_image(images, tag).ref.config_digest
                if environment.grader_image_digest and config != environment.grader_image_digest:
                    raise ConfigError(
                        f"{label}: grader image {environment.image_digest} has id {config}, "
                        f"not {environment.grader_image_digest}"
                    )
                load_image(images, tag, environment.grader_image, config)
        if digest is None:
            return
        layout = node.files.root / LAYOUT
        with _failures(label, f"its inputs {digest} from {self.ref}", pull=True):
            files = artifact_files(registry.fetch_manifest(self.ref, digest), INPUTS_TYPE, f"inputs {digest}")
            registry.fetch_blobs(self.ref, list(files.values()), layout)
            for name, blob in files.items():
                if name.startswith(MANIFESTS_PREFIX):
                    stored = node.files.put_manifest(read_blob(layout, blob.digest))
                    if stored.removeprefix("sha256:") != name.removeprefix(MANIFESTS_PREFIX):
                        raise ConfigError(f"{label}: inputs {digest}: {name} holds a manifest of digest {stored}")
            for prefix, target in _folders(workload, node, label, existing=False).items():
                part = {name.removeprefix(prefix): blob for name, blob in files.items() if name.startswith(prefix)}
                if part:
                    _install_folder(target, part, layout)

    def publish_outputs(
        self, outputs: Path, recorded: Mapping[str, Mapping[str, object]], tag: str, node: Project
    ) -> str:
        """Push the outputs the supervisor recorded (path -> sha256, size) as one artifact tagged `tag`; its
        digest. Each file must still hash to its recorded sha256 (its layer's digest)."""
        files = {path: outputs / path for path in recorded}
        layout = node.files.root / LAYOUT
        with _failures(f"outputs of {tag}", f"them to {self.ref}"):
            manifest = write_artifact(layout, OUTPUTS_TYPE, files)
            stored = artifact_files(read_blob(layout, manifest.digest), OUTPUTS_TYPE, f"outputs of {tag}")
            for path, blob in stored.items():
                if blob.digest != f"sha256:{recorded[path].get('sha256')}":
                    raise ConfigError(f"outputs/{path} changed after it was recorded: it hashes to {blob.digest}")
            registry.push(layout, manifest.digest, self.ref, tags=[tag])
        return manifest.digest


class OutputsCache:
    """Output files of Ray jobs fetched from the registry their node pushed them to, kept in an OCI layout on the
    controller's host (`layout`): a second copy of the same file downloads nothing."""

    def __init__(self, layout: Path, *, insecure: bool = False) -> None:
        self.layout = layout
        self.insecure = insecure

    def files(
        self,
        artifact: Mapping[str, object],
        paths: Sequence[str],
        recorded: Mapping[str, Mapping[str, object]],
        label: str,
    ) -> dict[str, Path]:
        """Where each of `paths` is once fetched (blobs in the layout, named by their sha256, which is the one the
        node recorded). ConfigError naming the job and the output on any failure."""
        where, digest = artifact.get("registry"), artifact.get("digest")
        if not isinstance(where, str) or not isinstance(digest, str):
            raise ConfigError(f"{label}: its outputs marker names no registry artifact")
        ref = registry.RegistryRef.parse(where, insecure=self.insecure)
        with _failures(label, f"its outputs {digest} from {ref}", pull=True):
            stored = artifact_files(registry.fetch_manifest(ref, digest), OUTPUTS_TYPE, f"{label}: outputs {digest}")
            wanted: dict[str, Descriptor] = {}
            for path in paths:
                blob = stored.get(path)
                if blob is None or blob.digest != f"sha256:{recorded[path].get('sha256')}":
                    raise ConfigError(f"{label}: outputs/{path} in {ref}@{digest} is not the file its node recorded")
                wanted[path] = blob
            registry.fetch_blobs(ref, list(wanted.values()), self.layout)
        return {path: blob_path(self.layout, blob.digest) for path, blob in wanted.items()}


def _folders(workload: Workload, project: Project, label: str, *, existing: bool = True) -> dict[str, Path]:
    """The folders the workload names, by their prefix in the inputs artifact: the model, a distillation's teacher
    and the data Volume's revision, where the local resolver finds them in `project`'s store (`existing`: each must
    be there, as on the controller's host; else where a node puts them)."""
    found: dict[str, Path] = {}
    if workload.model is not None:
        found[MODEL_PREFIX] = _model_folder(workload.model, workload, project, f"{label}: model", existing)
        for number, adapter in enumerate(workload.model.adapters):
            # Where the node's resolver looks for it (`resolve.adapter_path`): the same Volume revision's folder.
            volume = adapter.volume
            folder = project.volume_revision(workload.project, volume.name, volume.revision) / adapter.path
            if existing and not folder.is_dir():
                raise ConfigError(f"{label}: model.adapters: Volume {volume.name} has no revision {volume.revision}")
            found[f"{ADAPTER_PREFIX}{number}/"] = folder
    if workload.teacher is not None:
        found[TEACHER_PREFIX] = _model_folder(workload.teacher, workload, project, f"{label}: teacher", existing)
    if workload.data is not None:
        volume = workload.data.volume
        folder = project.volume_revision(workload.project, volume.name, volume.revision)
        if existing and not folder.is_dir():
            raise ConfigError(f"{label}: data.volume: Volume {volume.name} has no revision {volume.revision}")
        found[DATA_PREFIX] = folder
    return found


def _model_folder(model: ModelArtifact, workload: Workload, project: Project, label: str, existing: bool) -> Path:
    """A model's folder in the project's store (as the local resolver finds it)."""
    if model.uri is not None:
        if existing and not imported(project, model.uri):
            raise ConfigError(f"{label}.uri: {model.uri} is not imported into {project.files.root / 'models'}")
        return model_folder(project, model.uri)
    assert model.volume is not None
    folder = project.volume_revision(workload.project, model.volume.name, model.volume.revision)
    if existing and not folder.is_dir():
        raise ConfigError(f"{label}.volume: Volume {model.volume.name} has no revision {model.volume.revision}")
    return folder


def _install_folder(target: Path, files: Mapping[str, Descriptor], layout: Path) -> None:
    """A folder's files at `target`, whole or not at all (a folder already complete is kept: an imported model
    has its manifest, a Volume revision never changes)."""
    if (target / MANIFEST).is_file() or (target.is_dir() and MANIFEST not in files):
        return
    target.parent.mkdir(parents=True, exist_ok=True)
    partial = Path(tempfile.mkdtemp(prefix=f".{target.name}.", suffix=".partial", dir=target.parent))
    try:
        for name, blob in files.items():
            destination = partial / name
            destination.parent.mkdir(parents=True, exist_ok=True)
            shutil.copyfile(blob_path(layout, blob.digest), destination)
        if target.exists():  # left by an earlier fetch that stopped half way (no manifest): ours is whole
            shutil.rmtree(target)
        os.replace(partial, target)
    finally:
        if partial.exists():
            shutil.rmtree(partial, ignore_errors=True)


@contextlib.contextmanager
def _failures(label: str, what: str, *, pull: bool = False) -> Iterator[None]:
    """One ConfigError `label: could not push|fetch WHAT: cause` for whatever the registry or the disk said."""
    verb = "fetch" if pull else "push"
    try:
        yield
    except ConfigError:
        raise
    except NodusError as exc:
        raise ConfigError(f"{label}: could not {verb} {what}: {exc.message}", hint=exc.hint) from None
    except OSError as exc:
        raise ConfigError(f"{label}: could not {verb} {what}: {exc.strerror or exc}") from None
