"""The registry client: references, URLs and auth headers (pure), then push and pull against real registries.

Live tests (`registry` marker) use Debian's docker-registry on a free loopback port (`local_registry`) and,
for what a well-behaved registry never does (answer another digest, send corrupt bytes, ask for a login),
`FakeRegistry`: a small in-memory distribution API on 127.0.0.1 in a thread. Nothing leaves loopback.
"""

from __future__ import annotations

import base64
import contextlib
import hashlib
import json
import socket
import subprocess
import threading
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from urllib.parse import parse_qs, urlsplit

import pytest

from nodus.builder.layers import Entry
from nodus.builder.oci import (
    INDEX_MEDIA_TYPE,
    MANIFEST_MEDIA_TYPE,
    Descriptor,
    ImageRef,
    NewLayer,
    add_layer,
    blob_path,
    canonical_json,
    list_tags,
    read_blob,
    read_image,
    resolve,
    tag_manifest,
    write_blob,
    write_image,
)
from nodus.builder.registry import (
    EMPTY_MEDIA_TYPE,
    Challenge,
    Credentials,
    RegistryRef,
    attachment_tag,
    is_loopback,
    parse_challenges,
    pull,
    push,
    resolve_tag,
    token_url,
    upload_url,
)
from nodus.errors import BuildError, ConfigError

Sample = Callable[..., dict[str, Entry]]
DIGEST = "sha256:" + "ab" * 32
PROVENANCE_TYPE = "application/vnd.in-toto+json"


@pytest.fixture(autouse=True)
def _anonymous(monkeypatch: pytest.MonkeyPatch) -> None:
    """Tests choose their credentials; none leak in from the environment."""
    monkeypatch.delenv("NODUS_REGISTRY_USERNAME", raising=False)
    monkeypatch.delenv("NODUS_REGISTRY_PASSWORD", raising=False)


@pytest.fixture
def image(tmp_path: Path, sample_entries: Sample) -> ImageRef:
    """A one-layer image tagged `v1` in the layout `tmp_path/store`."""
    layout = tmp_path / "store"
    layer = add_layer(layout, sample_entries(), epoch=0)
    return write_image(layout, "v1", [NewLayer(layer, "files")], epoch=0)


def layout_blobs(layout: Path, digest: str) -> dict[str, bytes]:
    """Every blob a manifest needs (itself, its children, config, layers), by digest."""
    raw = read_blob(layout, digest)
    manifest = json.loads(raw)
    found = {digest: raw}
    for child in manifest.get("manifests", []):
        found |= layout_blobs(layout, child["digest"])
    for blob in [manifest["config"], *manifest.get("layers", [])] if "config" in manifest else []:
        found[blob["digest"]] = read_blob(layout, blob["digest"])
    return found


def write_artifact(layout: Path, subject: Descriptor, payload: bytes, tag: str) -> Descriptor:
    """A provenance-like artifact manifest about `subject`: the empty config, one JSON layer, tagged `tag`."""
    empty = write_blob(layout, b"{}", EMPTY_MEDIA_TYPE)
    layer = write_blob(layout, payload, PROVENANCE_TYPE)
    manifest = {
        "schemaVersion": 2,
        "mediaType": MANIFEST_MEDIA_TYPE,
        "artifactType": PROVENANCE_TYPE,
        "config": empty.to_json(),
        "layers": [layer.to_json()],
        "subject": subject.to_json(),
        "annotations": {"org.opencontainers.image.created": "1970-01-01T00:00:00Z"},
    }
    descriptor = write_blob(layout, canonical_json(manifest), MANIFEST_MEDIA_TYPE)
    tag_manifest(layout, tag, descriptor)
    return descriptor


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port: int = probe.getsockname()[1]
        return port


