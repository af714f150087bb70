"""The local image store: an OCI image layout (one folder, many tags) written byte for byte the same twice.

Who calls it: nodus-build's build step, which writes each layer with `add_layer` and then the image with
`write_image`; and whatever runs or pushes the result (podman, skopeo and umoci read `oci:<layout>:<tag>`).
The reading half (`list_tags`, `resolve`, `read_image`, `read_config`) gives the build step its base image.

Layout on disk (image-spec v1.0): `oci-layout`, `index.json` (one manifest per tag, the tag in the
`org.opencontainers.image.ref.name` annotation) and `blobs/sha256/<hex>`. Blobs are content-addressed, so
images share the layers they have in common and adding one image never touches another's blobs. Every JSON
document is canonical (sorted keys, no spaces) and every timestamp is `SOURCE_DATE_EPOCH`, so the same
inputs give the same manifest digest.
"""

from __future__ import annotations

import contextlib
import copy
import fcntl
import hashlib
import json
import os
import re
import shutil
import tempfile
import time
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, BinaryIO

from nodus.builder.layers import LAYER_MEDIA_TYPE, Entry, Layer, source_date_epoch, write_layer
from nodus.errors import BuildError, ConfigError

JSONObject = dict[str, Any]

LAYOUT_VERSION = "1.0.0"
INDEX_MEDIA_TYPE = "application/vnd.oci.image.index.v1+json"
MANIFEST_MEDIA_TYPE = "application/vnd.oci.image.manifest.v1+json"
CONFIG_MEDIA_TYPE = "application/vnd.oci.image.config.v1+json"
REF_NAME = "org.opencontainers.image.ref.name"
BASE_DIGEST = "org.opencontainers.image.base.digest"
ARCHITECTURE, OS = "amd64", "linux"

# A base image copied from a registry by skopeo may keep Docker's media types. The blobs are the same
# bytes; an OCI manifest must name them with OCI types.
_DOCKER_MANIFEST = "application/vnd.docker.distribution.manifest.v2+json"
_LAYER_TYPES = {
    LAYER_MEDIA_TYPE: LAYER_MEDIA_TYPE,
    "application/vnd.oci.image.layer.v1.tar": "application/vnd.oci.image.layer.v1.tar",
    "application/vnd.docker.image.rootfs.diff.tar.gzip": LAYER_MEDIA_TYPE,
}
_DIGEST = re.compile(r"sha256:[0-9a-f]{64}")
# Docker's tag grammar: what skopeo, podman and registries all accept after the colon.
_TAG = re.compile(r"[A-Za-z0-9_][A-Za-z0-9_.-]{0,127}")


@dataclass(frozen=True)
class Descriptor:
    """What points at a blob: its media type, digest and size."""

    media_type: str
    digest: str
    size: int

    def to_json(self) -> JSONObject:
        return {"mediaType": self.media_type, "digest": self.digest, "size": self.size}


@dataclass(frozen=True)
class ImageRef:
    """An image in a layout: where, which tag, and the digests that pin it."""

    layout: Path
    tag: str
    manifest_digest: str
    config_digest: str

    @property
    def transport(self) -> str:
        """The name skopeo and podman take: `oci:<layout>:<tag>`."""
        return f"oci:{self.layout}:{self.tag}"


@dataclass(frozen=True)
class ImageConfig:
    """The runtime settings of an image. None keeps the base image's value; an empty value clears it."""

    env: Mapping[str, str] = field(default_factory=dict)
    entrypoint: Sequence[str] | None = None
    cmd: Sequence[str] | None = None
    working_dir: str | None = None
    user: str | None = None
    labels: Mapping[str, str] = field(default_factory=dict)


@dataclass(frozen=True)
class NewLayer:
    """A layer written to the layout and the history line that says what made it."""

    layer: Layer
    created_by: str


