"""Deterministic image layers: a set of files in, one gzip'd tar blob and its digests out.

Who calls it: nodus-build's build step (each layer of a grader image: the installed requirements, the
environment package, the frozen datasets) and `nodus.builder.oci`, which stores the blobs in an OCI layout.

Same entries -> same bytes. What could vary between two builds is pinned here:

- entries are written sorted by path, every parent directory before its children (missing parents are
  made: root-owned, 0755);
- every mtime is `SOURCE_DATE_EPOCH` (0 unless set); owners are numbers with empty user and group names;
- PAX format, and only the records tarfile needs (long names, big ids): no atime, no ctime;
- no device nodes, no `./` prefixes;
- gzip with mtime 0, no file name and a fixed level, compressed in fixed 1 MiB blocks (`ParallelGzip`).

The diff_id (sha256 of the tar) does not depend on the zlib version; the blob digest (sha256 of the gzip)
does, so a base image is pinned by its layers' diff_ids as well as its digest (FACTS.md).
"""

from __future__ import annotations

import hashlib
import io
import os
import stat
import struct
import tarfile
import zlib
from collections import deque
from collections.abc import Callable, Iterator, Mapping
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass
from enum import Enum
from pathlib import Path, PurePosixPath
from typing import TYPE_CHECKING, Protocol

from nodus.errors import BuildError, ConfigError

if TYPE_CHECKING:
    from _typeshed import ReadableBuffer

# Level 6 is the usual trade-off (the gzip tool's and Go's default): on Debian's stdlib it is ~19 MB/s here,
# 9 is seven times slower for 1% smaller. It is part of the layer's digest, so it never changes without a reason.
COMPRESS_LEVEL = 6
LAYER_MEDIA_TYPE = "application/vnd.oci.image.layer.v1.tar+gzip"
_CHUNK = 1 << 20


class Kind(Enum):
    """What a layer entry is; nothing else goes into a layer (no devices, fifos or sockets)."""

    FILE = "file"
    DIRECTORY = "directory"
    SYMLINK = "symlink"


@dataclass(frozen=True)
class Entry:
    """One path of a layer. Make it with `Entry.file`, `Entry.directory` or `Entry.symlink`."""

    kind: Kind
    mode: int
    uid: int = 0
    gid: int = 0
    data: bytes | None = None
    source: Path | None = None
    target: str = ""

    def __post_init__(self) -> None:
        if self.mode & ~0o7777:
            raise BuildError(f"layer entry mode {oct(self.mode)} has bits other than permissions")
        if self.uid < 0 or self.gid < 0:
            raise BuildError(f"layer entry owner {self.uid}:{self.gid} is negative")
        if self.kind is Kind.FILE and (self.data is None) == (self.source is None):
            raise BuildError("a file entry takes either bytes or a host path, not both or neither")
        if self.kind is Kind.SYMLINK and not self.target:
            raise BuildError("a symlink entry needs a target")

    @classmethod
    def file(cls, content: bytes | Path, *, mode: int = 0o644, uid: int = 0, gid: int = 0) -> Entry:
        """A regular file from bytes, or from a host file read when the layer is written."""
        if isinstance(content, Path):
            return cls(Kind.FILE, mode, uid, gid, source=content)
        return cls(Kind.FILE, mode, uid, gid, data=bytes(content))

    @classmethod
    def directory(cls, *, mode: int = 0o755, uid: int = 0, gid: int = 0) -> Entry:
        return cls(Kind.DIRECTORY, mode, uid, gid)

    @classmethod
    def symlink(cls, target: str, *, uid: int = 0, gid: int = 0) -> Entry:
        # Linux ignores a symlink's own mode; 0777 is what every tool writes.
        return cls(Kind.SYMLINK, 0o777, uid, gid, target=target)


@dataclass(frozen=True)
class Layer:
    """A written layer: `diff_id` names the tar (the config's rootfs), `digest`/`size` the gzip blob."""

    diff_id: str
    digest: str
    size: int
    media_type: str = LAYER_MEDIA_TYPE