# -- references and URLs --------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "host", "repository", "scheme"),
    [
        ("127.0.0.1:5000/nodus/envs", "127.0.0.1:5000", "nodus/envs", "http"),
        ("localhost/envs", "localhost", "envs", "http"),
        ("[::1]:5000/a/b", "[::1]:5000", "a/b", "http"),
        ("registry.example.com/team/grader-images", "registry.example.com", "team/grader-images", "https"),
        ("registry.example.com:443/a__b.c", "registry.example.com:443", "a__b.c", "https"),
    ],
)
def test_registry_reference_parts_and_scheme(text: str, host: str, repository: str, scheme: str) -> None:
    ref = RegistryRef.parse(text)
    assert (ref.host, ref.repository, ref.scheme, str(ref)) == (host, repository, scheme, text)
    assert RegistryRef.parse(text, insecure=True).scheme == "http"


@pytest.mark.parametrize(
    ("text", "complaint"),
    [
        ("nodus/envs", "names no registry host"),
        ("envs", "names no registry host"),
        ("registry.example.com", "names no registry host"),
        ("https://registry.example.com/envs", "has a URL scheme"),
        ("registry.example.com/envs:v1", "has a tag or digest"),
        (f"registry.example.com/envs@{DIGEST}", "has a tag or digest"),
        ("registry.example.com/Envs", "is not valid"),
        ("registry.example.com/envs/", "is not valid"),
        ("bad_host.example/envs", "is not a host name"),
    ],
)
def test_bad_registry_references_are_config_errors(text: str, complaint: str) -> None:
    with pytest.raises(ConfigError, match=complaint) as caught:
        RegistryRef.parse(text)
    assert repr(text) in caught.value.message and "\n" not in caught.value.message and caught.value.hint


def test_loopback_hosts() -> None:
    assert all(is_loopback(host) for host in ["127.0.0.1", "127.0.0.1:5000", "127.9.8.7", "localhost:1", "[::1]:5"])
    assert not any(is_loopback(host) for host in ["10.0.0.1:5000", "example.com", "[::2]:5000", "localhost.example"])


def test_api_urls() -> None:
    ref = RegistryRef.parse("127.0.0.1:5000/nodus/envs")
    assert ref.base_url == "http://127.0.0.1:5000/v2/"
    assert ref.url("manifests", "v1") == "http://127.0.0.1:5000/v2/nodus/envs/manifests/v1"
    assert ref.url("blobs", DIGEST) == f"http://127.0.0.1:5000/v2/nodus/envs/blobs/{DIGEST}"
    assert ref.url("blobs/uploads") == "http://127.0.0.1:5000/v2/nodus/envs/blobs/uploads/"
    assert RegistryRef.parse("r.example/x").url("manifests", DIGEST) == f"https://r.example/v2/x/manifests/{DIGEST}"


@pytest.mark.parametrize(
    ("location", "expected"),
    [
        # distribution 2.8 answers an absolute Location with its own state in the query.
        ("http://h:1/v2/r/blobs/uploads/u1?_state=s%3D", "http://h:1/v2/r/blobs/uploads/u1?_state=s%3D&digest="),
        ("/v2/r/blobs/uploads/u1?_state=abc", "http://h:1/v2/r/blobs/uploads/u1?_state=abc&digest="),
        ("/v2/r/blobs/uploads/u1", "http://h:1/v2/r/blobs/uploads/u1?digest="),
        ("u1?digest=old&a=1", "http://h:1/v2/r/blobs/uploads/u1?a=1&digest="),
        ("https://storage.example/up/u1?sig=x", "https://storage.example/up/u1?sig=x&digest="),
    ],
)
def test_upload_url_resolves_the_location_and_keeps_its_query(location: str, expected: str) -> None:
    url = upload_url("http://h:1/v2/r/blobs/uploads/", location, DIGEST)
    assert url == expected + DIGEST.replace(":", "%3A")
    assert parse_qs(urlsplit(url).query)["digest"] == [DIGEST]


def test_attachment_tag_is_the_referrers_fallback_tag() -> None:
    assert attachment_tag(DIGEST) == "sha256-" + "ab" * 32 + ".att"
    assert attachment_tag(DIGEST, "sig") == "sha256-" + "ab" * 32 + ".sig"
    with pytest.raises(ConfigError, match="is not a sha256 digest"):
        attachment_tag("sha256:xyz")


# -- authorization headers -------------------------------------------------------------------------


