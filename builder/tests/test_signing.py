"""Signing and verifying provenance with sigstore, as far as it goes without Fulcio and Rekor.

Signing for real needs the public sigstore services and a CI identity, so it is not run here. What is:
the missing-identity and missing-sigstore errors, every way a bundle file can be bad, a well-formed bundle
whose certificate does not chain to sigstore's root going through the real offline verifier, and the
subject check verify applies to what was signed. Every test runs with sockets disabled: none may reach an
address, loopback included.
"""

from __future__ import annotations

import base64
import datetime
import json
import socket
import sys
import time
from pathlib import Path
from typing import Any

import pytest

from nodus.builder.provenance import PAYLOAD_TYPE, PREDICATE_TYPE, STATEMENT_TYPE, check_statement
from nodus.builder.signing import sign, statement_from_payload, verify
from nodus.errors import BuildError, PrerequisiteError

IMAGE_DIGEST = "sha256:" + "5a" * 32
IDENTITY = "https://github.com/example/nodus/.github/workflows/build.yml@refs/heads/main"
ISSUER = "https://token.actions.githubusercontent.com"
# What makes sigstore's ambient detectors (the `id` package) think they run in CI and fetch a token.
CI_VARIABLES = [
    "GITHUB_ACTIONS",
    "ACTIONS_ID_TOKEN_REQUEST_URL",
    "ACTIONS_ID_TOKEN_REQUEST_TOKEN",
    "GOOGLE_SERVICE_ACCOUNT_NAME",
    "BUILDKITE",
    "GITLAB_CI",
    "CIRCLECI",
    "SIGSTORE_ID_TOKEN",
]


def provenance(digest: str = IMAGE_DIGEST) -> dict[str, Any]:
    return {
        "_type": STATEMENT_TYPE,
        "subject": [{"name": "env-demo-1.0.0", "digest": {"sha256": digest.removeprefix("sha256:")}}],
        "predicateType": PREDICATE_TYPE,
        "predicate": {"buildDefinition": {"buildType": "https://nodus.dev/nodus-build/v1"}},
    }