@dataclass(frozen=True)
class LayerBlob:
    """A layer held in memory: the gzip bytes and what names them."""

    layer: Layer
    data: bytes


class Writable(Protocol):
    """Where layer bytes go: an open file, a BytesIO, a socket file."""

    def write(self, data: ReadableBuffer, /) -> object: ...


OwnerRule = Callable[[str, os.stat_result], tuple[int, int]]


def root_owner(path: str, host: os.stat_result) -> tuple[int, int]:
    """The default owner rule: everything belongs to root, whoever owns it on the build host."""
    return 0, 0


def keep_host_owner(path: str, host: os.stat_result) -> tuple[int, int]:
    """An owner rule that keeps the host's numeric owners (for trees staged with chown on purpose)."""
    return host.st_uid, host.st_gid


def source_date_epoch(environ: Mapping[str, str] | None = None) -> int:
    """`SOURCE_DATE_EPOCH` (reproducible-builds.org) as an int; 0 when unset or empty."""
    value = (os.environ if environ is None else environ).get("SOURCE_DATE_EPOCH", "").strip()
    if not value:
        return 0
    if not value.isdigit():
        raise ConfigError(
            f"SOURCE_DATE_EPOCH={value!r} is not a whole number of seconds",
            hint="unset it or set it to e.g. $(git log -1 --format=%ct)",
        )
    return int(value)


def normalize_path(path: str) -> str:
    """The path as it goes into the tar: relative, no `./`, no empty, `.` or `..` parts."""
    parts = [part for part in path.split("/") if part not in ("", ".")]
    if not parts or ".." in parts or "\0" in path:
        raise BuildError(f"layer path {path!r} does not name a file inside the image")
    return "/".join(parts)


def resolve_entries(entries: Mapping[str, Entry]) -> list[tuple[str, Entry]]:
    """Every entry once, sorted by path, with the parent directories the mapping left out.

    Plain string order already puts a parent before its children (a prefix sorts first), so sorting is
    the whole of "parents first". The mapping's own order never reaches the tar.
    """
    resolved: dict[str, Entry] = {}
    for raw, entry in entries.items():
        path = normalize_path(raw)
        if path in resolved:
            raise BuildError(f"layer path {path!r} is given twice ({raw!r} and another spelling)")
        resolved[path] = entry
    for path in list(resolved):
        for parent in PurePosixPath(path).parents:
            name = str(parent)
            if name == ".":
                continue
            found = resolved.setdefault(name, Entry.directory())
            if found.kind is not Kind.DIRECTORY:
                # A file or symlink in the middle of a path would make extraction depend on the runtime.
                raise BuildError(f"layer path {path!r} lies under {name!r}, which is a {found.kind.value}")
    return sorted(resolved.items(), key=lambda item: item[0])


def _tarinfo(path: str, entry: Entry, size: int, mtime: int) -> tarfile.TarInfo:
    info = tarfile.TarInfo(path)
    info.mode = entry.mode
    info.uid, info.gid = entry.uid, entry.gid
    info.uname = info.gname = ""
    info.mtime = mtime  # an int: a float would add a PAX mtime record
    info.size = size
    if entry.kind is Kind.DIRECTORY:
        info.type = tarfile.DIRTYPE
    elif entry.kind is Kind.SYMLINK:
        info.type, info.linkname = tarfile.SYMTYPE, entry.target
    else:
        info.type = tarfile.REGTYPE
    return info


def _add(tar: tarfile.TarFile, path: str, entry: Entry, mtime: int) -> None:
    if entry.kind is not Kind.FILE:
        tar.addfile(_tarinfo(path, entry, 0, mtime))
    elif entry.data is not None:
        tar.addfile(_tarinfo(path, entry, len(entry.data), mtime), io.BytesIO(entry.data))
    else:
        assert entry.source is not None  # guaranteed by Entry.__post_init__
        try:
            with entry.source.open("rb") as handle:
                size = os.fstat(handle.fileno()).st_size
                tar.addfile(_tarinfo(path, entry, size, mtime), handle)
        except OSError as exc:
            raise BuildError(f"cannot read {entry.source} for layer path {path!r}: {exc}") from exc