def test_bearer_challenge_with_a_comma_in_a_quoted_scope() -> None:
    header = 'Bearer realm="https://auth.example/token",service="registry.example",scope="repository:a/b:pull,push"'
    assert parse_challenges(header) == [
        Challenge(
            "bearer",
            {"realm": "https://auth.example/token", "service": "registry.example", "scope": "repository:a/b:pull,push"},
        )
    ]


def test_several_challenges_unquoted_and_escaped_values() -> None:
    header = 'Basic realm="say \\"hi\\"", charset=UTF-8, Bearer realm=https://t.example/x ,error="invalid_token"'
    assert parse_challenges(header) == [
        Challenge("basic", {"realm": 'say "hi"', "charset": "UTF-8"}),
        Challenge("bearer", {"realm": "https://t.example/x", "error": "invalid_token"}),
    ]
    assert parse_challenges("") == []
    assert parse_challenges("Basic") == [Challenge("basic", {})]


def test_token_url_adds_service_and_scope_to_the_realm() -> None:
    challenge = Challenge(
        "bearer", {"realm": "https://a.example/token?x=1", "service": "s", "scope": "repository:r:pull"}
    )
    assert token_url(challenge) == "https://a.example/token?x=1&service=s&scope=repository%3Ar%3Apull"
    assert token_url(Challenge("bearer", {"realm": "https://a.example/token"})) == "https://a.example/token"
    with pytest.raises(BuildError, match="not an http"):
        token_url(Challenge("bearer", {"service": "s"}))


def test_credentials_come_from_both_variables_or_none(monkeypatch: pytest.MonkeyPatch) -> None:
    assert Credentials.from_env() is None
    monkeypatch.setenv("NODUS_REGISTRY_USERNAME", "robot")
    with pytest.raises(ConfigError, match="NODUS_REGISTRY_USERNAME is set but NODUS_REGISTRY_PASSWORD is not"):
        Credentials.from_env()
    monkeypatch.setenv("NODUS_REGISTRY_PASSWORD", "s3cret:x")
    credentials = Credentials.from_env()
    assert credentials == Credentials("robot", "s3cret:x") and "s3cret" not in repr(credentials)
    assert credentials.basic() == "Basic " + base64.b64encode(b"robot:s3cret:x").decode()


def test_an_unreachable_registry_is_one_line_naming_it(image: ImageRef) -> None:
    target = RegistryRef.parse(f"127.0.0.1:{free_port()}/nodus/envs")
    with pytest.raises(BuildError) as caught:
        push(image.layout, "v1", target, tags=["v1"])
    message = caught.value.message
    assert message.startswith(f"registry {target.host}, repository nodus/envs: check for blob sha256:")
    assert "cannot reach the registry over http (Connection refused)" in message and "\n" not in message
    assert caught.value.hint == "is the registry running and reachable?"


def test_push_refuses_bad_tags_and_unknown_references(image: ImageRef) -> None:
    target = RegistryRef.parse("127.0.0.1:1/x")
    with pytest.raises(ConfigError, match="image tag 'a b' is not valid"):
        push(image.layout, "v1", target, tags=["a b"])
    with pytest.raises(ConfigError, match="no image tagged 'v2'"):
        push(image.layout, "v2", target)
    with pytest.raises(BuildError, match=f"blob {DIGEST} is missing"):
        push(image.layout, DIGEST, target)
    with pytest.raises(ConfigError, match="not a sha256 digest"):
        pull(target, "v1", image.layout, tag="v1")


# -- against Debian's docker-registry -------------------------------------------------------------


@pytest.mark.registry
def test_push_then_pull_by_digest_keeps_every_byte(local_registry: str, image: ImageRef, tmp_path: Path) -> None:
    target = RegistryRef.parse(f"{local_registry}/nodus/envs")
    result = push(image.layout, "v1", target, tags=["v1", "latest"])
    pushed = layout_blobs(image.layout, image.manifest_digest)
    assert result.digest == image.manifest_digest and result.media_type == MANIFEST_MEDIA_TYPE
    assert set(result.uploaded) == set(pushed) - {image.manifest_digest} and result.skipped == ()
    assert result.reference == f"{local_registry}/nodus/envs@{image.manifest_digest}"
    assert resolve_tag(target, "v1") == resolve_tag(target, "latest") == image.manifest_digest

    fresh = tmp_path / "fresh"
    descriptor = pull(target, result.digest, fresh, tag="pulled")
    assert descriptor == resolve(image.layout, "v1") == resolve(fresh, "pulled")
    assert layout_blobs(fresh, descriptor.digest) == pushed
    assert read_image(fresh, "pulled").layers == read_image(image.layout, "v1").layers


