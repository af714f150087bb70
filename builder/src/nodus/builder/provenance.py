"""Build provenance: SLSA provenance v1 in an in-toto Statement v1, wrapped in DSSE, stored beside the image.

Who calls it: nodus-build's build step, which after writing an image makes its `statement`, wraps it in an
`envelope` and `attach`es it to the image in the local OCI layout, where a push carries it to the registry
by its referrers fallback tag `sha256-<image hex>.att` (registries without the referrers API still serve
it). In CI the build step also signs the statement (`nodus.builder.signing`); `nodus-build verify` reads
the statement back with `find` or from a sigstore bundle and checks its subject with `check_statement`.

Everything here is deterministic: the same BuildSpec, image digest and run details give the same canonical
bytes, so the attached artifact has the same digest on every rebuild (only the optional timestamps and
invocation id differ, and the build step leaves them out when it wants byte-identical provenance).
"""

from __future__ import annotations

import base64
import binascii
import json
import re
from collections.abc import Mapping
from datetime import datetime
from pathlib import Path
from typing import Any
from urllib.parse import quote

from nodus.builder.oci import (
    MANIFEST_MEDIA_TYPE,
    Descriptor,
    canonical_json,
    list_tags,
    read_blob,
    resolve,
    tag_manifest,
    write_blob,
)
from nodus.builder.plan import BuildSpec, ImageSource, PathSource, PipSource
from nodus.errors import BuildError

JSONObject = dict[str, Any]

STATEMENT_TYPE = "https://in-toto.io/Statement/v1"
PREDICATE_TYPE = "https://slsa.dev/provenance/v1"
BUILD_TYPE = "https://nodus.dev/nodus-build/v1"
PAYLOAD_TYPE = "application/vnd.in-toto+json"
"""The DSSE payload type of an in-toto statement."""
ENVELOPE_MEDIA_TYPE = "application/vnd.dsse.envelope.v1+json"
"""The artifact type of the attached manifest and the media type of its one layer."""
EMPTY_MEDIA_TYPE = "application/vnd.oci.empty.v1+json"
EMPTY_BLOB = b"{}"
EMPTY_DIGEST = "sha256:44136fa355b3678a1146ad16f7e8649e94fb4fc21fe77e8310c060f61caaff8a"
"""The OCI 1.1 empty descriptor: an artifact manifest has no config of its own, so it points at `{}`."""

_DIGEST = re.compile(r"sha256:([0-9a-f]{64})")
# RFC 3339 in UTC ("Z"), optionally with fractions of a second: what SLSA's Timestamp fields take.
_TIMESTAMP = re.compile(r"\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}(\.\d{1,9})?Z")
_HASH_OPTION = "--hash=sha256:"


# -- the statement --------------------------------------------------------------------------------


def statement(
    build: BuildSpec,
    *,
    image_name: str,
    image_digest: str,
    builder_id: str,
    invocation_id: str | None = None,
    started_on: str | None = None,
    finished_on: str | None = None,
    byproducts: Mapping[str, str] | None = None,
) -> JSONObject:
    """The in-toto statement saying `build` made the image `image_digest`, with SLSA provenance v1.

    `image_name` is the subject's name (the image reference or tag), `builder_id` a URI naming the builder
    that ran (the CI workflow, or a local nodus-build), `byproducts` maps names such as `manifests/test/0`
    to the `sha256:<hex>` digests of what the build also produced. Timestamps are RFC 3339 in UTC.
    """
    if not image_name.strip():
        raise BuildError("provenance: the image name is empty")
    return {
        "_type": STATEMENT_TYPE,
        "subject": [{"name": image_name, "digest": _digest_set(image_digest, "image digest")}],
        "predicateType": PREDICATE_TYPE,
        "predicate": {
            "buildDefinition": build_definition(build),
            "runDetails": run_details(
                build,
                builder_id=builder_id,
                invocation_id=invocation_id,
                started_on=started_on,
                finished_on=finished_on,
                byproducts=byproducts or {},
            ),
        },
    }