class _Digesting(io.RawIOBase):
    """A write-only stream that hashes and counts what passes through to `sink` (None: hash only)."""

    def __init__(self, sink: Writable | None) -> None:
        super().__init__()
        self.sink = sink
        self.hash = hashlib.sha256()
        self.size = 0

    def writable(self) -> bool:
        return True

    def write(self, data: ReadableBuffer, /) -> int:
        view = memoryview(data)
        self.hash.update(view)
        self.size += view.nbytes
        if self.sink is not None:
            self.sink.write(data)
        return view.nbytes

    def tell(self) -> int:
        # tarfile asks where it is to pad the archive; we are never seeked.
        return self.size

    @property
    def digest(self) -> str:
        return f"sha256:{self.hash.hexdigest()}"


def write_tar(entries: Mapping[str, Entry], out: Writable, *, epoch: int = 0) -> str:
    """Stream the uncompressed tar of `entries` into `out`; returns its diff_id (`sha256:...`)."""
    tee = _Digesting(out)
    # Big copy chunks: each one is a few Python calls (hash, gzip), so 16 KiB (tarfile's default) is slow.
    with tarfile.TarFile(fileobj=tee, mode="w", format=tarfile.PAX_FORMAT, encoding="utf-8", copybufsize=_CHUNK) as tar:
        for path, entry in resolve_entries(entries):
            _add(tar, path, entry, epoch)
    return tee.digest


def tar_bytes(entries: Mapping[str, Entry], *, epoch: int = 0) -> bytes:
    """The uncompressed tar in memory (small layers, tests)."""
    buffer = io.BytesIO()
    write_tar(entries, buffer, epoch=epoch)
    return buffer.getvalue()


def write_layer(entries: Mapping[str, Entry], out: Writable, *, epoch: int | None = None) -> Layer:
    """Stream the gzip'd layer into `out` in one pass; returns its diff_id, digest and size.

    `epoch` is every entry's mtime; None reads `SOURCE_DATE_EPOCH`.
    """
    mtime = source_date_epoch() if epoch is None else epoch
    compressed = _Digesting(out)
    with ParallelGzip(compressed) as gz:
        diff_id = write_tar(entries, gz, epoch=mtime)
    return Layer(diff_id=diff_id, digest=compressed.digest, size=compressed.size)


# The gzip header with no name and mtime 0 (flags 0, XFL 0, OS 255: what Python's gzip writes for them).
GZIP_HEADER = b"\x1f\x8b\x08\x00\x00\x00\x00\x00\x00\xff"
GZIP_BLOCK = 1 << 20
_DICTIONARY = 32 * 1024


class ParallelGzip(io.RawIOBase):
    """A gzip writer that compresses 1 MiB blocks on several threads and still gives the same bytes.

    The method is pigz's: each block is raw deflate, primed with the last 32 KiB of the block before it (so
    the ratio stays that of one stream) and ended with a sync flush; the last block finishes the stream.
    Block boundaries fall at fixed offsets of the input, so the output depends only on the input bytes and
    the level, never on the number of threads or their timing. zlib releases the GIL while it compresses:
    on two cores a large layer is written about twice as fast as with `gzip.GzipFile`.
    """

    def __init__(self, sink: Writable, *, level: int = COMPRESS_LEVEL, workers: int | None = None) -> None:
        super().__init__()
        self.sink = sink
        self.level = level
        self.workers = workers or min(8, os.cpu_count() or 1)
        self.pool = ThreadPoolExecutor(max_workers=self.workers)
        self.pending: deque[Future[bytes]] = deque()
        self.buffer = bytearray()
        self.previous_tail = b""
        self.crc = 0
        self.size = 0
        self.sink.write(GZIP_HEADER)

    def writable(self) -> bool:
        return True

    def write(self, data: ReadableBuffer, /) -> int:
        view = memoryview(data)
        self.crc = zlib.crc32(view, self.crc)
        self.size += view.nbytes
        self.buffer += view
        while len(self.buffer) >= GZIP_BLOCK:
            block = bytes(self.buffer[:GZIP_BLOCK])
            del self.buffer[:GZIP_BLOCK]
            self._submit(block, last=False)
        return view.nbytes

    def tell(self) -> int:
        return self.size

    def _submit(self, block: bytes, *, last: bool) -> None:
        self.pending.append(self.pool.submit(_deflate_block, block, self.previous_tail, self.level, last))
        self.previous_tail = block[-_DICTIONARY:]
        # Keep a bounded number of blocks in flight, written in order as they finish.
        while len(self.pending) > 2 * self.workers:
            self.sink.write(self.pending.popleft().result())

    def close(self) -> None:
        if self.closed:
            return
        try:
            self._submit(bytes(self.buffer), last=True)
            self.buffer.clear()
            while self.pending:
                self.sink.write(self.pending.popleft().result())
            self.sink.write(struct.pack("<II", self.crc & 0xFFFFFFFF, self.size & 0xFFFFFFFF))
        finally:
            self.pool.shutdown(wait=True)
            super().close()


