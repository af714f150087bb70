"""A small OCI distribution-spec client: push images and artifacts from our layout store, pull them by digest.

Who calls it: `nodus-build --push REGISTRY/REPO`, which pushes a built image and then its provenance artifact
under the `attachment_tag` of the image's digest, and whatever fetches a pushed image back into a layout
(`pull`) or looks a tag up (`resolve_tag`).

Every digest survives the trip byte for byte: a manifest is PUT as the exact bytes stored in the layout and
stored back as the exact bytes the registry sent, after checking that they hash to the digest asked for. No
JSON is ever re-serialised here (oras-py does, which is why it is not used; FACTS.md).

Plain `urllib.request`, nothing else. Loopback registries (and `insecure=True` ones) are spoken to over plain
HTTP. Credentials come from `NODUS_REGISTRY_USERNAME`/`NODUS_REGISTRY_PASSWORD` and are sent as Basic or
exchanged for a Bearer token, whichever the registry's 401 challenge asks for (the Docker token flow).
"""

from __future__ import annotations

import base64
import contextlib
import ipaddress
import json
import os
import re
import urllib.error
import urllib.request
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from email.message import Message
from pathlib import Path
from typing import IO, Any
from urllib.parse import parse_qsl, quote, urlencode, urljoin, urlsplit, urlunsplit

from nodus.builder.oci import (
    INDEX_MEDIA_TYPE,
    MANIFEST_MEDIA_TYPE,
    Descriptor,
    blob_path,
    check_tag,
    read_blob,
    resolve,
    sha256_digest,
    tag_manifest,
    write_blob,
    write_blob_chunks,
)
from nodus.errors import BuildError, ConfigError

JSONObject = dict[str, Any]

USERNAME_ENV = "NODUS_REGISTRY_USERNAME"
PASSWORD_ENV = "NODUS_REGISTRY_PASSWORD"
DOCKER_MANIFEST_MEDIA_TYPE = "application/vnd.docker.distribution.manifest.v2+json"
DOCKER_INDEX_MEDIA_TYPE = "application/vnd.docker.distribution.manifest.list.v2+json"
EMPTY_MEDIA_TYPE = "application/vnd.oci.empty.v1+json"
# Every manifest kind we can store; a registry picks among them by Accept (and may convert when one is missing).
MANIFEST_TYPES = (MANIFEST_MEDIA_TYPE, INDEX_MEDIA_TYPE, DOCKER_MANIFEST_MEDIA_TYPE, DOCKER_INDEX_MEDIA_TYPE)
# Registries refuse manifests over 4 MiB; more than that from a GET is not a manifest.
MAX_MANIFEST_BYTES = 4 << 20
_MAX_ERROR_BYTES = 64 << 10
_CHUNK = 1 << 20
TIMEOUT_S = 60.0

_DIGEST = re.compile(r"sha256:[0-9a-f]{64}")
# The distribution reference grammar: host[:port] (a name, or an IPv6 address in brackets), then the path.
_HOST = re.compile(r"(?:[A-Za-z0-9](?:[A-Za-z0-9-]*[A-Za-z0-9])?(?:\.[A-Za-z0-9](?:[A-Za-z0-9-]*[A-Za-z0-9])?)*"
                   r"|\[[0-9A-Fa-f:.]+\])(?::[0-9]{1,5})?")  # fmt: skip
_COMPONENT = r"[a-z0-9]+(?:(?:[._]|__|-+)[a-z0-9]+)*"
_REPOSITORY = re.compile(rf"{_COMPONENT}(?:/{_COMPONENT})*")
# One item of a WWW-Authenticate header: a scheme (a token alone) or a parameter (token=value), comma-separated
# except after a scheme, which a space ends.
_CHALLENGE_ITEM = re.compile(r'[\s,]*([!#$%&\'*+.^_`|~0-9A-Za-z-]+)(?:\s*=\s*("(?:[^"\\]|\\.)*"|[^\s,]*))?')
_HELP = "write HOST[:PORT]/REPOSITORY, e.g. 127.0.0.1:5000/nodus/envs"