@pytest.mark.registry
def test_a_second_push_uploads_nothing(local_registry: str, image: ImageRef) -> None:
    target = RegistryRef.parse(f"{local_registry}/nodus/envs")
    first = push(image.layout, "v1", target, tags=["v1"])
    again = push(image.layout, image.manifest_digest, target, tags=[])  # by digest, no tag: PUT by digest
    assert again.uploaded == () and set(again.skipped) == set(first.uploaded)
    assert again.digest == first.digest


@pytest.mark.registry
def test_pulling_twice_fetches_no_blob_again(local_registry: str, image: ImageRef, tmp_path: Path) -> None:
    target = RegistryRef.parse(f"{local_registry}/nodus/envs")
    push(image.layout, "v1", target, tags=["v1"])
    fresh = tmp_path / "fresh"
    pull(target, image.manifest_digest, fresh, tag="a")
    stamps = {path: path.stat().st_mtime_ns for path in (fresh / "blobs" / "sha256").iterdir()}
    pull(target, image.manifest_digest, fresh, tag="b")
    assert {path: path.stat().st_mtime_ns for path in (fresh / "blobs" / "sha256").iterdir()} == stamps
    assert list_tags(fresh) == ["a", "b"]


@pytest.mark.registry
def test_skopeo_sees_the_digest_we_pushed_and_copies_it(
    local_registry: str, image: ImageRef, tmp_path: Path, need_tool: Callable[[str], str]
) -> None:
    skopeo = need_tool("skopeo")
    target = RegistryRef.parse(f"{local_registry}/nodus/envs")
    push(image.layout, "v1", target, tags=["v1"])
    source = f"docker://{target}@{image.manifest_digest}"
    inspected = subprocess.run(
        [skopeo, "inspect", "--tls-verify=false", source], capture_output=True, text=True, timeout=60, check=False
    )
    assert inspected.returncode == 0, inspected.stderr
    assert json.loads(inspected.stdout)["Digest"] == image.manifest_digest
    copied = tmp_path / "copied"
    copy = [skopeo, "copy", "--src-tls-verify=false", source, f"oci:{copied}:copy"]
    result = subprocess.run(copy, capture_output=True, text=True, timeout=60, check=False)
    assert result.returncode == 0, result.stderr
    assert resolve(copied, "copy").digest == image.manifest_digest
    assert layout_blobs(copied, image.manifest_digest) == layout_blobs(image.layout, image.manifest_digest)


@pytest.mark.registry
def test_an_artifact_with_a_subject_keeps_its_digest(local_registry: str, image: ImageRef, tmp_path: Path) -> None:
    subject = resolve(image.layout, "v1")
    tag = attachment_tag(subject.digest)
    artifact = write_artifact(image.layout, subject, b'{"predicateType":"https://slsa.dev/provenance/v1"}', tag)
    target = RegistryRef.parse(f"{local_registry}/nodus/envs")
    push(image.layout, "v1", target, tags=["v1"])
    result = push(image.layout, tag, target, tags=[tag])
    assert result.digest == artifact.digest and len(result.uploaded) == 2  # the empty config and the statement
    assert resolve_tag(target, tag) == artifact.digest

    fresh = tmp_path / "fresh"
    assert pull(target, artifact.digest, fresh, tag=tag) == artifact
    manifest = json.loads(read_blob(fresh, artifact.digest))
    assert manifest["subject"] == subject.to_json() and manifest["artifactType"] == PROVENANCE_TYPE
    assert layout_blobs(fresh, artifact.digest) == layout_blobs(image.layout, artifact.digest)