@dataclass(frozen=True)
class Image:
    """An image read back from a layout: its reference, manifest, config and layers (bottom first)."""

    ref: ImageRef
    manifest: JSONObject
    config: JSONObject
    layers: tuple[Layer, ...]


def canonical_json(document: object) -> bytes:
    """The one serialisation nodus hashes: sorted keys, no spaces, ASCII."""
    return json.dumps(document, sort_keys=True, separators=(",", ":")).encode()


def created_timestamp(epoch: int) -> str:
    """RFC 3339 in UTC with whole seconds: `1970-01-01T00:00:00Z` for epoch 0."""
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(epoch))


def sha256_digest(data: bytes) -> str:
    return f"sha256:{hashlib.sha256(data).hexdigest()}"


def check_tag(tag: str) -> str:
    if not _TAG.fullmatch(tag):
        raise ConfigError(f"image tag {tag!r} is not valid", hint="use letters, digits, '_', '.' and '-' (max 128)")
    return tag


def blob_path(layout: Path, digest: str) -> Path:
    """Where a blob lives; refuses anything but a sha256 digest (index.json is read from disk)."""
    if not _DIGEST.fullmatch(digest):
        raise BuildError(f"{digest!r} is not a sha256 digest (in OCI layout {layout})")
    return layout / "blobs" / "sha256" / digest.removeprefix("sha256:")


# -- writing --------------------------------------------------------------------------------------


def init_layout(layout: Path) -> None:
    """Make `layout` an OCI image layout if it is not one yet (an existing one is kept as it is)."""
    marker = layout / "oci-layout"
    if marker.exists():
        version = _object(_load_json(marker.read_bytes(), marker), str(marker)).get("imageLayoutVersion")
        if version != LAYOUT_VERSION:
            raise BuildError(f"{layout} is an OCI layout of version {version!r}; nodus writes {LAYOUT_VERSION}")
        return
    for folder in (layout, layout / "blobs", layout / "blobs" / "sha256"):
        folder.mkdir(mode=0o700, parents=True, exist_ok=True)  # its owner's (and root's, who runs podman) only
    _write_atomic(layout, marker, canonical_json({"imageLayoutVersion": LAYOUT_VERSION}))


def write_blob(layout: Path, data: bytes, media_type: str) -> Descriptor:
    """Store `data` under its digest (a no-op when the layout has it already)."""
    init_layout(layout)
    descriptor = Descriptor(media_type, sha256_digest(data), len(data))
    target = blob_path(layout, descriptor.digest)
    if not target.exists():
        _write_atomic(layout, target, data)
    return descriptor


def write_file_blob(layout: Path, source: Path, media_type: str) -> Descriptor:
    """Store the bytes of the file `source` as a blob, streamed and hashed on the way (a no-op when the layout has
    that blob already): a plain file travelling as an artifact's layer keeps its own sha256 as its digest."""
    init_layout(layout)
    hasher, size = hashlib.sha256(), 0
    with _temporary(layout) as (handle, temporary), source.open("rb") as data:
        for chunk in iter(lambda: data.read(1 << 20), b""):
            hasher.update(chunk)
            size += len(chunk)
            handle.write(chunk)
        descriptor = Descriptor(media_type, f"sha256:{hasher.hexdigest()}", size)
        target = blob_path(layout, descriptor.digest)
        if not target.exists():
            _publish(handle, temporary, target)
    return descriptor


def add_layer(layout: Path, entries: Mapping[str, Entry], *, epoch: int | None = None) -> Layer:
    """Write the layer of `entries` straight into the layout's blobs (streamed, never whole in memory)."""
    init_layout(layout)
    with _temporary(layout) as (handle, temporary):
        layer = write_layer(entries, handle, epoch=epoch)
        _publish(handle, temporary, blob_path(layout, layer.digest))
    return layer