@pytest.fixture(autouse=True)
def offline(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    """No sockets, no CI identity in the environment, sigstore's trust-root cache in a temporary folder."""

    def refuse(*args: object, **kwargs: object) -> None:
        raise AssertionError(f"a signing test tried to use the network: {args!r}")

    monkeypatch.setattr(socket.socket, "connect", refuse)
    monkeypatch.setattr(socket, "create_connection", refuse)
    monkeypatch.setattr(socket, "getaddrinfo", refuse)
    for name in CI_VARIABLES:
        monkeypatch.delenv(name, raising=False)
    # sigstore copies its shipped trust root into the user's cache and data folders; keep them out of $HOME.
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    monkeypatch.setenv("XDG_DATA_HOME", str(tmp_path / "data"))


@pytest.fixture
def no_gce(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    """The GCP detector asks the metadata server when the DMI product name says Google: point it nowhere."""
    ambient = pytest.importorskip("id._internal.oidc.ambient")
    monkeypatch.setattr(ambient, "_GCP_PRODUCT_NAME_FILE", str(tmp_path / "no-product-name"))


@pytest.fixture
def without_sigstore(monkeypatch: pytest.MonkeyPatch) -> None:
    """Imports of sigstore fail as if `nodus-build[sign]` were not installed."""
    for name in [name for name in sys.modules if name == "sigstore" or name.startswith("sigstore.")] + ["sigstore"]:
        monkeypatch.setitem(sys.modules, name, None)


def fake_token(**claims: object) -> str:
    """An unsigned-looking OIDC token with the claims sigstore checks locally (it never verifies the signature)."""
    jwt = pytest.importorskip("jwt")
    now = int(time.time())
    body = {"iss": "https://issuer.example", "sub": "someone", "aud": "sigstore", "iat": now, "exp": now + 600}
    body.update(claims)
    token: str = jwt.encode(body, "not a real key, sigstore does not check it", algorithm="HS256")
    return token


# Signing ------------------------------------------------------------------------------------------------


@pytest.mark.usefixtures("no_gce")
def test_signing_without_an_ambient_identity_says_how_to_get_one() -> None:
    pytest.importorskip("sigstore")
    with pytest.raises(BuildError) as error:
        sign(provenance())
    assert error.value.message == "signing needs an OIDC identity and none was found in this environment"
    assert error.value.hint is not None
    assert "id-token: write" in error.value.hint and "--identity-token" in error.value.hint


@pytest.mark.usefixtures("no_gce")
def test_github_actions_without_id_token_permission_is_a_one_line_error(monkeypatch: pytest.MonkeyPatch) -> None:
    pytest.importorskip("sigstore")
    monkeypatch.setenv("GITHUB_ACTIONS", "true")  # but no ACTIONS_ID_TOKEN_REQUEST_TOKEN: no `id-token: write`
    with pytest.raises(BuildError, match="signing: the ambient identity is unusable") as error:
        sign(provenance())
    assert "ACTIONS_ID_TOKEN_REQUEST_TOKEN" in error.value.message and "\n" not in error.value.message
    assert error.value.hint is not None and "id-token: write" in error.value.hint


def test_a_malformed_identity_token_is_refused_before_any_network() -> None:
    pytest.importorskip("sigstore")
    with pytest.raises(BuildError, match=r"signing: the identity token is unusable \(Identity token is malformed"):
        sign(provenance(), identity_token="not-a-jwt")
    with pytest.raises(BuildError, match="the identity token is unusable"):
        sign(provenance(), identity_token=fake_token(exp=int(time.time()) - 3600))


def test_signing_something_that_is_no_in_toto_statement_is_refused() -> None:
    pytest.importorskip("sigstore")
    with pytest.raises(BuildError, match=r"signing: the provenance is not an in-toto statement \(malformed") as error:
        sign({"_type": "https://example.invalid/not-in-toto"}, identity_token=fake_token())
    assert "\n" not in error.value.message


@pytest.mark.usefixtures("without_sigstore")
def test_without_sigstore_signing_and_verifying_say_what_to_install(tmp_path: Path) -> None:
    with pytest.raises(PrerequisiteError, match=r"^signing needs sigstore$") as error:
        sign(provenance())
    assert error.value.hint == "pip install 'nodus-build[sign]'"
    with pytest.raises(PrerequisiteError, match=r"^verifying provenance needs sigstore$") as error:
        verify(tmp_path / "bundle.json", image_digest=IMAGE_DIGEST, identity=IDENTITY, issuer=ISSUER)
    assert error.value.hint == "pip install 'nodus-build[sign]'"


# Verifying: bad bundle files ----------------------------------------------------------------------------


def _verify(path: Path) -> dict[str, Any]:
    return verify(path, image_digest=IMAGE_DIGEST, identity=IDENTITY, issuer=ISSUER)


@pytest.mark.parametrize(
    ("content", "message"),
    [
        (None, "cannot read the bundle (No such file or directory)"),
        (b"{not json", "not JSON (Expecting property name"),
        (b"[1, 2]", "not a sigstore bundle (not a JSON object)"),
        (b'{"mediaType": "application/vnd.example+json"}', "not a sigstore bundle ("),
        (
            b'{"mediaType": "application/vnd.dev.sigstore.bundle.v0.3+json", "verificationMaterial": {}}',
            "not a sigstore bundle (",
        ),
    ],
)
def test_a_bad_bundle_file_is_a_one_line_error_naming_it(tmp_path: Path, content: bytes | None, message: str) -> None:
    pytest.importorskip("sigstore")
    path = tmp_path / "provenance.sigstore.json"
    if content is not None:
        path.write_bytes(content)
    with pytest.raises(BuildError) as error:
        _verify(path)
    assert error.value.message.startswith(f"{path}: {message}")
    assert "\n" not in error.value.message


@pytest.fixture
def foreign_bundle(tmp_path: Path) -> Path:
    """A well-formed v0.3 DSSE bundle, correctly signed, by a certificate sigstore never issued."""
    pytest.importorskip("sigstore")
    from cryptography import x509
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.hazmat.primitives.asymmetric import ec
    from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

    def b64(data: bytes) -> str:
        return base64.b64encode(data).decode()

    def make() -> Path:
        key = ec.generate_private_key(ec.SECP256R1())
        now = datetime.datetime.now(datetime.UTC)
        name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "not fulcio")])
        certificate = (
            x509.CertificateBuilder()
            .subject_name(name)
            .issuer_name(name)
            .public_key(key.public_key())
            .serial_number(1)
            .not_valid_before(now - datetime.timedelta(minutes=5))
            .not_valid_after(now + datetime.timedelta(minutes=10))
            .add_extension(x509.KeyUsage(True, False, False, False, False, False, False, False, False), critical=True)
            .add_extension(x509.ExtendedKeyUsage([ExtendedKeyUsageOID.CODE_SIGNING]), critical=False)
            .add_extension(x509.SubjectAlternativeName([x509.UniformResourceIdentifier(IDENTITY)]), critical=False)
            .sign(key, hashes.SHA256())
        )
        payload = json.dumps(provenance()).encode()
        pae = b"DSSEv1 %d %s %d %s" % (len(PAYLOAD_TYPE), PAYLOAD_TYPE.encode(), len(payload), payload)
        zeros = b64(bytes(32))
        bundle = {
            "mediaType": "application/vnd.dev.sigstore.bundle.v0.3+json",
            "verificationMaterial": {
                "certificate": {"rawBytes": b64(certificate.public_bytes(serialization.Encoding.DER))},
                "tlogEntries": [
                    {
                        "logIndex": "1",
                        "logId": {"keyId": zeros},
                        "kindVersion": {"kind": "dsse", "version": "0.0.1"},
                        "integratedTime": str(int(time.time())),
                        "inclusionPromise": {"signedEntryTimestamp": b64(bytes(64))},
                        "inclusionProof": {
                            "logIndex": "1",
                            "rootHash": zeros,
                            "treeSize": "2",
                            "hashes": [zeros],
                            "checkpoint": {"envelope": "rekor.example - 1\n2\nAAAA\n\n\u2014 rekor.example AAAA\n"},
                        },
                        "canonicalizedBody": b64(b"{}"),
                    }
                ],
            },
            "dsseEnvelope": {
                "payload": b64(payload),
                "payloadType": PAYLOAD_TYPE,
                "signatures": [{"sig": b64(key.sign(pae, ec.ECDSA(hashes.SHA256()))), "keyid": ""}],
            },
        }
        path = tmp_path / "foreign.sigstore.json"
        path.write_text(json.dumps(bundle))
        return path

    return make()


