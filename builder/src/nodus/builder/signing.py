"""Signing and verifying provenance with sigstore: keyless, with the identity of the CI workflow that built.

Who calls it: nodus-build's build step `sign`s each image's provenance statement where an identity exists
(GitHub Actions with `permissions: id-token: write`) and pushes the bundle beside the image;
`nodus-build verify` `verify`s a bundle against the image digest and the identity expected to have signed.

sigstore is an optional extra (`nodus-build[sign]`): it is imported inside the functions, and a missing one
is a PrerequisiteError saying how to install it. Signing needs the public Fulcio and Rekor services;
verifying does not: `verify` uses the trust root shipped inside the sigstore package (offline), so it runs
anywhere. Every failure is one line naming the bundle and the reason.
"""

from __future__ import annotations

import contextlib
import json
import logging
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

from nodus.builder.oci import canonical_json
from nodus.builder.provenance import PAYLOAD_TYPE, check_statement, parse_statement
from nodus.errors import BuildError, PrerequisiteError

if TYPE_CHECKING:  # for the type checker only: at run time sigstore is imported where it is used
    from sigstore.oidc import IdentityToken

JSONObject = dict[str, Any]

INSTALL_HINT = "pip install 'nodus-build[sign]'"
NO_IDENTITY_HINT = (
    "run in GitHub Actions with `permissions: id-token: write`, or pass --identity-token with an OIDC token"
)


def _missing_sigstore(what: str) -> PrerequisiteError:
    return PrerequisiteError(f"{what} needs sigstore", hint=INSTALL_HINT)


def _first_line(error: BaseException) -> str:
    """sigstore's messages can span lines (pydantic lists every field); a user gets the first."""
    text = str(error).strip()
    return text.splitlines()[0] if text else type(error).__name__


# -- signing --------------------------------------------------------------------------------------


def sign(statement: Mapping[str, Any], *, identity_token: str | None = None) -> str:
    """The sigstore bundle (JSON) of `statement` signed as DSSE with `identity_token` or the ambient identity.

    The DSSE payload is the statement's canonical JSON, so the signed bytes are the ones `provenance.envelope`
    stores. Needs network access to Fulcio and Rekor.
    """
    try:
        from sigstore.dsse import Statement
        from sigstore.errors import Error
        from sigstore.models import ClientTrustConfig
        from sigstore.sign import SigningContext
    except ImportError:
        raise _missing_sigstore("signing") from None
    identity = _identity(identity_token)
    try:
        payload = Statement(canonical_json(statement))
    except Error as exc:
        raise BuildError(f"signing: the provenance is not an in-toto statement ({_first_line(exc)})") from None
    try:
        context = SigningContext.from_trust_config(ClientTrustConfig.production())
        with context.signer(identity, cache=False) as signer:
            bundle = signer.sign_dsse(payload)
    except Error as exc:
        raise BuildError(f"signing with sigstore failed: {_first_line(exc)}") from None
    return bundle.to_json()


def _identity(identity_token: str | None) -> IdentityToken:
    """The OIDC identity to sign with: the token given, or the one the CI environment provides.

    Checked before anything touches the network, so a run without an identity fails at once and says why.
    """
    try:
        from sigstore.oidc import IdentityError, IdentityToken, detect_credential
    except ImportError:
        raise _missing_sigstore("signing") from None
    token = identity_token
    if token is None:
        try:
            token = detect_credential()
        except IdentityError as exc:
            # e.g. GitHub Actions without `id-token: write`: the environment is CI but hands out no token.
            raise BuildError(
                f"signing: the ambient identity is unusable ({_first_line(exc)})", hint=NO_IDENTITY_HINT
            ) from None
    if token is None:
        raise BuildError("signing needs an OIDC identity and none was found in this environment", hint=NO_IDENTITY_HINT)
    try:
        return IdentityToken(token)
    except IdentityError as exc:
        raise BuildError(
            f"signing: the identity token is unusable ({_first_line(exc)})", hint=NO_IDENTITY_HINT
        ) from None


# -- verifying ------------------------------------------------------------------------------------


def verify(bundle_path: Path, *, image_digest: str, identity: str, issuer: str, offline: bool = True) -> JSONObject:
    """The provenance statement in `bundle_path`, once its signature, signer and subject all check out.

    `identity` is the signer's certificate identity (for GitHub Actions the workflow's URI,
    `https://github.com/OWNER/REPO/.github/workflows/FILE@refs/...`), `issuer` its OIDC issuer
    (`https://token.actions.githubusercontent.com`). With `offline` the production trust root comes from
    sigstore's local cache, which sigstore seeds with the copy shipped in its package: no network, but no
    key rotation newer than that copy (or the last online run) is known. `offline=False` refreshes it by TUF.
    """
    try:
        from sigstore.errors import Error
        from sigstore.models import Bundle
        from sigstore.verify import Verifier
        from sigstore.verify.policy import Identity
    except ImportError:
        raise _missing_sigstore("verifying provenance") from None
    where = str(bundle_path)
    raw = _read_bundle(bundle_path)
    try:
        bundle = Bundle.from_json(raw)
    except (Error, ValueError) as exc:  # ValueError: the certificate or a field does not decode
        raise BuildError(f"{where}: not a sigstore bundle ({_first_line(exc)})") from None
    try:
        with _quiet("sigstore._internal.tuf"):
            verifier = Verifier.production(offline=offline)
    except Error as exc:
        raise BuildError(f"{where}: cannot load sigstore's trust root ({_first_line(exc)})") from None
    try:
        payload_type, payload = verifier.verify_dsse(bundle, Identity(identity=identity, issuer=issuer))
    except Error as exc:
        raise BuildError(f"{where}: signature does not verify for {identity} ({issuer}): {_first_line(exc)}") from None
    return statement_from_payload(payload_type, payload, image_digest=image_digest, where=where)


def statement_from_payload(payload_type: str, payload: bytes, *, image_digest: str, where: str) -> JSONObject:
    """A verified DSSE payload as the provenance statement about `image_digest` (a pure check, no sigstore).

    sigstore checks the signature only; what was signed, and about which image, is ours to check.
    """
    if payload_type != PAYLOAD_TYPE:
        raise BuildError(f"{where}: signed payload type is {payload_type!r}, not {PAYLOAD_TYPE}")
    return check_statement(parse_statement(payload, where=where), image_digest=image_digest, where=where)


def _read_bundle(path: Path) -> bytes:
    try:
        raw = path.read_bytes()
    except OSError as exc:
        raise BuildError(f"{path}: cannot read the bundle ({exc.strerror or exc})") from None
    try:
        document = json.loads(raw)
    except ValueError as exc:
        raise BuildError(f"{path}: not JSON ({exc})") from None
    if not isinstance(document, dict):
        raise BuildError(f"{path}: not a sigstore bundle (not a JSON object)")
    return raw


@contextlib.contextmanager
def _quiet(logger_name: str) -> Iterator[None]:
    """Hold back a logger's warnings: sigstore warns on every offline load, which is what we asked for."""
    logger = logging.getLogger(logger_name)
    level = logger.level
    logger.setLevel(logging.ERROR)
    try:
        yield
    finally:
        logger.setLevel(level)