def write_image(
    layout: Path,
    tag: str,
    layers: Sequence[NewLayer],
    *,
    config: ImageConfig | None = None,
    base: Image | None = None,
    annotations: Mapping[str, str] | None = None,
    epoch: int | None = None,
) -> ImageRef:
    """Write the config and manifest of `base` + `layers` and point `tag` at it; other tags stay.

    The new layers must be in the layout already (`add_layer`); a base image's layers are copied in from
    its own layout when that is another one.
    """
    check_tag(tag)
    init_layout(layout)
    created = created_timestamp(source_date_epoch() if epoch is None else epoch)
    for new in layers:
        _check_blob(layout, new.layer.digest, new.layer.size)
    if base is not None:
        for layer in base.layers:
            _import_blob(layout, base.ref.layout, layer)
    config_json = image_config(config or ImageConfig(), layers, base=base, created=created)
    config_descriptor = write_blob(layout, canonical_json(config_json), CONFIG_MEDIA_TYPE)
    manifest_json = image_manifest(config_descriptor, layers, base=base, annotations=annotations or {})
    manifest_descriptor = write_blob(layout, canonical_json(manifest_json), MANIFEST_MEDIA_TYPE)
    _set_tag(layout, tag, manifest_descriptor)
    return ImageRef(layout.absolute(), tag, manifest_descriptor.digest, config_descriptor.digest)


def image_config(config: ImageConfig, layers: Sequence[NewLayer], *, base: Image | None, created: str) -> JSONObject:
    """The image config: the base's, with our runtime settings on top and our layers appended."""
    document: JSONObject = copy.deepcopy(base.config) if base else {}
    if base and (document.get("architecture"), document.get("os")) != (ARCHITECTURE, OS):
        platform = f"{document.get('os')}/{document.get('architecture')}"
        raise BuildError(f"base image {base.ref.tag} is {platform}; nodus builds {OS}/{ARCHITECTURE}")
    document.update(architecture=ARCHITECTURE, os=OS, created=created)
    document["config"] = runtime_config(_object(document.get("config") or {}, "base config"), config)
    base_layers = base.layers if base else ()
    document["rootfs"] = {"type": "layers", "diff_ids": [layer.diff_id for layer in (*base_layers, *_new(layers))]}
    history = _base_history(document, len(base_layers), created)
    history += [{"created": created, "created_by": new.created_by} for new in layers]
    document["history"] = history
    return document


def runtime_config(base: JSONObject, config: ImageConfig) -> JSONObject:
    """The `config` section: Env merged by name (sorted), Labels merged, the rest replaced when given."""
    out = dict(base)
    env = dict(_split_env(item) for item in _strings(out.get("Env") or [], "base Env"))
    env.update(config.env)
    _put(out, "Env", [f"{name}={value}" for name, value in sorted(env.items())])
    if config.entrypoint is not None:
        _put(out, "Entrypoint", list(config.entrypoint))
        if config.cmd is None:
            # Docker's rule: a new entrypoint drops the base's Cmd, which were arguments for the old one.
            out.pop("Cmd", None)
    if config.cmd is not None:
        _put(out, "Cmd", list(config.cmd))
    if config.working_dir is not None:
        _put(out, "WorkingDir", config.working_dir)
    if config.user is not None:
        _put(out, "User", config.user)
    labels = {**_object(out.get("Labels") or {}, "base Labels"), **config.labels}
    _put(out, "Labels", labels)
    return out


def image_manifest(
    config: Descriptor, layers: Sequence[NewLayer], *, base: Image | None, annotations: Mapping[str, str]
) -> JSONObject:
    """The manifest: config, the base's layers then ours, and annotations (the base's digest among them)."""
    descriptors = [_layer_descriptor(layer) for layer in (*(base.layers if base else ()), *_new(layers))]
    notes = dict(annotations)
    if base is not None:
        notes.setdefault(BASE_DIGEST, base.ref.manifest_digest)
    manifest: JSONObject = {
        "schemaVersion": 2,
        "mediaType": MANIFEST_MEDIA_TYPE,
        "config": config.to_json(),
        "layers": descriptors,
    }
    if notes:
        manifest["annotations"] = notes
    return manifest