def _deflate_block(block: bytes, dictionary: bytes, level: int, last: bool) -> bytes:
    compressor = zlib.compressobj(
        level, zlib.DEFLATED, -zlib.MAX_WBITS, 8, zlib.Z_DEFAULT_STRATEGY, *([dictionary] if dictionary else [])
    )
    return compressor.compress(block) + compressor.flush(zlib.Z_FINISH if last else zlib.Z_SYNC_FLUSH)


def build_layer(entries: Mapping[str, Entry], *, epoch: int | None = None) -> LayerBlob:
    """The gzip'd layer in memory with its digests (`write_layer` streams instead)."""
    buffer = io.BytesIO()
    layer = write_layer(entries, buffer, epoch=epoch)
    return LayerBlob(layer, buffer.getvalue())


def tree_entries(
    root: Path, *, prefix: str = "", owner: OwnerRule = root_owner, exclude: Callable[[str], bool] | None = None
) -> dict[str, Entry]:
    """The entries of a host directory tree, placed under `prefix` in the image.

    Walks in sorted order without following symlinks (they are kept as symlinks), keeps permission bits,
    maps owners with `owner(image path, host stat)` and skips device nodes, fifos and sockets. Hard links
    become separate files: the same bytes twice, but no dependence on which name the walk met first.
    `exclude(path relative to root)` leaves a path out, and everything below it (`__pycache__`, tests).
    """
    base = normalize_path(prefix) if prefix.strip("/.") else ""
    if not root.is_dir():
        raise BuildError(f"{root} is not a directory to make a layer from")
    walked = [(root, base)] if base else []
    for host, relative in _walk(root, "", exclude or _keep_all):
        walked.append((host, f"{base}/{relative}" if base else relative))
    found: dict[str, Entry] = {}
    for host, path in walked:
        entry = _host_entry(host, path, os.lstat(host), owner)
        if entry is not None:
            found[path] = entry
    return found


def _keep_all(relative: str) -> bool:
    return False


def _walk(folder: Path, relative: str, exclude: Callable[[str], bool]) -> Iterator[tuple[Path, str]]:
    """(host path, path relative to the root) for everything below `folder`, sorted, symlinks unfollowed."""
    with os.scandir(folder) as listing:
        names = sorted(item.name for item in listing)
    for name in names:
        host = folder / name
        rel = f"{relative}/{name}" if relative else name
        if exclude(rel):
            continue
        yield host, rel
        if host.is_dir() and not host.is_symlink():
            yield from _walk(host, rel, exclude)


def _host_entry(host: Path, path: str, info: os.stat_result, owner: OwnerRule) -> Entry | None:
    uid, gid = owner(path, info)
    mode = stat.S_IMODE(info.st_mode)
    if stat.S_ISDIR(info.st_mode):
        return Entry.directory(mode=mode, uid=uid, gid=gid)
    if stat.S_ISLNK(info.st_mode):
        return Entry.symlink(os.readlink(host), uid=uid, gid=gid)
    if stat.S_ISREG(info.st_mode):
        return Entry.file(host, mode=mode, uid=uid, gid=gid)
    return None  # device nodes, fifos, sockets: nothing a grader image should carry