@dataclass(frozen=True)
class RegistryRef:
    """A repository in a registry: `127.0.0.1:5000/nodus/envs` is host `127.0.0.1:5000`, repository `nodus/envs`."""

    host: str
    repository: str
    insecure: bool = False

    @classmethod
    def parse(cls, text: str, *, insecure: bool = False) -> RegistryRef:
        """Read `HOST[:PORT]/REPOSITORY`. The host is required: Docker's rule, a dot, a colon or `localhost`."""
        if "://" in text:
            raise ConfigError(f"registry reference {text!r} has a URL scheme", hint=f"{_HELP} (insecure=True for http)")
        host, slash, repository = text.partition("/")
        if not slash or not ("." in host or ":" in host or host == "localhost"):
            raise ConfigError(f"registry reference {text!r} names no registry host", hint=_HELP)
        if not _HOST.fullmatch(host):
            raise ConfigError(f"registry host {host!r} in {text!r} is not a host name or address", hint=_HELP)
        if "@" in repository or ":" in repository:
            raise ConfigError(f"registry reference {text!r} has a tag or digest; it names a repository", hint=_HELP)
        if not _REPOSITORY.fullmatch(repository) or len(text) > 255:
            raise ConfigError(
                f"repository {repository!r} in {text!r} is not valid",
                hint="lower-case letters and digits, separated by '.', '_', '__', '-' or '/' (255 characters at most)",
            )
        return cls(host, repository, insecure)

    @property
    def scheme(self) -> str:
        """https, except plain http on loopback (a local test registry) or when asked for."""
        return "http" if self.insecure or is_loopback(self.host) else "https"

    @property
    def base_url(self) -> str:
        """The API root, `http(s)://host/v2/` (a GET there answers 200 or 401 on any registry)."""
        return f"{self.scheme}://{self.host}/v2/"

    def url(self, kind: str, reference: str = "") -> str:
        """`/v2/<repo>/<kind>/<reference>` on this registry: kind is `blobs`, `manifests` or `blobs/uploads`."""
        return f"{self.base_url}{self.repository}/{kind}/{quote(reference, safe=':')}"

    def __str__(self) -> str:
        return f"{self.host}/{self.repository}"


@dataclass(frozen=True)
class Credentials:
    """A user name and password (or token) for a registry; never printed."""

    username: str
    password: str = field(repr=False)

    @classmethod
    def from_env(cls, environ: Mapping[str, str] | None = None) -> Credentials | None:
        """From NODUS_REGISTRY_USERNAME and NODUS_REGISTRY_PASSWORD; None when neither is set (anonymous)."""
        env = os.environ if environ is None else environ
        username, password = env.get(USERNAME_ENV, ""), env.get(PASSWORD_ENV, "")
        if not username and not password:
            return None
        if not username or not password:
            given, missing = (USERNAME_ENV, PASSWORD_ENV) if username else (PASSWORD_ENV, USERNAME_ENV)
            raise ConfigError(f"{given} is set but {missing} is not", hint="set both, or neither for anonymous access")
        return cls(username, password)

    def basic(self) -> str:
        """The `Authorization` header value for HTTP Basic."""
        pair = f"{self.username}:{self.password}".encode()
        return f"Basic {base64.b64encode(pair).decode('ascii')}"


@dataclass(frozen=True)
class Challenge:
    """One challenge of a `WWW-Authenticate` header: the scheme (lower case) and its parameters."""

    scheme: str
    params: Mapping[str, str]


@dataclass(frozen=True)
class PushResult:
    """What `push` did: the manifest it put (by digest) and which blobs went up or were there already."""

    target: RegistryRef
    digest: str
    media_type: str
    size: int
    tags: tuple[str, ...]
    uploaded: tuple[str, ...]
    skipped: tuple[str, ...]

    @property
    def reference(self) -> str:
        """`host/repo@sha256:...`: what skopeo, podman and `pull` take."""
        return f"{self.target}@{self.digest}"