def _new(layers: Sequence[NewLayer]) -> list[Layer]:
    return [new.layer for new in layers]


def _layer_descriptor(layer: Layer) -> JSONObject:
    media_type = _LAYER_TYPES.get(layer.media_type)
    if media_type is None:
        raise BuildError(f"layer {layer.digest} has media type {layer.media_type}, which nodus cannot stack on")
    return Descriptor(media_type, layer.digest, layer.size).to_json()


def _base_history(config: JSONObject, base_layers: int, created: str) -> list[JSONObject]:
    """The base's history, padded so that its non-empty entries match its layers (some tools check)."""
    history = [_object(item, "base history entry") for item in config.get("history") or []]
    missing = base_layers - sum(1 for item in history if not item.get("empty_layer"))
    history += [{"created": created, "created_by": "base image layer"} for _ in range(max(0, missing))]
    return history


def _split_env(item: str) -> tuple[str, str]:
    name, _, value = item.partition("=")
    return name, value


def _put(section: JSONObject, key: str, value: object) -> None:
    """Set `key`, or drop it when the value is empty (an empty list or string means "unset")."""
    if value:
        section[key] = value
    else:
        section.pop(key, None)


def _set_tag(layout: Path, tag: str, manifest: Descriptor) -> None:
    """Point `tag` at `manifest` in index.json under a lock, keeping every other entry."""
    with _locked(layout):
        index = _read_index(layout)
        entries = [entry for entry in _manifest_entries(index, layout) if _ref_name(entry) != tag]
        entries.append({**manifest.to_json(), "annotations": {REF_NAME: tag}})
        # Sorted, so the same set of tags gives the same index.json whatever order they were added in.
        entries.sort(key=lambda entry: (_ref_name(entry) or "", str(entry.get("digest"))))
        index["manifests"] = entries
        _write_atomic(layout, layout / "index.json", canonical_json(index))


def _check_blob(layout: Path, digest: str, size: int) -> None:
    path = blob_path(layout, digest)
    if not path.is_file():
        raise BuildError(f"layer {digest} is not in {layout}", hint="write layers with nodus.builder.oci.add_layer")
    if path.stat().st_size != size:
        raise BuildError(f"blob {digest} in {layout} has {path.stat().st_size} bytes, not {size}")


def _import_blob(layout: Path, source_layout: Path, layer: Layer) -> None:
    """Make a base layer's blob present here: a hard link when possible (same disk), else a copy."""
    target = blob_path(layout, layer.digest)
    if target.exists():
        return
    source = blob_path(source_layout, layer.digest)
    _check_blob(source_layout, layer.digest, layer.size)
    try:
        os.link(source, target)  # creating a link is atomic: no reader sees a partial blob
    except FileExistsError:
        return
    except OSError:  # another file system, or links not allowed there
        with _temporary(layout) as (handle, temporary), source.open("rb") as blob:
            shutil.copyfileobj(blob, handle, 1 << 20)
            _publish(handle, temporary, target)


@contextlib.contextmanager
def _temporary(layout: Path) -> Iterator[tuple[BinaryIO, Path]]:
    """A temporary file inside the layout (so a rename publishes it atomically), removed if left over."""
    fd, name = tempfile.mkstemp(prefix=".nodus-", dir=layout)
    path = Path(name)
    handle = os.fdopen(fd, "wb")
    try:
        yield handle, path
    finally:
        handle.close()
        path.unlink(missing_ok=True)


def _write_atomic(layout: Path, target: Path, data: bytes) -> None:
    """Readers see the old file or the new one, never half of one."""
    with _temporary(layout) as (handle, temporary):
        handle.write(data)
        _publish(handle, temporary, target)


