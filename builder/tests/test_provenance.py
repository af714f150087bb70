"""Provenance: the SLSA v1 statement of a BuildSpec, its DSSE envelope, and the artifact attached in the layout."""

from __future__ import annotations

import base64
import hashlib
import json
import subprocess
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from nodus.builder.layers import Entry
from nodus.builder.oci import (
    MANIFEST_MEDIA_TYPE,
    REF_NAME,
    Descriptor,
    NewLayer,
    add_layer,
    canonical_json,
    list_tags,
    read_blob,
    resolve,
    write_image,
)
from nodus.builder.plan import BaseImage, BuildSpec, LockedRequirements, plan
from nodus.builder.provenance import (
    BUILD_TYPE,
    EMPTY_DIGEST,
    ENVELOPE_MEDIA_TYPE,
    PAYLOAD_TYPE,
    PREDICATE_TYPE,
    STATEMENT_TYPE,
    attach,
    attestation_tag,
    envelope,
    find,
    pae,
    statement,
    statement_of,
)
from nodus.errors import BuildError
from nodus.specs.environment import Environment

MakeEnvironment = Callable[..., Environment]
Sample = Callable[..., dict[str, Entry]]
IMAGE_DIGEST = "sha256:" + "5a" * 32
SOURCE = "sha256:" + "ef" * 32
BUILDER_ID = "https://github.com/example/nodus/.github/workflows/build.yml@refs/heads/main"
SPEC_DIR = Path("/specs/demo")


@pytest.fixture
def make_build(make_environment: MakeEnvironment, golden_inputs: dict[str, Any]) -> Callable[..., BuildSpec]:
    """`make_build(package={"path": "."})`: the plan of a demo Environment from the golden inputs."""

    def make(package: dict[str, Any] | None = None) -> BuildSpec:
        return plan(
            make_environment(package),
            spec_dir=SPEC_DIR,
            base=BaseImage(golden_inputs["base"]["reference"], golden_inputs["base"]["digest"]),
            requirements=LockedRequirements.of(golden_inputs["requirements"]),
            builder_version=golden_inputs["builder"],
            sources={SPEC_DIR: SOURCE},
            seeds=[0, 1],
        )

    return make


@pytest.fixture
def build_spec(make_build: Callable[..., BuildSpec]) -> BuildSpec:
    return make_build()


def make_statement(build: BuildSpec, **overrides: Any) -> dict[str, Any]:
    arguments: dict[str, Any] = {
        "image_name": "oci:layout:env-demo-1.0.0",
        "image_digest": IMAGE_DIGEST,
        "builder_id": BUILDER_ID,
        "invocation_id": "https://github.com/example/nodus/actions/runs/1/attempts/1",
        "started_on": "2024-01-31T12:00:00Z",
        "finished_on": "2024-01-31T12:03:07.25Z",
        "byproducts": {"manifests/train/0": "sha256:" + "01" * 32, "manifests/test/0": "sha256:" + "02" * 32},
    }
    arguments.update(overrides)
    return statement(build, **arguments)


# The statement ------------------------------------------------------------------------------------------


def test_statement_is_slsa_v1_provenance_about_the_image(build_spec: BuildSpec) -> None:
    document = make_statement(build_spec)
    assert document["_type"] == STATEMENT_TYPE == "https://in-toto.io/Statement/v1"
    assert document["predicateType"] == PREDICATE_TYPE == "https://slsa.dev/provenance/v1"
    assert document["subject"] == [{"name": "oci:layout:env-demo-1.0.0", "digest": {"sha256": "5a" * 32}}]
    definition = document["predicate"]["buildDefinition"]
    assert definition["buildType"] == BUILD_TYPE
    assert definition["externalParameters"] == {
        "environment": "demo",
        "version": "1.0.0",
        "package": {"kind": "path", "digest": SOURCE},
        "loader": build_spec.loader,
        "splits": ["train", "test"],
        "seeds": [0, 1],
    }
    assert definition["internalParameters"] == {"builderVersion": "0.0.0-golden", "buildKey": build_spec.key}
    run = document["predicate"]["runDetails"]
    assert run["builder"] == {"id": BUILDER_ID, "version": {"nodus-build": "0.0.0-golden"}}
    assert run["metadata"] == {
        "invocationId": "https://github.com/example/nodus/actions/runs/1/attempts/1",
        "startedOn": "2024-01-31T12:00:00Z",
        "finishedOn": "2024-01-31T12:03:07.25Z",
    }
    # Sorted by name, digests as in-toto digest sets.
    assert run["byproducts"] == [
        {"name": "manifests/test/0", "digest": {"sha256": "02" * 32}},
        {"name": "manifests/train/0", "digest": {"sha256": "01" * 32}},
    ]