def is_loopback(host: str) -> bool:
    """Whether `host` (with or without a port) is this machine: localhost, 127.0.0.0/8 or ::1."""
    name = host
    if name.startswith("["):
        name = name[1 : name.find("]")]
    elif name.count(":") == 1:
        name = name.partition(":")[0]
    if name.lower() == "localhost":
        return True
    try:
        return ipaddress.ip_address(name).is_loopback
    except ValueError:
        return False


def attachment_tag(digest: str, suffix: str = "att") -> str:
    """The tag an artifact about `digest` goes under where a registry has no referrers API: `sha256-<hex>.att`."""
    if not _DIGEST.fullmatch(digest):
        raise ConfigError(f"{digest!r} is not a sha256 digest", hint="sha256: and 64 lower-case hex digits")
    return check_tag(f"{digest.replace(':', '-')}.{suffix}")


def parse_challenges(header: str) -> list[Challenge]:
    """The challenges of a WWW-Authenticate header (RFC 7235), e.g.

    `Bearer realm="https://auth.example/token",service="registry.example",scope="repository:a/b:pull,push"`
    gives one Bearer challenge with three parameters (quoted values may hold commas). Unreadable input gives [].
    """
    challenges: list[Challenge] = []
    params: dict[str, str] = {}
    position = 0
    while position < len(header):
        match = _CHALLENGE_ITEM.match(header, position)
        if match is None or match.end() == position:
            break
        position = match.end()
        name, value = match.group(1), match.group(2)
        if value is None:  # a token alone starts a new challenge
            params = {}
            challenges.append(Challenge(name.lower(), params))
        elif challenges:
            if value.startswith('"'):
                value = re.sub(r"\\(.)", r"\1", value[1:-1])
            params[name.lower()] = value
    return challenges


def upload_url(base: str, location: str, digest: str) -> str:
    """Where the monolithic PUT of an upload goes: the Location of the POST (relative or absolute, keeping
    the query the registry put there, e.g. `_state`) with `digest=` added."""
    parts = urlsplit(urljoin(base, location))
    query = [(key, value) for key, value in parse_qsl(parts.query, keep_blank_values=True) if key != "digest"]
    query.append(("digest", digest))
    return urlunsplit(parts._replace(query=urlencode(query)))


def token_url(challenge: Challenge) -> str:
    """The token service request a Bearer challenge asks for: realm?service=...&scope=... (Docker token spec)."""
    realm = challenge.params.get("realm", "")
    if urlsplit(realm).scheme not in ("http", "https"):
        raise BuildError(f"registry asked for a bearer token from {realm!r}, which is not an http(s) URL")
    query = [(key, challenge.params[key]) for key in ("service", "scope") if challenge.params.get(key)]
    if not query:
        return realm
    return f"{realm}{'&' if urlsplit(realm).query else '?'}{urlencode(query)}"


# -- pushing --------------------------------------------------------------------------------------


def push(
    layout: Path,
    reference: str,
    target: RegistryRef,
    *,
    tags: Sequence[str] = (),
    credentials: Credentials | None = None,
    timeout: float = TIMEOUT_S,
) -> PushResult:
    """Push the manifest `reference` names in `layout` (a tag there, or a manifest digest) to `target`.

    Blobs the registry lacks go up first (an index's child manifests before the index), then the manifest's
    stored bytes are PUT under each of `tags` (by digest when there is none). Credentials default to the
    NODUS_REGISTRY_* variables.
    """
    for tag in tags:
        check_tag(tag)
    descriptor = _layout_manifest(layout, reference)
    session = _Session(target, credentials, timeout)
    uploaded: list[str] = []
    skipped: list[str] = []
    pushed = _push_manifest(session, layout, descriptor, tuple(tags), uploaded, skipped)
    return PushResult(
        target, pushed.digest, pushed.media_type, pushed.size, tuple(tags), tuple(uploaded), tuple(skipped)
    )