def _publish(handle: BinaryIO, temporary: Path, target: Path) -> None:
    """Flush the temporary file to disk and rename it to `target`. It stays 0600, as mkstemp made it: blobs hold
    Environment packages with their answers, and podman reads them as their owner (or as root)."""
    handle.flush()
    os.fsync(handle.fileno())
    handle.close()
    os.replace(temporary, target)


@contextlib.contextmanager
def _locked(layout: Path) -> Iterator[None]:
    """An exclusive lock on the layout folder itself: no lock file for other tools to trip over."""
    fd = os.open(layout, os.O_RDONLY | os.O_DIRECTORY)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        yield
    finally:
        os.close(fd)


# -- reading --------------------------------------------------------------------------------------


def list_tags(layout: Path) -> list[str]:
    """The tags in the layout, sorted (an empty list for a folder that is no layout yet)."""
    if not (layout / "index.json").exists():
        return []
    names = (_ref_name(entry) for entry in _manifest_entries(_read_index(layout), layout))
    return sorted(name for name in names if name)


def resolve(layout: Path, tag: str) -> Descriptor:
    """The manifest descriptor `tag` names."""
    for entry in _manifest_entries(_read_index(layout), layout):
        if _ref_name(entry) == tag:
            media_type = str(entry.get("mediaType"))
            if media_type not in (MANIFEST_MEDIA_TYPE, _DOCKER_MANIFEST):
                raise BuildError(f"{tag} in {layout} is a {media_type}; nodus reads single-platform images")
            return Descriptor(media_type, str(entry.get("digest")), int(entry.get("size", -1)))
    known = ", ".join(list_tags(layout)) or "none"
    raise ConfigError(f"no image tagged {tag!r} in {layout}", hint=f"tags there: {known}")


def read_image(layout: Path, tag: str) -> Image:
    """Manifest, config and layers of `tag`; the JSON blobs are checked against their digests."""
    descriptor = resolve(layout, tag)
    manifest = _object(_load_json(read_blob(layout, descriptor.digest), layout), "manifest")
    config_ref = _object(manifest.get("config"), "manifest config")
    config_digest = str(config_ref.get("digest"))
    config = _object(_load_json(read_blob(layout, config_digest), layout), "config")
    rootfs = _object(config.get("rootfs") or {}, "config rootfs")
    diff_ids = _strings(rootfs.get("diff_ids") or [], "rootfs diff_ids")
    blobs = [_object(item, "manifest layer") for item in manifest.get("layers") or []]
    if len(blobs) != len(diff_ids):
        raise BuildError(f"{tag} in {layout}: {len(blobs)} layers but {len(diff_ids)} diff_ids")
    layers = tuple(
        Layer(diff_id, str(blob.get("digest")), int(blob.get("size", -1)), str(blob.get("mediaType")))
        for blob, diff_id in zip(blobs, diff_ids, strict=True)
    )
    ref = ImageRef(layout.absolute(), tag, descriptor.digest, config_digest)
    return Image(ref, manifest, config, layers)


def read_config(layout: Path, tag: str) -> JSONObject:
    """The image config of `tag` (Env, Entrypoint, rootfs, history...)."""
    return read_image(layout, tag).config


def read_blob(layout: Path, digest: str) -> bytes:
    """A blob's bytes, refused when they do not hash to their name."""
    path = blob_path(layout, digest)
    try:
        data = path.read_bytes()
    except FileNotFoundError:
        raise BuildError(f"blob {digest} is missing from {layout}") from None
    if sha256_digest(data) != digest:
        raise BuildError(f"blob {digest} in {layout} is corrupt (its bytes hash to something else)")
    return data


def _read_index(layout: Path) -> JSONObject:
    path = layout / "index.json"
    if not path.exists():
        return {"schemaVersion": 2, "mediaType": INDEX_MEDIA_TYPE, "manifests": []}
    return _object(_load_json(path.read_bytes(), path), str(path))


def _manifest_entries(index: JSONObject, layout: Path) -> list[JSONObject]:
    return [_object(item, f"{layout}/index.json entry") for item in index.get("manifests") or []]