def test_resolved_dependencies_pin_base_package_and_every_locked_requirement(build_spec: BuildSpec) -> None:
    dependencies = make_statement(build_spec)["predicate"]["buildDefinition"]["resolvedDependencies"]
    assert dependencies[0] == {
        "name": "base",
        "uri": "oci:golden-layout:env-base-golden",
        "digest": {"sha256": "0" * 63 + "1"},
    }
    assert {"name": "package", "digest": {"sha256": "ef" * 32}} in dependencies
    assert {"name": "requirements.txt", "digest": {"sha256": build_spec.requirements.sha256[7:]}} in dependencies
    pinned = {
        (item["uri"], item["digest"]["sha256"]) for item in dependencies if item.get("uri", "").startswith("pkg:")
    }
    # Every hash of every locked line, under its purl: datasets has two accepted files, numpy one.
    assert pinned == {
        ("pkg:pypi/numpy@2.2.6", "1" * 64),
        ("pkg:pypi/datasets@3.6.0", "2" * 64),
        ("pkg:pypi/datasets@3.6.0", "3" * 64),
    }
    for line in build_spec.requirements.lines:
        name, version = line.split(" ")[0].split("==")
        hashes = {option.removeprefix("--hash=sha256:") for option in line.split(" ")[1:]}
        assert hashes <= {digest for uri, digest in pinned if uri == f"pkg:pypi/{name}@{version}"}, line
    # Every descriptor is a SLSA ResourceDescriptor: a uri or a name, digests as sha256 hex.
    for item in dependencies:
        assert "uri" in item or "name" in item
        for value in item.get("digest", {}).values():
            assert len(value) == 64 and int(value, 16) >= 0


def test_pip_and_image_packages_are_resolved_dependencies(make_build: Callable[..., BuildSpec]) -> None:
    pip = make_build({"pip": {"name": "My_Env.Pkg", "version": "1.2.0+local", "index": "https://pypi.example/simple"}})
    dependencies = make_statement(pip)["predicate"]["buildDefinition"]["resolvedDependencies"]
    # purl: the name normalised (PEP 503), `+` and the index URL percent-encoded.
    assert {
        "name": "package",
        "uri": "pkg:pypi/my-env-pkg@1.2.0%2Blocal?repository_url=https%3A%2F%2Fpypi.example%2Fsimple",
    } in dependencies
    image = make_build({"image": "registry.example/graders/demo@sha256:" + "9c" * 32})
    dependencies = make_statement(image)["predicate"]["buildDefinition"]["resolvedDependencies"]
    assert {"name": "package", "uri": "registry.example/graders/demo", "digest": {"sha256": "9c" * 32}} in dependencies


def test_statement_is_deterministic_and_optional_details_are_left_out(build_spec: BuildSpec) -> None:
    assert canonical_json(make_statement(build_spec)) == canonical_json(make_statement(build_spec))
    bare = make_statement(build_spec, invocation_id=None, started_on=None, finished_on=None, byproducts=None)
    assert set(bare["predicate"]["runDetails"]) == {"builder"}
    assert canonical_json(bare) != canonical_json(make_statement(build_spec))
    other = make_statement(build_spec, image_digest="sha256:" + "5b" * 32)
    assert other["subject"][0]["digest"] == {"sha256": "5b" * 32}


