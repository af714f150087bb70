"""The Environment controller: an Environment is Ready once its image is in nodus.lock and in the store.

Who calls it: `nodus apply` (after writing the spec, in the first wave, before the jobs that name it) and
`nodus get`/`describe` when they refresh status. With `--build`, apply builds what is missing with
nodus-build first (the same code path as the `nodus-build` CLI).

Status it writes: `phase` (Ready, Pending, Failed), `reason` when not Ready (`ImageNotBuilt`: the version is
not in nodus.lock; `ImageMissing`: the lock names a digest the local store does not have; `BuildFailed`),
`image` (the digest), `splits` (task counts), `manifests` (`split/seed` -> digest), and `graderImage` /
`graderImageId`: the image as loaded into podman's storage, which jobs' graders run in (no network), or, where it
could not be loaded, `sandbox`: why graders of this host would run in process mode (`NoContainerRuntime`: podman
is not installed; `ImageNotLoaded`: podman refused the image, with its error), which the TrainingJob controller
says out loud or refuses (the project's `grading.sandbox: container`).
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

from nodus.builder import host_programs
from nodus.builder.lockfile import Lock, project_prefix
from nodus.builder.oci import read_image, tags_of
from nodus.builder.sandbox import load_image
from nodus.errors import BuildError
from nodus.specs.status_names import Phase, Reason

JSONObject = dict[str, Any]
Builder = Callable[[Path], tuple[bool, str]]
"""`build(spec_file) -> (ok, message)`: what `--build` runs for an Environment that is not Ready."""


def environment_status(document: JSONObject, *, lock: Lock, images: Path) -> JSONObject:
    """The status of an Environment (its normalised document) from nodus.lock and the local image store."""
    name, version = document["metadata"]["name"], document["spec"]["version"]
    entry = lock.get(name, version, document["metadata"].get("project"))
    if entry is None:
        return {
            "phase": Phase.PENDING,
            "reason": Reason.IMAGE_NOT_BUILT,
            "message": f"{name}@{version} is not in {lock.path.name}: run nodus-build, or nodus apply --build",
        }
    if not tags_of(images, entry.image):
        return {
            "phase": Phase.PENDING,
            "reason": Reason.IMAGE_MISSING,
            "message": f"image {entry.image} of {name}@{version} is not in the local store: run nodus-build",
            "image": entry.image,
        }
    status: JSONObject = {
        "phase": Phase.READY,
        "image": entry.image,
        "splits": dict(entry.splits),
        "manifests": dict(entry.manifests),
    }
    status.update(load_for_graders(images, document, tags_of(images, entry.image)[0]))
    return status


NO_CONTAINER_RUNTIME = Reason.NO_CONTAINER_RUNTIME
IMAGE_NOT_LOADED = Reason.IMAGE_NOT_LOADED
PODMAN_HINT = "Debian: apt-get install podman runc uidmap"


def load_for_graders(images: Path, document: JSONObject, tag: str) -> JSONObject:
    """Copy the image from the store into podman's storage, where the grading service runs graders from (it
    never pulls): `{graderImage, graderImageId}`; or, without podman or when podman refuses the image,
    `{sandbox: {mode: process, reason, message}}`, so the fall back to process mode is never silent. Done once:
    an image already there with the same id is kept."""
    if host_programs.which("podman") is None:
        message = f"podman is not installed ({PODMAN_HINT})"
        return {"sandbox": {"mode": "process", "reason": NO_CONTAINER_RUNTIME, "message": message}}
    project = document["metadata"].get("project")
    # Another project's Environment (the catalog's nodus/gsm8k) is a repository of its own: never the same name as
    # the default project's gsm8k, whose image podman would otherwise swap under a running grader.
    repository = project_prefix(project, "/") + document["metadata"]["name"]
    name = f"localhost/nodus-env/{repository}:{document['spec']['version'].replace('+', '_')}"
    config = read_image(images, tag).ref.config_digest
    try:
        load_image(images, tag, name, config)
    except BuildError as exc:
        message = exc.message
        return {"sandbox": {"mode": "process", "reason": IMAGE_NOT_LOADED, "message": message}}
    return {"graderImage": name, "graderImageId": config}


def reconcile_environment(
    document: JSONObject, *, spec_file: Path | None, lock_path: Path, images: Path, build: Builder | None
) -> JSONObject:
    """Status after building when asked (`build`) and needed; a failed build is `Failed`/`BuildFailed`."""
    status = environment_status(document, lock=Lock.load(lock_path), images=images)
    if status["phase"] == Phase.READY or build is None or spec_file is None:
        return status
    ok, message = build(spec_file)
    if not ok:
        return {"phase": Phase.FAILED, "reason": Reason.BUILD_FAILED, "message": message}
    return environment_status(document, lock=Lock.load(lock_path), images=images)