@pytest.mark.registry
def test_an_image_index_goes_up_with_its_children(local_registry: str, tmp_path: Path, sample_entries: Sample) -> None:
    layout = tmp_path / "store"
    children = []
    for name in ("a", "b"):
        layer = add_layer(layout, sample_entries(name.encode()), epoch=0)
        children.append(write_image(layout, name, [NewLayer(layer, name)], epoch=0))
    index = {
        "schemaVersion": 2,
        "mediaType": INDEX_MEDIA_TYPE,
        "manifests": [
            {**resolve(layout, child.tag).to_json(), "platform": {"architecture": arch, "os": "linux"}}
            for child, arch in zip(children, ("amd64", "arm64"), strict=True)
        ],
    }
    descriptor = write_blob(layout, canonical_json(index), INDEX_MEDIA_TYPE)
    target = RegistryRef.parse(f"{local_registry}/nodus/multi")
    result = push(layout, descriptor.digest, target, tags=["multi"])
    assert result.digest == descriptor.digest and result.media_type == INDEX_MEDIA_TYPE
    assert len(result.uploaded) == 4  # two configs, two layers
    fresh = tmp_path / "fresh"
    assert pull(target, descriptor.digest, fresh, tag="multi") == descriptor
    assert layout_blobs(fresh, descriptor.digest) == layout_blobs(layout, descriptor.digest)


@pytest.mark.registry
def test_pulling_a_digest_the_registry_lacks_is_a_clear_error(local_registry: str, tmp_path: Path) -> None:
    target = RegistryRef.parse(f"{local_registry}/nodus/envs")
    with pytest.raises(BuildError) as caught:
        pull(target, DIGEST, tmp_path / "fresh", tag="x")
    assert caught.value.message == (
        f"registry {local_registry}, repository nodus/envs: pull of manifest {DIGEST} failed: "
        "HTTP 404 (MANIFEST_UNKNOWN manifest unknown)"
    )
    assert list_tags(tmp_path / "fresh") == []
    with pytest.raises(BuildError, match="lookup of manifest nope failed: HTTP 404"):
        resolve_tag(target, "nope")


# -- against a registry that misbehaves ----------------------------------------------------------------

TOKEN = "t0k3n"