def _layout_manifest(layout: Path, reference: str) -> Descriptor:
    """The manifest a tag or a digest names in the layout (`_push_manifest` reads its media type from it)."""
    if _DIGEST.fullmatch(reference) and (layout / "oci-layout").is_file():
        return Descriptor("", reference, -1)  # a manifest need not be tagged to be pushed by its digest
    if not (layout / "index.json").is_file():
        raise ConfigError(f"{layout} is not an OCI image layout (no index.json)")
    if _DIGEST.fullmatch(reference):
        return Descriptor("", reference, -1)
    return resolve(layout, reference)


def _push_manifest(
    session: _Session,
    layout: Path,
    descriptor: Descriptor,
    tags: tuple[str, ...],
    uploaded: list[str],
    skipped: list[str],
) -> Descriptor:
    raw = read_blob(layout, descriptor.digest)
    manifest = _manifest_json(raw, f"manifest {descriptor.digest} in {layout}")
    children, blobs = _references(manifest, f"manifest {descriptor.digest} in {layout}")
    for child in children:
        _push_manifest(session, layout, child, (), uploaded, skipped)
    for blob in blobs:
        if blob.digest in uploaded or blob.digest in skipped:
            continue
        if session.has_blob(blob):
            skipped.append(blob.digest)
            continue
        # The registry checks the digest of what we upload, not the size the manifest gives: we do.
        path = blob_path(layout, blob.digest)
        if not path.is_file() or path.stat().st_size != blob.size:
            raise BuildError(
                f"blob {blob.digest} ({blob.size} bytes) of manifest {descriptor.digest} is not in {layout}"
            )
        session.upload_blob(path, blob)
        uploaded.append(blob.digest)
    media_type = _media_type(manifest, descriptor.media_type)
    for reference in tags or (descriptor.digest,):
        session.put_manifest(reference, raw, media_type, descriptor.digest)
    return Descriptor(media_type, descriptor.digest, len(raw))


# -- pulling --------------------------------------------------------------------------------------


def pull(
    source: RegistryRef,
    digest: str,
    layout: Path,
    *,
    tag: str,
    credentials: Credentials | None = None,
    timeout: float = TIMEOUT_S,
) -> Descriptor:
    """Fetch the manifest `digest` from `source` with every blob it needs into `layout`, tagged `tag` there.

    The manifest is stored as the bytes the registry sent once they hash to `digest`; each blob once it
    hashes to its descriptor's digest and has its size. Blobs the layout has already are not fetched.
    """
    if not _DIGEST.fullmatch(digest):
        raise ConfigError(f"{digest!r} is not a sha256 digest", hint="pull by digest: sha256: and 64 hex digits")
    check_tag(tag)
    session = _Session(source, credentials, timeout)
    descriptor = _pull_manifest(session, digest, layout)
    tag_manifest(layout, tag, descriptor)
    return descriptor


def resolve_tag(
    ref: RegistryRef, tag: str, *, credentials: Credentials | None = None, timeout: float = TIMEOUT_S
) -> str:
    """The manifest digest `tag` names in `ref`'s repository right now."""
    check_tag(tag)
    return _Session(ref, credentials, timeout).manifest_digest(tag)


def fetch_manifest(
    source: RegistryRef, digest: str, *, credentials: Credentials | None = None, timeout: float = TIMEOUT_S
) -> bytes:
    """The raw bytes of the manifest `digest` in `source`, once they hash to it (nothing is stored)."""
    if not _DIGEST.fullmatch(digest):
        raise ConfigError(f"{digest!r} is not a sha256 digest", hint="sha256: and 64 hex digits")
    raw, _ = _Session(source, credentials, timeout).get_manifest(digest)
    return raw