def test_a_bundle_not_chaining_to_sigstore_fails_the_real_offline_verifier(foreign_bundle: Path) -> None:
    # Everything but the certificate's issuer is right, so the error must come from the chain check, made
    # against the production trust root loaded offline (the socket guard would fail a TUF refresh).
    with pytest.raises(BuildError) as error:
        _verify(foreign_bundle)
    assert error.value.message.startswith(f"{foreign_bundle}: signature does not verify for {IDENTITY} ({ISSUER}): ")
    assert "certificate chain" in error.value.message and "\n" not in error.value.message


# Verifying: what was signed -------------------------------------------------------------------------------


def test_a_verified_payload_about_the_image_is_its_statement() -> None:
    document = provenance()
    payload = json.dumps(document).encode()
    assert statement_from_payload(PAYLOAD_TYPE, payload, image_digest=IMAGE_DIGEST, where="b.json") == document
    # A statement may name several subjects; one of them must be the image.
    several = {**document, "subject": [{"name": "a", "digest": {"sha512": "00"}}, *document["subject"]]}
    assert check_statement(several, image_digest=IMAGE_DIGEST, where="b.json") == several


@pytest.mark.parametrize(
    ("payload_type", "payload", "message"),
    [
        ("text/plain", json.dumps(provenance()).encode(), f"signed payload type is 'text/plain', not {PAYLOAD_TYPE}"),
        (PAYLOAD_TYPE, b"\x00not json", "the payload is not JSON"),
        (PAYLOAD_TYPE, b'{"_type": "https://in-toto.io/Statement/v0.1"}', "the payload is not an in-toto Statement v1"),
        (
            PAYLOAD_TYPE,
            json.dumps({**provenance(), "predicateType": "https://spdx.dev/Document"}).encode(),
            "the statement is not SLSA provenance v1 ('https://spdx.dev/Document')",
        ),
        (
            PAYLOAD_TYPE,
            json.dumps(provenance("sha256:" + "6b" * 32)).encode(),
            f"the statement is about sha256:{'6b' * 32}, not the image {IMAGE_DIGEST}",
        ),
        (
            PAYLOAD_TYPE,
            json.dumps({**provenance(), "subject": [{"name": "x", "digest": {"sha512": "00"}}]}).encode(),
            f"the statement is about no sha256 digest, not the image {IMAGE_DIGEST}",
        ),
        (PAYLOAD_TYPE, json.dumps({**provenance(), "subject": []}).encode(), "the statement has no subject"),
    ],
)
def test_a_verified_payload_that_is_not_provenance_of_the_image_is_refused(
    payload_type: str, payload: bytes, message: str
) -> None:
    with pytest.raises(BuildError) as error:
        statement_from_payload(payload_type, payload, image_digest=IMAGE_DIGEST, where="bundle.json")
    assert error.value.message == f"bundle.json: {message}"