def build_definition(build: BuildSpec) -> JSONObject:
    """What was built and from what: the Environment's parameters, the build key, every pinned input."""
    return {
        "buildType": BUILD_TYPE,
        # What the Environment's author controls; a verifier compares these with the Environment it expects.
        "externalParameters": {
            "environment": build.environment,
            "version": build.version,
            "package": build.package.to_dict(),
            "loader": build.loader,
            "splits": list(build.splits),
            "seeds": list(build.seeds),
        },
        # What nodus-build decides; the key pins all of the BuildSpec, so a verifier can recompute it.
        "internalParameters": {"builderVersion": build.builder, "buildKey": build.key},
        "resolvedDependencies": resolved_dependencies(build),
    }


def resolved_dependencies(build: BuildSpec) -> list[JSONObject]:
    """The inputs the image was built from, as SLSA resource descriptors, in a fixed order."""
    dependencies = [
        {"name": "base", "uri": build.base.reference, "digest": _digest_set(build.base.digest, "base image digest")},
        _package_dependency(build),
        {"name": "requirements.txt", "digest": _digest_set(build.requirements.sha256, "requirements hash")},
    ]
    for line in build.requirements.lines:
        dependencies.extend(_requirement_dependencies(line, build.requirements.index_of(line)))
    return dependencies


def _package_dependency(build: BuildSpec) -> JSONObject:
    package = build.package
    if isinstance(package, PathSource):
        return {"name": "package", "digest": _digest_set(package.digest, "package source digest")}
    if isinstance(package, PipSource):
        uri = _pypi_purl(package.name, package.version)
        if package.index is not None:
            uri += f"?repository_url={quote(package.index, safe='')}"
        # The BuildSpec pins a pip package by version; its file hash is among the locked requirements.
        return {"name": "package", "uri": uri}
    if isinstance(package, ImageSource):
        reference, _, digest = package.reference.rpartition("@")
        return {"name": "package", "uri": reference, "digest": _digest_set(digest, "package image digest")}
    raise AssertionError(f"unknown package source {package!r}")  # the PackageSource union is closed


def _requirement_dependencies(line: str, index: str | None = None) -> list[JSONObject]:
    """One descriptor per hash of a `name==version --hash=sha256:...` line.

    `--require-hashes` accepts any of a requirement's hashes (one per wheel or sdist) and installs one of
    them, while a SLSA digest set holds a single sha256; listing each accepted file under the same purl
    lets a verifier match whichever file was installed. A package locked from a named index says so in the
    purl's `repository_url`, as the package descriptor does.
    """
    requirement, *options = line.split(" ")
    name, _, version = requirement.partition("==")
    uri = _pypi_purl(name, version)
    if index is not None:
        uri += f"?repository_url={quote(index, safe='')}"
    return [{"uri": uri, "digest": {"sha256": option.removeprefix(_HASH_OPTION)}} for option in options]


def _pypi_purl(name: str, version: str) -> str:
    """`pkg:pypi/<name>@<version>`, the name normalised as the purl spec asks (PEP 503: lower case, `-`)."""
    normalised = re.sub(r"[-_.]+", "-", name).lower()
    return f"pkg:pypi/{normalised}@{quote(version, safe='')}"


def run_details(
    build: BuildSpec,
    *,
    builder_id: str,
    invocation_id: str | None,
    started_on: str | None,
    finished_on: str | None,
    byproducts: Mapping[str, str],
) -> JSONObject:
    """Who ran the build, when (if given) and what else it produced. Empty sections are left out."""
    if not builder_id.strip():
        raise BuildError("provenance: the builder id is empty", hint="name the builder with a URI")
    details: JSONObject = {"builder": {"id": builder_id, "version": {"nodus-build": build.builder}}}
    metadata: JSONObject = {}
    if invocation_id is not None:
        metadata["invocationId"] = invocation_id
    if started_on is not None:
        metadata["startedOn"] = _check_timestamp(started_on, "startedOn")
    if finished_on is not None:
        metadata["finishedOn"] = _check_timestamp(finished_on, "finishedOn")
    if metadata:
        details["metadata"] = metadata
    if byproducts:
        details["byproducts"] = [
            {"name": name, "digest": _digest_set(digest, f"digest of byproduct {name}")}
            for name, digest in sorted(byproducts.items())
        ]
    return details