@dataclass
class FakeRegistry:
    """The part of the distribution API push and pull use, in memory, with knobs to misbehave."""

    host: str = ""
    blobs: dict[str, bytes] = field(default_factory=dict)
    manifests: dict[str, tuple[bytes, str]] = field(default_factory=dict)
    seen: list[tuple[str, str, str | None]] = field(default_factory=list)  # method, path, Authorization
    absolute_location: bool = False
    answer_digest: str | None = None  # the Docker-Content-Digest a manifest PUT answers ("" for none)
    redirect_blobs_to: str | None = None  # blob GETs answer 307 to this host (object storage)
    corrupt: bool = False  # GETs send other bytes than were stored
    auth: str | None = None  # "basic" or "bearer"
    failure: tuple[int, bytes] | None = None

    def handle(self, request: BaseHTTPRequestHandler) -> None:
        body = request.rfile.read(int(request.headers.get("Content-Length") or 0))
        authorization = request.headers.get("Authorization")
        self.seen.append((request.command, request.path, authorization))
        url = urlsplit(request.path)
        if url.path == "/token":
            ok = authorization == "Basic " + base64.b64encode(b"robot:pw").decode()
            return self.answer(request, 200 if ok else 401, json.dumps({"token": TOKEN}).encode() if ok else b"")
        if self.auth and authorization != self.expected_authorization():
            challenge = 'Basic realm="fake"' if self.auth == "basic" else self.bearer_challenge(url.path)
            return self.answer(request, 401, b"", {"WWW-Authenticate": challenge})
        if self.failure:
            return self.answer(request, *self.failure)
        _, _, repository_and_rest = url.path.partition("/v2/")
        if "/blobs/uploads/" in repository_and_rest:
            return self.upload(request, url.path, parse_qs(url.query), body)
        kind, reference = repository_and_rest.rsplit("/", 2)[1:]
        if request.command == "PUT":
            digest = "sha256:" + hashlib.sha256(body).hexdigest()
            self.manifests[reference] = self.manifests[digest] = (body, request.headers["Content-Type"])
            answered = digest if self.answer_digest is None else self.answer_digest
            return self.answer(request, 201, b"", {"Docker-Content-Digest": answered} if answered else {})
        if kind == "blobs" and request.command == "GET" and self.redirect_blobs_to:
            return self.answer(request, 307, b"", {"Location": f"http://{self.redirect_blobs_to}{url.path}"})
        found = self.blobs.get(reference) if kind == "blobs" else self.manifests.get(reference, (None, ""))[0]
        if found is None:
            return self.answer(request, 404, b'{"errors":[{"code":"UNKNOWN","message":"not here"}]}')
        headers = {"Docker-Content-Digest": "sha256:" + hashlib.sha256(found).hexdigest()}
        if kind == "manifests":
            headers["Content-Type"] = self.manifests[reference][1]
        return self.answer(request, 200, found + b" " if self.corrupt else found, headers)

    def upload(self, request: BaseHTTPRequestHandler, path: str, query: dict[str, list[str]], body: bytes) -> None:
        if request.command == "POST":
            location = f"{path}u1?_state=abc"
            if self.absolute_location:
                location = f"http://{self.host}{location}"
            return self.answer(request, 202, b"", {"Location": location})
        digest = "sha256:" + hashlib.sha256(body).hexdigest()
        if query.get("_state") != ["abc"] or query.get("digest") != [digest]:
            return self.answer(request, 400, b'{"errors":[{"code":"DIGEST_INVALID","message":"bad upload"}]}')
        self.blobs[digest] = body
        return self.answer(request, 201, b"", {"Docker-Content-Digest": digest})

    def expected_authorization(self) -> str:
        return "Basic " + base64.b64encode(b"robot:pw").decode() if self.auth == "basic" else f"Bearer {TOKEN}"

    def bearer_challenge(self, path: str) -> str:
        repository = path.removeprefix("/v2/").split("/blobs/")[0].split("/manifests/")[0]
        realm = f"http://{self.host}/token"
        return f'Bearer realm="{realm}",service="fake",scope="repository:{repository}:pull,push"'

    @staticmethod
    def answer(
        request: BaseHTTPRequestHandler, status: int, body: bytes, headers: dict[str, str] | None = None
    ) -> None:
        request.send_response(status)
        for name, value in (headers or {}).items():
            request.send_header(name, value)
        request.send_header("Content-Type", (headers or {}).get("Content-Type", "application/json"))
        request.send_header("Content-Length", str(len(body)))
        request.end_headers()
        if request.command != "HEAD":
            request.wfile.write(body)


@contextlib.contextmanager
def serving(fake: FakeRegistry) -> Iterator[FakeRegistry]:
    """`fake` answering on 127.0.0.1 and a free port (in `fake.host`) from a thread, until the block ends."""

    class Handler(BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            fake.handle(self)

        def do_HEAD(self) -> None:
            fake.handle(self)

        def do_POST(self) -> None:
            fake.handle(self)

        def do_PUT(self) -> None:
            fake.handle(self)

        def log_message(self, format: str, *args: object) -> None:  # quiet test output
            pass

    with ThreadingHTTPServer(("127.0.0.1", 0), Handler) as server:
        fake.host = f"127.0.0.1:{server.server_address[1]}"
        thread = threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.01}, daemon=True)
        thread.start()
        try:
            yield fake
        finally:
            server.shutdown()
            thread.join()


@pytest.fixture
def start_fake() -> Iterator[Callable[[], FakeRegistry]]:
    """`start_fake()`: another FakeRegistry on its own port; all of them stop after the test."""
    with contextlib.ExitStack() as stack:
        yield lambda: stack.enter_context(serving(FakeRegistry()))


@pytest.fixture
def fake_registry(start_fake: Callable[[], FakeRegistry]) -> FakeRegistry:
    return start_fake()