def _ref_name(entry: JSONObject) -> str | None:
    annotations = entry.get("annotations")
    name = annotations.get(REF_NAME) if isinstance(annotations, dict) else None
    return name if isinstance(name, str) else None


def _load_json(data: bytes, where: object) -> object:
    try:
        return json.loads(data)
    except ValueError as exc:
        raise BuildError(f"{where}: not JSON ({exc})") from exc


def _object(value: object, what: str) -> JSONObject:
    if not isinstance(value, dict):
        raise BuildError(f"{what} is not a JSON object")
    return value


def _strings(value: object, what: str) -> list[str]:
    if not isinstance(value, list) or not all(isinstance(item, str) for item in value):
        raise BuildError(f"{what} is not a list of strings")
    return list(value)


def tag_manifest(layout: Path, tag: str, descriptor: Descriptor) -> None:
    """Point `tag` at the manifest `descriptor` names, which must be in the layout already.

    For manifests written outside `write_image`: an artifact attached to an image (its provenance, under the
    referrers fallback tag `sha256-<hex>.att`) or a manifest copied from a registry. Other tags stay.
    """
    check_tag(tag)
    # A tag must never name a blob the layout lacks: skopeo and podman would fail on it much later.
    path = blob_path(layout, descriptor.digest)
    if not path.is_file() or path.stat().st_size != descriptor.size:
        raise BuildError(f"cannot tag {tag}: manifest {descriptor.digest} ({descriptor.size} bytes) is not in {layout}")
    _set_tag(layout, tag, descriptor)


# -- for the registry client (nodus.builder.registry) ----------------------------------------------


def write_blob_chunks(layout: Path, chunks: Iterator[bytes], expected: Descriptor, *, source: str) -> None:
    """Store a blob that arrives in pieces (a download) without holding it whole in memory.

    Bytes that do not hash to `expected.digest`, or are not `expected.size` long, are never stored; the
    error names `source` (where they came from). Stops reading as soon as there are too many bytes.
    """
    init_layout(layout)
    target = blob_path(layout, expected.digest)
    hasher, size = hashlib.sha256(), 0
    with _temporary(layout) as (handle, temporary):
        for chunk in chunks:
            size += len(chunk)
            if size > expected.size:
                raise BuildError(f"blob {expected.digest} from {source} is longer than its {expected.size} bytes")
            hasher.update(chunk)
            handle.write(chunk)
        got = f"sha256:{hasher.hexdigest()}"
        if size != expected.size or got != expected.digest:
            raise BuildError(
                f"blob {expected.digest} from {source} does not match: {size} bytes hashing to {got}, "
                f"expected {expected.size} bytes"
            )
        _publish(handle, temporary, target)


# -- for the build step (nodus.builder.build) -------------------------------------------------------


def remove_tag(layout: Path, tag: str) -> None:
    """Drop `tag` from index.json (its blobs stay: other tags may share them). A missing tag is no error."""
    with _locked(layout):
        index = _read_index(layout)
        entries = [entry for entry in _manifest_entries(index, layout) if _ref_name(entry) != tag]
        index["manifests"] = entries
        _write_atomic(layout, layout / "index.json", canonical_json(index))


def tagged(layout: Path, tag: str) -> str | None:
    """The manifest digest `tag` names in the layout, or None (no layout, no such tag)."""
    if not (layout / "index.json").exists():
        return None
    for entry in _manifest_entries(_read_index(layout), layout):
        if _ref_name(entry) == tag:
            return str(entry.get("digest"))
    return None


def tags_of(layout: Path, digest: str) -> list[str]:
    """Every tag in the layout that names the manifest `digest`, sorted."""
    if not (layout / "index.json").exists():
        return []
    entries = _manifest_entries(_read_index(layout), layout)
    return sorted(name for entry in entries if entry.get("digest") == digest and (name := _ref_name(entry)))