def _digest_set(digest: str, what: str) -> dict[str, str]:
    """`sha256:<hex>` as an in-toto digest set, `{"sha256": "<hex>"}`."""
    match = _DIGEST.fullmatch(digest)
    if match is None:
        raise BuildError(f"provenance: {what} {digest!r} is not a sha256 digest")
    return {"sha256": match.group(1)}


def _check_timestamp(value: str, field: str) -> str:
    if not _TIMESTAMP.fullmatch(value):
        raise BuildError(f"provenance: {field} {value!r} is not an RFC 3339 time in UTC (2024-01-31T12:00:00Z)")
    try:
        datetime.fromisoformat(value)
    except ValueError:
        raise BuildError(f"provenance: {field} {value!r} is not a valid date and time") from None
    return value


def check_statement(document: object, *, image_digest: str, where: str) -> JSONObject:
    """`document` as a SLSA provenance statement about `image_digest`; a one-line BuildError otherwise.

    `where` names what the statement was read from (a bundle file, a layout) for the error message.
    """
    if not isinstance(document, dict):
        raise BuildError(f"{where}: the payload is not a JSON object")
    if document.get("_type") != STATEMENT_TYPE:
        raise BuildError(f"{where}: the payload is not an in-toto Statement v1 (_type {document.get('_type')!r})")
    if document.get("predicateType") != PREDICATE_TYPE:
        raise BuildError(f"{where}: the statement is not SLSA provenance v1 ({document.get('predicateType')!r})")
    expected = _digest_set(image_digest, "image digest")["sha256"]
    subjects = document.get("subject")
    if not isinstance(subjects, list) or not subjects:
        raise BuildError(f"{where}: the statement has no subject")
    found = [_subject_sha256(subject) for subject in subjects]
    if expected not in found:
        named = ", ".join(f"sha256:{digest}" for digest in found if digest) or "no sha256 digest"
        raise BuildError(f"{where}: the statement is about {named}, not the image {image_digest}")
    return document


def _subject_sha256(subject: object) -> str | None:
    digest = subject.get("digest") if isinstance(subject, dict) else None
    value = digest.get("sha256") if isinstance(digest, dict) else None
    return value if isinstance(value, str) else None


# -- DSSE -----------------------------------------------------------------------------------------


def envelope(statement: Mapping[str, Any]) -> JSONObject:
    """An unsigned DSSE envelope around the statement's canonical JSON (sigstore adds the signature in CI)."""
    payload = base64.b64encode(canonical_json(statement)).decode("ascii")
    return {"payloadType": PAYLOAD_TYPE, "payload": payload, "signatures": []}


def pae(payload_type: str, payload: bytes) -> bytes:
    """DSSE v1 pre-authentication encoding: `DSSEv1 <len> <type> <len> <payload>`, the bytes a signer signs.

    Lengths count bytes (the type as UTF-8), in ASCII decimal without leading zeros.
    """
    kind = payload_type.encode("utf-8")
    return b"DSSEv1 %d %s %d %s" % (len(kind), kind, len(payload), payload)


def statement_of(envelope: object, *, where: str = "DSSE envelope") -> JSONObject:
    """The in-toto statement inside a DSSE envelope; a one-line BuildError when it holds something else."""
    if not isinstance(envelope, dict):
        raise BuildError(f"{where}: not a DSSE envelope (not a JSON object)")
    if envelope.get("payloadType") != PAYLOAD_TYPE:
        raise BuildError(f"{where}: payload type is {envelope.get('payloadType')!r}, not {PAYLOAD_TYPE}")
    payload = envelope.get("payload")
    if not isinstance(payload, str):
        raise BuildError(f"{where}: the envelope has no payload")
    try:
        raw = base64.b64decode(payload, validate=True)
    except (binascii.Error, ValueError):
        raise BuildError(f"{where}: the payload is not base64") from None
    return parse_statement(raw, where=where)