@pytest.mark.parametrize("absolute", [False, True])
def test_relative_and_absolute_upload_locations(fake_registry: FakeRegistry, image: ImageRef, absolute: bool) -> None:
    fake_registry.absolute_location = absolute
    result = push(image.layout, "v1", RegistryRef.parse(f"{fake_registry.host}/x"), tags=["v1"])
    assert set(fake_registry.blobs) == set(result.uploaded) and len(result.uploaded) == 2
    assert all(fake_registry.blobs[digest] == read_blob(image.layout, digest) for digest in result.uploaded)
    assert fake_registry.manifests["v1"] == (read_blob(image.layout, result.digest), MANIFEST_MEDIA_TYPE)


def test_a_registry_that_stores_another_digest_is_caught(fake_registry: FakeRegistry, image: ImageRef) -> None:
    fake_registry.answer_digest = DIGEST
    with pytest.raises(BuildError) as caught:
        push(image.layout, "v1", RegistryRef.parse(f"{fake_registry.host}/x"), tags=["v1"])
    assert caught.value.message == (
        f"registry {fake_registry.host}, repository x: push of manifest {image.manifest_digest} as v1 failed: "
        f"the registry stored it as {DIGEST}"
    )


def test_a_manifest_that_hashes_to_another_digest_is_refused(
    fake_registry: FakeRegistry, image: ImageRef, tmp_path: Path
) -> None:
    source = RegistryRef.parse(f"{fake_registry.host}/x")
    push(image.layout, "v1", source, tags=["v1"])
    fake_registry.corrupt = True
    with pytest.raises(BuildError, match=f"pull of manifest {image.manifest_digest} failed: the registry sent bytes"):
        pull(source, image.manifest_digest, tmp_path / "fresh", tag="v1")
    assert list_tags(tmp_path / "fresh") == []


@pytest.mark.parametrize(
    ("corrupt", "complaint"),
    [
        (lambda data: data + b"!", "is longer than its"),
        (lambda data: data[:-1] + bytes([data[-1] ^ 1]), "does not match: .* bytes hashing to sha256:"),
        (lambda data: data[:-1], "does not match: .* expected"),
    ],
)
def test_a_corrupt_blob_is_never_stored(
    fake_registry: FakeRegistry,
    image: ImageRef,
    tmp_path: Path,
    corrupt: Callable[[bytes], bytes],
    complaint: str,
) -> None:
    source = RegistryRef.parse(f"{fake_registry.host}/x")
    push(image.layout, "v1", source, tags=["v1"])
    fake_registry.blobs = {digest: corrupt(data) for digest, data in fake_registry.blobs.items()}
    fresh = tmp_path / "fresh"
    with pytest.raises(BuildError, match=f"from registry {fake_registry.host}, repository x {complaint}"):
        pull(source, image.manifest_digest, fresh, tag="v1")
    assert list((fresh / "blobs" / "sha256").iterdir()) == [] and list_tags(fresh) == []
    assert sorted(path.name for path in fresh.iterdir()) == ["blobs", "oci-layout"]  # no temporary left over


def test_registry_error_messages_are_shown(fake_registry: FakeRegistry, image: ImageRef, tmp_path: Path) -> None:
    fake_registry.failure = (500, b'{"errors":[{"code":"UNKNOWN","message":"disk\\nfull","detail":{}}]}')
    source = RegistryRef.parse(f"{fake_registry.host}/x")
    with pytest.raises(BuildError) as caught:
        pull(source, image.manifest_digest, tmp_path / "fresh", tag="v1")
    assert caught.value.message.endswith(
        f"pull of manifest {image.manifest_digest} failed: HTTP 500 (UNKNOWN disk full)"
    )
    with pytest.raises(BuildError, match=r"check for blob sha256:[0-9a-f]{64} failed: HTTP 500$"):  # HEAD: no body
        push(image.layout, "v1", source)