def fetch_blobs(
    source: RegistryRef,
    blobs: Sequence[Descriptor],
    layout: Path,
    *,
    credentials: Credentials | None = None,
    timeout: float = TIMEOUT_S,
) -> None:
    """Download each of `blobs` that `layout` lacks from `source`, each stored once it hashes to its digest and has
    its size: some layers of an artifact without the rest (one output file of a job, say)."""
    session = _Session(source, credentials, timeout)
    for blob in blobs:
        path = blob_path(layout, blob.digest)
        if not (path.is_file() and path.stat().st_size == blob.size):
            session.download_blob(blob, layout)


def _pull_manifest(session: _Session, digest: str, layout: Path) -> Descriptor:
    raw, content_type = session.get_manifest(digest)
    what = f"manifest {digest} from {session.ref}"
    manifest = _manifest_json(raw, what)
    children, blobs = _references(manifest, what)
    for child in children:
        _pull_manifest(session, child.digest, layout)
    for blob in blobs:
        # A blob in the layout was checked when it was stored there (and is named by its hash): the size is
        # enough to skip it, without hashing every layer again on every pull.
        path = blob_path(layout, blob.digest)
        if not (path.is_file() and path.stat().st_size == blob.size):
            session.download_blob(blob, layout)
    media_type = _media_type(manifest, content_type)
    # write_blob names the bytes by their own hash, which get_manifest checked is `digest`.
    return write_blob(layout, raw, media_type)


# -- manifests ------------------------------------------------------------------------------------


def _manifest_json(raw: bytes, what: str) -> JSONObject:
    try:
        manifest = json.loads(raw)
    except ValueError as exc:
        raise BuildError(f"{what} is not JSON ({exc})") from None
    if not isinstance(manifest, dict):
        raise BuildError(f"{what} is not a JSON object")
    if manifest.get("schemaVersion") != 2:
        raise BuildError(f"{what} has schemaVersion {manifest.get('schemaVersion')!r}; nodus reads version 2")
    return manifest


def _media_type(manifest: JSONObject, fallback: str = "") -> str:
    """The manifest's own mediaType (a registry matches Content-Type against it), else what it looks like."""
    declared = manifest.get("mediaType")
    if isinstance(declared, str) and declared:
        return declared
    if fallback.split(";")[0].strip() in MANIFEST_TYPES:
        return fallback.split(";")[0].strip()
    return INDEX_MEDIA_TYPE if "manifests" in manifest else MANIFEST_MEDIA_TYPE


def _references(manifest: JSONObject, what: str) -> tuple[list[Descriptor], list[Descriptor]]:
    """What a manifest needs in the same repository: child manifests (an index) and blobs (config, layers).

    `subject` is not among them: it points at another manifest, pushed on its own.
    """
    children = [_descriptor(item, what) for item in _list(manifest.get("manifests"), what)]
    blobs = [_descriptor(manifest["config"], what)] if "config" in manifest else []
    blobs += [_descriptor(item, what) for item in _list(manifest.get("layers"), what)]
    if "blobs" in manifest:  # the short-lived OCI artifact manifest draft used `blobs` for its layers
        blobs += [_descriptor(item, what) for item in _list(manifest.get("blobs"), what)]
    return children, blobs


def _list(value: object, what: str) -> list[object]:
    if value is None:
        return []
    if not isinstance(value, list):
        raise BuildError(f"{what}: a list of descriptors is not a list")
    return value


def _descriptor(value: object, what: str) -> Descriptor:
    if not isinstance(value, dict):
        raise BuildError(f"{what}: a descriptor is not a JSON object")
    digest, size, media_type = value.get("digest"), value.get("size"), value.get("mediaType")
    if not isinstance(digest, str) or not _DIGEST.fullmatch(digest):
        raise BuildError(f"{what}: descriptor digest {digest!r} is not a sha256 digest")
    if not isinstance(size, int) or isinstance(size, bool) or size < 0:
        raise BuildError(f"{what}: descriptor {digest} has size {size!r}")
    return Descriptor(media_type if isinstance(media_type, str) else "", digest, size)