@pytest.mark.parametrize(
    ("overrides", "message"),
    [
        ({"image_digest": "sha256:XYZ"}, "image digest 'sha256:XYZ' is not a sha256 digest"),
        ({"image_digest": "5a" * 32}, "is not a sha256 digest"),
        ({"started_on": "2024-01-31 12:00:00"}, "startedOn '2024-01-31 12:00:00' is not an RFC 3339 time in UTC"),
        ({"finished_on": "2024-01-31T12:00:00+01:00"}, "finishedOn"),
        ({"started_on": "2024-02-30T12:00:00Z"}, "is not a valid date and time"),
        ({"byproducts": {"manifests/test/0": "abc"}}, "digest of byproduct manifests/test/0 'abc'"),
        ({"builder_id": " "}, "the builder id is empty"),
        ({"image_name": ""}, "the image name is empty"),
    ],
)
def test_bad_statement_arguments_are_one_line_errors(
    build_spec: BuildSpec, overrides: dict[str, Any], message: str
) -> None:
    with pytest.raises(BuildError, match="provenance: ") as error:
        make_statement(build_spec, **overrides)
    assert message in error.value.message and "\n" not in error.value.message


# DSSE ---------------------------------------------------------------------------------------------------


def test_pae_matches_the_dsse_spec_example() -> None:
    # The example of the DSSE v1 protocol: lengths in bytes, ASCII decimal, single spaces.
    assert pae("http://example.com/HelloWorld", b"hello world") == (
        b"DSSEv1 29 http://example.com/HelloWorld 11 hello world"
    )
    assert pae("", b"") == b"DSSEv1 0  0 "
    # Lengths count UTF-8 bytes, not characters.
    assert pae("t\u00e9", b"\xff") == b"DSSEv1 3 t\xc3\xa9 1 \xff"


def test_envelope_round_trip(build_spec: BuildSpec) -> None:
    document = make_statement(build_spec)
    wrapped = envelope(document)
    assert wrapped["payloadType"] == PAYLOAD_TYPE == "application/vnd.in-toto+json"
    assert wrapped["signatures"] == []
    # The payload is exactly the statement's canonical JSON: what a signer signs and a verifier hashes.
    assert base64.b64decode(wrapped["payload"]) == canonical_json(document)
    assert statement_of(wrapped) == document
    assert statement_of(json.loads(json.dumps(wrapped))) == document


@pytest.mark.parametrize(
    ("wrapped", "message"),
    [
        ([], "not a DSSE envelope"),
        ({"payloadType": "text/plain", "payload": ""}, "payload type is 'text/plain'"),
        ({"payloadType": PAYLOAD_TYPE}, "has no payload"),
        ({"payloadType": PAYLOAD_TYPE, "payload": "not base64!"}, "not base64"),
        ({"payloadType": PAYLOAD_TYPE, "payload": base64.b64encode(b"{").decode()}, "not JSON"),
        ({"payloadType": PAYLOAD_TYPE, "payload": base64.b64encode(b'{"_type":"x"}').decode()}, "not an in-toto"),
    ],
)
def test_statement_of_refuses_what_is_not_an_in_toto_envelope(wrapped: object, message: str) -> None:
    with pytest.raises(BuildError, match=message) as error:
        statement_of(wrapped, where="bundle.json")
    assert error.value.message.startswith("bundle.json: ")


# Attached beside the image --------------------------------------------------------------------------------


@pytest.fixture
def image(tmp_path: Path, sample_entries: Sample) -> tuple[Path, Descriptor]:
    """A layout with one image in it, and that image's manifest descriptor."""
    layout = tmp_path / "layout"
    layer = add_layer(layout, sample_entries(), epoch=0)
    ref = write_image(layout, "env-demo-1.0.0", [NewLayer(layer, "demo files")], epoch=0)
    return layout, resolve(layout, ref.tag)