def test_the_docker_token_flow(
    fake_registry: FakeRegistry, image: ImageRef, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    fake_registry.auth = "bearer"
    monkeypatch.setenv("NODUS_REGISTRY_USERNAME", "robot")
    monkeypatch.setenv("NODUS_REGISTRY_PASSWORD", "pw")
    target = RegistryRef.parse(f"{fake_registry.host}/team/x")
    push(image.layout, "v1", target, tags=["v1"])
    assert pull(target, image.manifest_digest, tmp_path / "fresh", tag="v1").digest == image.manifest_digest
    tokens = [path for method, path, _ in fake_registry.seen if path.startswith("/token")]
    assert tokens == ["/token?service=fake&scope=repository%3Ateam%2Fx%3Apull%2Cpush"] * 2  # once per session
    assert all(auth == f"Bearer {TOKEN}" for _, path, auth in fake_registry.seen[-3:])


def test_basic_auth_and_a_wrong_password(
    fake_registry: FakeRegistry, image: ImageRef, monkeypatch: pytest.MonkeyPatch
) -> None:
    fake_registry.auth = "basic"
    target = RegistryRef.parse(f"{fake_registry.host}/x")
    with pytest.raises(BuildError, match="failed: HTTP 401") as caught:
        push(image.layout, "v1", target, tags=["v1"])  # anonymous
    assert (
        caught.value.hint == "set NODUS_REGISTRY_USERNAME and NODUS_REGISTRY_PASSWORD for a registry that needs a login"
    )
    result = push(image.layout, "v1", target, tags=["v1"], credentials=Credentials("robot", "pw"))
    assert resolve_tag(target, "v1", credentials=Credentials("robot", "pw")) == result.digest == image.manifest_digest
    assert fake_registry.manifests["v1"][0] == read_blob(image.layout, image.manifest_digest)
    monkeypatch.setenv("NODUS_REGISTRY_USERNAME", "robot")
    monkeypatch.setenv("NODUS_REGISTRY_PASSWORD", "wrong")
    with pytest.raises(BuildError, match="lookup of manifest v1 failed: HTTP 401"):
        resolve_tag(target, "v1")


def test_without_a_digest_header_the_manifest_is_looked_up(fake_registry: FakeRegistry, image: ImageRef) -> None:
    fake_registry.answer_digest = ""
    result = push(image.layout, "v1", RegistryRef.parse(f"{fake_registry.host}/x"), tags=["v1"])
    assert result.digest == image.manifest_digest
    assert fake_registry.seen[-1][:2] == ("HEAD", f"/v2/x/manifests/{image.manifest_digest}")


def test_redirected_downloads_do_not_carry_our_authorization(
    start_fake: Callable[[], FakeRegistry], image: ImageRef, tmp_path: Path
) -> None:
    registry, storage = start_fake(), start_fake()
    registry.auth = "basic"
    credentials = Credentials("robot", "pw")
    source = RegistryRef.parse(f"{registry.host}/x")
    push(image.layout, "v1", source, tags=["v1"], credentials=credentials)
    storage.blobs = dict(registry.blobs)
    registry.redirect_blobs_to = storage.host
    assert pull(source, image.manifest_digest, tmp_path / "fresh", tag="v1", credentials=credentials).size > 0
    assert layout_blobs(tmp_path / "fresh", image.manifest_digest) == layout_blobs(image.layout, image.manifest_digest)
    assert sorted(path for _, path, _ in storage.seen) == sorted(f"/v2/x/blobs/{digest}" for digest in storage.blobs)
    assert {auth for _, _, auth in storage.seen} == {None}
    redirected = [auth for method, path, auth in registry.seen if method == "GET" and "/blobs/" in path]
    assert len(redirected) == len(storage.blobs) and set(redirected) == {credentials.basic()}  # sent there, not on


def test_a_layout_blob_of_the_wrong_size_is_not_pushed(fake_registry: FakeRegistry, image: ImageRef) -> None:
    layer = read_image(image.layout, "v1").layers[0]
    path = blob_path(image.layout, layer.digest)
    path.write_bytes(path.read_bytes()[:-1])
    with pytest.raises(BuildError, match=f"blob {layer.digest} \\({layer.size} bytes\\) of manifest .* is not in"):
        push(image.layout, "v1", RegistryRef.parse(f"{fake_registry.host}/x"), tags=["v1"])
    assert layer.digest not in fake_registry.blobs and fake_registry.manifests == {}