# -- HTTP -----------------------------------------------------------------------------------------


@dataclass
class _Reply:
    """An HTTP answer, error statuses included: urllib raises those, we look at them like any other."""

    status: int
    headers: Message
    body: IO[bytes]

    def read(self, limit: int) -> bytes:
        return self.body.read(limit)

    def close(self) -> None:
        self.body.close()


class _Redirects(urllib.request.HTTPRedirectHandler):
    """Follows redirects (blob downloads often go to object storage) without handing our Authorization
    header to another host: it is not theirs, and S3 refuses a request with two kinds of credentials."""

    def redirect_request(
        self, req: urllib.request.Request, fp: IO[bytes], code: int, msg: str, headers: Message, newurl: str
    ) -> urllib.request.Request | None:
        new = super().redirect_request(req, fp, code, msg, headers, newurl)  # type: ignore[arg-type]
        if new is not None and urlsplit(newurl).netloc != urlsplit(req.full_url).netloc:
            new.remove_header("Authorization")
        return new


def _opener(url: str) -> urllib.request.OpenerDirector:
    # Loopback goes direct: an HTTP(S)_PROXY meant for the outside world must not swallow a local registry.
    proxies = urllib.request.ProxyHandler({} if is_loopback(urlsplit(url).netloc) else None)
    return urllib.request.build_opener(proxies, _Redirects())