def parse_statement(raw: bytes, *, where: str) -> JSONObject:
    """A payload's bytes as an in-toto Statement v1 (any predicate); a one-line BuildError otherwise."""
    try:
        document = json.loads(raw)
    except ValueError:
        raise BuildError(f"{where}: the payload is not JSON") from None
    if not isinstance(document, dict) or document.get("_type") != STATEMENT_TYPE:
        raise BuildError(f"{where}: the payload is not an in-toto Statement v1")
    return document


# -- stored beside the image ----------------------------------------------------------------------


def attestation_tag(image_digest: str) -> str:
    """The referrers fallback tag of an image's attestation: `sha256-<hex>.att`."""
    return f"sha256-{_digest_set(image_digest, 'image digest')['sha256']}.att"


def artifact_manifest(image: Descriptor, envelope_blob: Descriptor, empty: Descriptor) -> JSONObject:
    """The OCI 1.1 artifact manifest that attaches an envelope to `image` (its `subject`).

    No `org.opencontainers.image.created` annotation: a time would make the same provenance differ.
    """
    return {
        "schemaVersion": 2,
        "mediaType": MANIFEST_MEDIA_TYPE,
        "artifactType": ENVELOPE_MEDIA_TYPE,
        "config": empty.to_json(),
        "layers": [envelope_blob.to_json()],
        "subject": image.to_json(),
    }


def attach(layout: Path, image: Descriptor, envelope: Mapping[str, Any]) -> Descriptor:
    """Store the DSSE `envelope` as an artifact whose subject is `image`, tagged `sha256-<hex>.att`.

    `image` is the image manifest's descriptor and must be in `layout`. Attaching the same envelope again
    writes nothing new and gives the same descriptor.
    """
    where = f"provenance for {image.digest}"
    # Refuse to store anything but provenance about this very image.
    check_statement(statement_of(envelope, where=where), image_digest=image.digest, where=where)
    # The subject must be there and intact, or a push would carry a link to nothing.
    if len(read_blob(layout, image.digest)) != image.size:
        raise BuildError(f"{where}: the image manifest in {layout} is not {image.size} bytes long")
    empty = write_blob(layout, EMPTY_BLOB, EMPTY_MEDIA_TYPE)
    envelope_blob = write_blob(layout, canonical_json(envelope), ENVELOPE_MEDIA_TYPE)
    manifest = write_blob(layout, canonical_json(artifact_manifest(image, envelope_blob, empty)), MANIFEST_MEDIA_TYPE)
    tag_manifest(layout, attestation_tag(image.digest), manifest)
    return manifest


def find(layout: Path, image_digest: str) -> JSONObject | None:
    """The DSSE envelope attached to `image_digest` in `layout`, or None when it has none."""
    tag = attestation_tag(image_digest)
    if tag not in list_tags(layout):
        return None
    where = f"{layout}:{tag}"
    manifest = _json_object(read_blob(layout, resolve(layout, tag).digest), where)
    if manifest.get("artifactType") != ENVELOPE_MEDIA_TYPE:
        raise BuildError(f"{where}: artifact type is {manifest.get('artifactType')!r}, not {ENVELOPE_MEDIA_TYPE}")
    subject = manifest.get("subject")
    if not isinstance(subject, dict) or subject.get("digest") != image_digest:
        raise BuildError(f"{where}: the artifact's subject is not {image_digest}")
    layers = manifest.get("layers")
    if not isinstance(layers, list) or len(layers) != 1 or not isinstance(layers[0], dict):
        raise BuildError(f"{where}: an attestation has exactly one layer, the envelope")
    document = _json_object(read_blob(layout, str(layers[0].get("digest"))), where)
    check_statement(statement_of(document, where=where), image_digest=image_digest, where=where)
    return document


def _json_object(data: bytes, where: str) -> JSONObject:
    try:
        document = json.loads(data)
    except ValueError:
        raise BuildError(f"{where}: not JSON") from None
    if not isinstance(document, dict):
        raise BuildError(f"{where}: not a JSON object")
    return document
