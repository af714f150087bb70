"""Artifacts of plain files in an OCI layout: one uncompressed layer per file, named by its path in the artifact.

Who calls it: the Ray executor's registry channel (`nodus.reconciler.executors.ray.channel`), which moves a job's
inputs (task manifests, the model's files) to a Ray node and its outputs back through the project's registry, with
`nodus.builder.registry` pushing and pulling what this module writes and reads.

Why this shape: it is the shape ORAS gives files (an OCI image manifest with an `artifactType`, the empty config,
a layer per file titled with `org.opencontainers.image.title`), so any OCI tool can list and fetch one; and a layer
that is a file's bytes as they are has the file's own sha256 as its digest, so a registry that checks digests checks
the files, and a job's recorded output sha256 is the digest that fetches it. The manifest is canonical JSON with the
layers sorted by path and no time in it: the same files give the same digest, so a second push uploads nothing.

    manifest = write_artifact(layout, "application/vnd.nodus.job-outputs.v1", {"results.json": path})
    files = artifact_files(read_blob(layout, manifest.digest), "application/vnd.nodus.job-outputs.v1", "outputs")
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from pathlib import Path, PurePosixPath
from typing import Any, Final

from nodus.builder.oci import MANIFEST_MEDIA_TYPE, Descriptor, canonical_json, write_blob, write_file_blob
from nodus.errors import BuildError

TITLE: Final = "org.opencontainers.image.title"
FILE_MEDIA_TYPE: Final = "application/octet-stream"
EMPTY_MEDIA_TYPE: Final = "application/vnd.oci.empty.v1+json"
EMPTY_BLOB: Final = b"{}"


def check_name(name: str, what: str) -> str:
    """A file's name in an artifact: a relative POSIX path that stays inside it (no `..`, no leading `/`)."""
    path = PurePosixPath(name)
    if not name or path.is_absolute() or ".." in path.parts or path.as_posix() != name or "\\" in name:
        raise BuildError(f"{what}: {name!r} is not a relative path inside the artifact")
    return name


def write_artifact(
    layout: Path, artifact_type: str, files: Mapping[str, Path], annotations: Mapping[str, str] | None = None
) -> Descriptor:
    """Store `files` (name in the artifact -> file on this host) as one artifact in `layout`; its manifest's
    descriptor (the manifest is in the layout's blobs, untagged: tag or push it by digest)."""
    layers: list[dict[str, Any]] = []
    for name in sorted(files):
        check_name(name, f"artifact {artifact_type}")
        blob = write_file_blob(layout, files[name], FILE_MEDIA_TYPE)
        layers.append({**blob.to_json(), "annotations": {TITLE: name}})
    config = write_blob(layout, EMPTY_BLOB, EMPTY_MEDIA_TYPE)
    manifest: dict[str, Any] = {
        "schemaVersion": 2,
        "mediaType": MANIFEST_MEDIA_TYPE,
        "artifactType": artifact_type,
        "config": config.to_json(),
        "layers": layers,
    }
    if annotations:
        manifest["annotations"] = dict(sorted(annotations.items()))
    return write_blob(layout, canonical_json(manifest), MANIFEST_MEDIA_TYPE)


def artifact_files(raw: bytes, artifact_type: str, what: str) -> dict[str, Descriptor]:
    """The files of an artifact manifest (`raw`, as stored or fetched): name -> its layer's descriptor. BuildError
    naming `what` when it is not an artifact of `artifact_type`, or a layer has no safe, unique name."""
    try:
        manifest = json.loads(raw)
    except (ValueError, UnicodeDecodeError) as exc:
        raise BuildError(f"{what}: the manifest is not JSON ({exc})") from None
    if not isinstance(manifest, dict) or manifest.get("artifactType") != artifact_type:
        found = manifest.get("artifactType") if isinstance(manifest, dict) else None
        raise BuildError(f"{what}: not an artifact of type {artifact_type} (artifactType {found!r})")
    layers = manifest.get("layers")
    if not isinstance(layers, list):
        raise BuildError(f"{what}: the manifest has no layers list")
    files: dict[str, Descriptor] = {}
    for layer in layers:
        title = (layer.get("annotations") or {}).get(TITLE) if isinstance(layer, dict) else None
        digest, size = (layer.get("digest"), layer.get("size")) if isinstance(layer, dict) else (None, None)
        if (
            not isinstance(title, str)
            or not isinstance(digest, str)
            or isinstance(size, bool)
            or not isinstance(size, int)
        ):
            raise BuildError(f"{what}: a layer has no title, digest and size")
        name = check_name(title, what)
        if name in files:
            raise BuildError(f"{what}: two layers are both named {name!r}")
        files[name] = Descriptor(str(layer.get("mediaType") or FILE_MEDIA_TYPE), digest, size)
    return files


def annotations_of(raw: bytes) -> dict[str, str]:
    """The manifest's own annotations (what the artifact says about itself); {} where it has none."""
    manifest = json.loads(raw)
    found = manifest.get("annotations") if isinstance(manifest, dict) else None
    return {str(k): str(v) for k, v in found.items()} if isinstance(found, dict) else {}