class _Session:
    """Requests to one repository of one registry, with the authorization its challenges asked for."""

    def __init__(self, ref: RegistryRef, credentials: Credentials | None, timeout: float) -> None:
        self.ref = ref
        self.credentials = credentials if credentials is not None else Credentials.from_env()
        self.timeout = timeout
        self.authorization: str | None = None
        self.opener = _opener(ref.base_url)

    # -- the distribution API --

    def has_blob(self, blob: Descriptor) -> bool:
        what = f"check for blob {blob.digest}"
        with self._request("HEAD", self.ref.url("blobs", blob.digest), what) as reply:
            if reply.status == 404:
                return False
            self._expect(reply, (200,), what)
            return True

    def upload_blob(self, path: Path, blob: Descriptor) -> None:
        """A monolithic upload: POST for an upload location, then PUT the whole blob there with its digest."""
        what = f"upload of blob {blob.digest}"
        with self._request("POST", self.ref.url("blobs/uploads"), what, body=b"") as reply:
            self._expect(reply, (202,), what)
            location = reply.headers.get("Location")
        if not location:
            raise self._error(what, "the registry gave no upload Location")
        headers = {"Content-Type": "application/octet-stream"}
        url = upload_url(self.ref.url("blobs/uploads"), location, blob.digest)
        with self._request("PUT", url, what, body=path, headers=headers) as reply:
            self._expect(reply, (201,), what)

    def put_manifest(self, reference: str, raw: bytes, media_type: str, digest: str) -> None:
        what = f"push of manifest {digest} as {reference}"
        headers = {"Content-Type": media_type}
        with self._request("PUT", self.ref.url("manifests", reference), what, body=raw, headers=headers) as reply:
            self._expect(reply, (200, 201), what)
            answered = reply.headers.get("Docker-Content-Digest")
        if answered is None:
            # The header is optional in the OCI spec: then ask for the manifest by our digest instead.
            answered = self.manifest_digest(digest)
        if answered != digest:
            raise self._error(what, f"the registry stored it as {answered}")

    def manifest_digest(self, reference: str) -> str:
        """The digest of the manifest a tag (or digest) names: the registry's header, else the hash of a GET."""
        what = f"lookup of manifest {reference}"
        headers = {"Accept": ", ".join(MANIFEST_TYPES)}
        with self._request("HEAD", self.ref.url("manifests", reference), what, headers=headers) as reply:
            self._expect(reply, (200,), what)
            answered = reply.headers.get("Docker-Content-Digest")
        if answered is not None and _DIGEST.fullmatch(answered):
            return answered
        raw, _ = self._get_manifest(reference, what)
        return sha256_digest(raw)

    def get_manifest(self, digest: str) -> tuple[bytes, str]:
        """The manifest's raw bytes, once they hash to `digest`, and its Content-Type."""
        what = f"pull of manifest {digest}"
        raw, content_type = self._get_manifest(digest, what)
        if sha256_digest(raw) != digest:
            raise self._error(what, f"the registry sent bytes that hash to {sha256_digest(raw)}")
        return raw, content_type

    def download_blob(self, blob: Descriptor, layout: Path) -> None:
        what = f"download of blob {blob.digest}"
        with self._request("GET", self.ref.url("blobs", blob.digest), what) as reply:
            self._expect(reply, (200,), what)
            source = f"registry {self.ref.host}, repository {self.ref.repository}"
            write_blob_chunks(layout, self._chunks(reply, what), blob, source=source)

    def _get_manifest(self, reference: str, what: str) -> tuple[bytes, str]:
        headers = {"Accept": ", ".join(MANIFEST_TYPES)}
        with self._request("GET", self.ref.url("manifests", reference), what, headers=headers) as reply:
            self._expect(reply, (200,), what)
            raw = self._read(reply, MAX_MANIFEST_BYTES + 1, what)
            content_type = reply.headers.get("Content-Type", "")
        if len(raw) > MAX_MANIFEST_BYTES:
            raise self._error(what, f"the manifest is larger than {MAX_MANIFEST_BYTES} bytes")
        return raw, content_type

    # -- requests, authorization, errors --

    @contextlib.contextmanager
    def _request(
        self, method: str, url: str, what: str, *, body: bytes | Path | None = None, headers: Mapping[str, str] = {}
    ) -> Iterator[_Reply]:
        """One request, retried once with new authorization when a 401 challenge tells us what to send."""
        reply = self._send(method, url, what, body, headers)
        if reply.status == 401 and self._authenticate(reply, what):
            reply.close()
            reply = self._send(method, url, what, body, headers)
        try:
            yield reply
        finally:
            reply.close()

    def _send(self, method: str, url: str, what: str, body: bytes | Path | None, headers: Mapping[str, str]) -> _Reply:
        if not isinstance(body, Path):
            return self._open(urllib.request.Request(url, data=body, headers=dict(headers), method=method), what)
        # Streamed from disk (a layer may be hundreds of MB); a Content-Length avoids chunked encoding.
        try:
            handle = body.open("rb")
        except OSError as exc:
            raise self._error(what, f"cannot read {body} ({exc.strerror})") from None
        with handle:
            sized = {**headers, "Content-Length": str(os.fstat(handle.fileno()).st_size)}
            return self._open(urllib.request.Request(url, data=handle, headers=sized, method=method), what)

    def _open(self, request: urllib.request.Request, what: str) -> _Reply:
        if self.authorization:
            request.add_header("Authorization", self.authorization)
        try:
            response = self.opener.open(request, timeout=self.timeout)
        except urllib.error.HTTPError as error:
            return _Reply(error.code, error.headers, error)
        except urllib.error.URLError as error:
            raise self._unreachable(what, error.reason) from None
        except OSError as error:  # a reset or a timeout once connected
            raise self._unreachable(what, error) from None
        return _Reply(response.status, response.headers, response)

    def _authenticate(self, reply: _Reply, what: str) -> bool:
        """Set the authorization a 401's challenges ask for; False when there is nothing new to try."""
        challenges = [c for header in reply.headers.get_all("WWW-Authenticate") or [] for c in parse_challenges(header)]
        for challenge in challenges:
            if challenge.scheme == "bearer":
                authorization = f"Bearer {self._token(challenge, what)}"
            elif challenge.scheme == "basic" and self.credentials is not None:
                authorization = self.credentials.basic()
            else:
                continue
            if authorization == self.authorization:
                return False
            self.authorization = authorization
            return True
        return False

    def _token(self, challenge: Challenge, what: str) -> str:
        """A bearer token from the realm the challenge names, asked for with our credentials (if any)."""
        try:
            url = token_url(challenge)
        except BuildError as exc:
            raise self._error(what, exc.message) from None
        service = f"the token service {challenge.params['realm']}"
        headers = {"Accept": "application/json"}
        if self.credentials is not None:
            if urlsplit(url).scheme != "https" and not (self.ref.insecure or is_loopback(urlsplit(url).netloc)):
                raise self._error(what, f"{service} is plain http; credentials are not sent there")
            headers["Authorization"] = self.credentials.basic()
        try:
            with _opener(url).open(urllib.request.Request(url, headers=headers), timeout=self.timeout) as response:
                raw = response.read(_MAX_ERROR_BYTES)
        except urllib.error.HTTPError as error:
            detail = _error_detail(error.read(_MAX_ERROR_BYTES))
            raise self._error(what, f"{service} answered HTTP {error.code}{detail}") from None
        except urllib.error.URLError as error:
            raise self._error(what, f"cannot reach {service} ({error.reason})") from None
        except OSError as error:
            raise self._error(what, f"cannot reach {service} ({error})") from None
        return self._token_from(raw, service, what)

    def _token_from(self, raw: bytes, service: str, what: str) -> str:
        """The token of a token service's JSON answer (`token`, or OAuth2's `access_token`)."""
        try:
            answer = json.loads(raw)
        except ValueError:
            answer = None
        token = (answer.get("token") or answer.get("access_token")) if isinstance(answer, dict) else None
        if not isinstance(token, str) or not token:
            raise self._error(what, f"{service} gave no token")
        return token

    def _expect(self, reply: _Reply, statuses: tuple[int, ...], what: str) -> None:
        if reply.status in statuses:
            return
        detail = _error_detail(self._read(reply, _MAX_ERROR_BYTES, what))
        hint = None
        if reply.status in (401, 403):
            hint = f"set {USERNAME_ENV} and {PASSWORD_ENV} for a registry that needs a login"
        raise self._error(what, f"HTTP {reply.status}{detail}", hint=hint)

    def _read(self, reply: _Reply, limit: int, what: str) -> bytes:
        try:
            return reply.read(limit)
        except OSError as exc:
            raise self._unreachable(what, exc) from None

    def _chunks(self, reply: _Reply, what: str) -> Iterator[bytes]:
        while chunk := self._read(reply, _CHUNK, what):
            yield chunk

    def _unreachable(self, what: str, reason: object) -> BuildError:
        reason = getattr(reason, "strerror", None) or reason
        hint = "is the registry running and reachable?"
        if "CERTIFICATE" in str(reason).upper() or "SSL" in str(reason).upper():
            hint = "a registry without TLS needs insecure=True (loopback registries use http already)"
        return self._error(what, f"cannot reach the registry over {self.ref.scheme} ({reason})", hint=hint)

    def _error(self, what: str, detail: str, *, hint: str | None = None) -> BuildError:
        line = f"registry {self.ref.host}, repository {self.ref.repository}: {what} failed: {detail}"
        return BuildError(" ".join(line.split()), hint=hint)


def _error_detail(body: bytes) -> str:
    """`: CODE message; CODE message` from a distribution error body, or nothing when it has none."""
    try:
        document = json.loads(body)
    except ValueError:
        return ""
    errors = document.get("errors") if isinstance(document, dict) else None
    if not isinstance(errors, list):
        return ""
    parts = []
    for item in errors:
        if isinstance(item, dict):
            parts.append(" ".join(str(item.get(key)) for key in ("code", "message") if item.get(key)))
    return f" ({'; '.join(part for part in parts if part)})" if any(parts) else ""