def test_attach_stores_an_oci_artifact_whose_subject_is_the_image(
    image: tuple[Path, Descriptor], build_spec: BuildSpec
) -> None:
    layout, subject = image
    wrapped = envelope(make_statement(build_spec, image_digest=subject.digest))
    descriptor = attach(layout, subject, wrapped)

    raw = read_blob(layout, descriptor.digest)
    assert descriptor == Descriptor(MANIFEST_MEDIA_TYPE, "sha256:" + hashlib.sha256(raw).hexdigest(), len(raw))
    manifest = json.loads(raw)
    assert raw == canonical_json(manifest)
    assert manifest["artifactType"] == ENVELOPE_MEDIA_TYPE == "application/vnd.dsse.envelope.v1+json"
    assert manifest["subject"] == subject.to_json()
    assert manifest["config"] == {"mediaType": "application/vnd.oci.empty.v1+json", "digest": EMPTY_DIGEST, "size": 2}
    assert read_blob(layout, EMPTY_DIGEST) == b"{}"
    [layer] = manifest["layers"]
    assert layer["mediaType"] == ENVELOPE_MEDIA_TYPE
    assert json.loads(read_blob(layout, layer["digest"])) == wrapped
    assert "annotations" not in manifest  # no created time: the same provenance gives the same digest

    tag = f"sha256-{subject.digest.removeprefix('sha256:')}.att"
    assert attestation_tag(subject.digest) == tag
    assert list_tags(layout) == ["env-demo-1.0.0", tag]
    assert resolve(layout, tag) == descriptor
    index = json.loads((layout / "index.json").read_bytes())
    assert {**descriptor.to_json(), "annotations": {REF_NAME: tag}} in index["manifests"]
    assert find(layout, subject.digest) == wrapped


def test_attaching_twice_is_idempotent(image: tuple[Path, Descriptor], build_spec: BuildSpec) -> None:
    layout, subject = image
    wrapped = envelope(make_statement(build_spec, image_digest=subject.digest))
    first = attach(layout, subject, wrapped)
    index = (layout / "index.json").read_bytes()
    blobs = sorted(path.name for path in (layout / "blobs" / "sha256").iterdir())
    assert attach(layout, subject, wrapped) == first
    assert (layout / "index.json").read_bytes() == index
    assert sorted(path.name for path in (layout / "blobs" / "sha256").iterdir()) == blobs


def test_skopeo_reads_the_attestation_by_its_tag(
    image: tuple[Path, Descriptor], build_spec: BuildSpec, need_tool: Callable[[str], str]
) -> None:
    skopeo = need_tool("skopeo")
    layout, subject = image
    descriptor = attach(layout, subject, envelope(make_statement(build_spec, image_digest=subject.digest)))
    result = subprocess.run(
        [skopeo, "inspect", "--raw", f"oci:{layout}:{attestation_tag(subject.digest)}"],
        capture_output=True,
        timeout=60,
        check=False,
    )
    assert result.returncode == 0, result.stderr.decode()
    assert result.stdout == read_blob(layout, descriptor.digest)


def test_find_without_an_attestation_is_none(image: tuple[Path, Descriptor], tmp_path: Path) -> None:
    layout, subject = image
    assert find(layout, subject.digest) is None
    assert find(tmp_path / "no-layout-yet", subject.digest) is None


def test_attach_refuses_a_missing_image_and_provenance_about_another_one(
    image: tuple[Path, Descriptor], build_spec: BuildSpec
) -> None:
    layout, subject = image
    absent = Descriptor(MANIFEST_MEDIA_TYPE, "sha256:" + "77" * 32, 10)
    with pytest.raises(BuildError, match=f"blob {absent.digest} is missing from {layout}"):
        attach(layout, absent, envelope(make_statement(build_spec, image_digest=absent.digest)))
    with pytest.raises(BuildError, match=f"the statement is about sha256:{'5a' * 32}, not the image {subject.digest}"):
        attach(layout, subject, envelope(make_statement(build_spec)))
    with pytest.raises(BuildError, match=f"the image manifest in {layout} is not 1 bytes long"):
        attach(
            layout,
            Descriptor(MANIFEST_MEDIA_TYPE, subject.digest, 1),
            envelope(make_statement(build_spec, image_digest=subject.digest)),
        )
    with pytest.raises(BuildError, match="payload type is 'text/plain'"):
        attach(layout, subject, {"payloadType": "text/plain", "payload": "", "signatures": []})
    assert list_tags(layout) == ["env-demo-1.0.0"]


def test_find_refuses_an_attestation_about_another_image(image: tuple[Path, Descriptor], build_spec: BuildSpec) -> None:
    layout, subject = image
    attach(layout, subject, envelope(make_statement(build_spec, image_digest=subject.digest)))
    # Someone retags the artifact under another image's fallback tag.
    other = "sha256:" + "66" * 32
    index_path = layout / "index.json"
    index_path.write_text(index_path.read_text().replace(attestation_tag(subject.digest), attestation_tag(other)))
    with pytest.raises(BuildError, match=f"the artifact's subject is not {other}"):
        find(layout, other)
