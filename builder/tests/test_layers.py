"""Layers byte for byte: entry order, fixed metadata, the gzip header, host trees, refused inputs."""

from __future__ import annotations

import gzip
import hashlib
import io
import os
import socket
import stat
import tarfile
from collections.abc import Callable
from pathlib import Path

import pytest

from nodus.builder.layers import (
    COMPRESS_LEVEL,
    Entry,
    Kind,
    build_layer,
    keep_host_owner,
    normalize_path,
    source_date_epoch,
    tar_bytes,
    tree_entries,
)
from nodus.errors import BuildError, ConfigError

Sample = Callable[..., dict[str, Entry]]


def members(data: bytes) -> list[tarfile.TarInfo]:
    with tarfile.open(fileobj=io.BytesIO(data), mode="r:") as tar:
        return tar.getmembers()


def raw_names(data: bytes) -> list[bytes]:
    """Names as stored in the ustar headers (tarfile strips a directory's trailing slash when reading)."""
    return [data[m.offset : m.offset + 100].rstrip(b"\0") for m in members(data)]


def test_entries_are_sorted_with_parents_made_and_first(sample_entries: Sample) -> None:
    entries = dict(reversed(list(sample_entries().items())))
    entries["a-b"] = Entry.file(b"x")  # '-' sorts before '/': a plain string sort still keeps parents first
    entries["a/b/c"] = Entry.file(b"y")
    names = [m.name for m in members(tar_bytes(entries))]
    assert names == [
        "a",
        "a-b",
        "a/b",
        "a/b/c",
        "etc",
        "etc/greeting",
        "opt",
        "opt/environment",
        "opt/environment/task.json",
        "usr",
        "usr/bin",
        "usr/bin/greet",
        "usr/local",
        "usr/local/bin",
        "usr/local/bin/greet",
    ]
    for index, name in enumerate(names):
        assert all(parent in names[:index] for parent in map(str, Path(name).parents) if parent != ".")


def test_every_entry_has_the_fixed_metadata_and_its_own_owner_and_mode(sample_entries: Sample) -> None:
    data = tar_bytes(sample_entries(), epoch=1_700_000_000)
    found = {m.name: m for m in members(data)}
    for member in found.values():
        assert member.mtime == 1_700_000_000
        assert member.uname == "" and member.gname == ""
        assert member.pax_headers == {}  # short ASCII names: no PAX records at all, so no atime/ctime
    assert (found["opt/environment"].uid, found["opt/environment"].gid, found["opt/environment"].mode) == (
        10001,
        10001,
        0o700,
    )
    assert (found["etc"].uid, found["etc"].mode, found["etc"].isdir()) == (0, 0o755, True)
    assert found["usr/local/bin/greet"].mode == 0o755
    assert found["usr/bin/greet"].issym() and found["usr/bin/greet"].linkname == "../local/bin/greet"
    assert not any(name.startswith((b"./", b"/")) for name in raw_names(data))
    assert b"opt/environment/" in raw_names(data)


def test_long_names_and_big_ids_use_pax_records_but_never_times() -> None:
    long_name = "deep/" * 30 + "file-é.txt"
    data = tar_bytes({long_name: Entry.file(b"z", uid=3_000_000, gid=3_000_000)})
    member = members(data)[-1]
    assert member.name == long_name and member.uid == 3_000_000
    assert set(member.pax_headers) == {"path", "uid", "gid"}
    assert b"atime" not in data and b"ctime" not in data and b"mtime" not in data


def test_the_gzip_header_has_no_time_and_no_name_and_the_digests_name_the_bytes(sample_entries: Sample) -> None:
    blob = build_layer(sample_entries(), epoch=0)
    # magic, deflate, no flags (no FNAME), mtime 0, XFL 0 (level 6), OS 255 (unknown)
    assert blob.data[:10] == b"\x1f\x8b\x08\x00\x00\x00\x00\x00\x00\xff"
    assert COMPRESS_LEVEL == 6
    tar = gzip.decompress(blob.data)
    assert tar == tar_bytes(sample_entries(), epoch=0)
    assert blob.layer.diff_id == "sha256:" + hashlib.sha256(tar).hexdigest()
    assert blob.layer.digest == "sha256:" + hashlib.sha256(blob.data).hexdigest()
    assert blob.layer.size == len(blob.data)
    assert blob.layer.media_type == "application/vnd.oci.image.layer.v1.tar+gzip"


def test_source_date_epoch_sets_the_mtimes_and_zero_is_the_default(
    sample_entries: Sample, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("SOURCE_DATE_EPOCH", raising=False)
    unset = build_layer(sample_entries())
    assert unset == build_layer(sample_entries(), epoch=0)
    monkeypatch.setenv("SOURCE_DATE_EPOCH", "1234567890")
    dated = build_layer(sample_entries())
    assert {m.mtime for m in members(gzip.decompress(dated.data))} == {1234567890}
    assert dated.layer.diff_id != unset.layer.diff_id
    assert source_date_epoch({"SOURCE_DATE_EPOCH": ""}) == 0
    with pytest.raises(ConfigError, match="SOURCE_DATE_EPOCH"):
        source_date_epoch({"SOURCE_DATE_EPOCH": "yesterday"})


def test_a_host_file_gives_the_same_layer_as_its_bytes(tmp_path: Path) -> None:
    host = tmp_path / "data.bin"
    host.write_bytes(os.urandom(3 << 20))  # bigger than one copy chunk
    from_host = build_layer({"data.bin": Entry.file(host, mode=0o600)})
    from_bytes = build_layer({"data.bin": Entry.file(host.read_bytes(), mode=0o600)})
    assert from_host == from_bytes


def test_paths_are_normalised_and_bad_ones_refused() -> None:
    assert normalize_path("/usr//bin/./python3") == "usr/bin/python3"
    assert normalize_path("./etc/") == "etc"
    for bad in ("", "/", ".", "../etc/passwd", "usr/../../x"):
        with pytest.raises(BuildError, match="inside the image"):
            normalize_path(bad)
    with pytest.raises(BuildError, match="given twice"):
        tar_bytes({"etc/a": Entry.file(b"1"), "/etc/a": Entry.file(b"2")})
    with pytest.raises(BuildError, match="which is a file"):
        tar_bytes({"etc": Entry.file(b"1"), "etc/a": Entry.file(b"2")})
    with pytest.raises(BuildError, match="which is a symlink"):
        tar_bytes({"lib": Entry.symlink("usr/lib"), "lib/libc.so.6": Entry.file(b"2")})


def test_entries_refuse_impossible_metadata(tmp_path: Path) -> None:
    with pytest.raises(BuildError, match="permissions"):
        Entry.file(b"", mode=0o100644)
    with pytest.raises(BuildError, match="negative"):
        Entry.directory(uid=-1)
    with pytest.raises(BuildError, match="either bytes or a host path"):
        Entry(Kind.FILE, 0o644, data=b"x", source=tmp_path)
    with pytest.raises(BuildError, match="target"):
        Entry.symlink("")
    with pytest.raises(BuildError, match="cannot read"):
        tar_bytes({"gone": Entry.file(tmp_path / "missing")})


def make_tree(root: Path) -> None:
    (root / "bin").mkdir(parents=True)
    (root / "bin" / "tool").write_bytes(b"#!/bin/sh\n")
    (root / "bin" / "tool").chmod(0o750)
    (root / "data").mkdir(mode=0o700)
    (root / "data").chmod(0o700)
    (root / "data" / "b.txt").write_bytes(b"b")
    (root / "data" / "a.txt").write_bytes(b"a")
    (root / "data" / "a.txt").chmod(0o640)
    (root / "data" / "__pycache__").mkdir()
    (root / "data" / "__pycache__" / "a.pyc").write_bytes(b"junk")
    (root / "link").symlink_to("data/a.txt")
    (root / "outside").symlink_to("/etc")
    os.link(root / "data" / "b.txt", root / "hardlink.txt")


def test_a_host_tree_keeps_modes_and_symlinks_in_sorted_order(tmp_path: Path) -> None:
    make_tree(tmp_path / "tree")
    entries = tree_entries(tmp_path / "tree", prefix="/opt/app/", exclude=lambda rel: Path(rel).name == "__pycache__")
    assert list(entries) == sorted(entries)
    assert list(entries) == [
        "opt/app",
        "opt/app/bin",
        "opt/app/bin/tool",
        "opt/app/data",
        "opt/app/data/a.txt",
        "opt/app/data/b.txt",
        "opt/app/hardlink.txt",
        "opt/app/link",
        "opt/app/outside",
    ]
    assert entries["opt/app/bin/tool"].mode == 0o750 and entries["opt/app/data"].mode == 0o700
    assert entries["opt/app/data/a.txt"].mode == 0o640
    assert entries["opt/app/link"] == Entry.symlink("data/a.txt")
    assert entries["opt/app/outside"] == Entry.symlink("/etc")  # kept, never followed
    assert {(e.uid, e.gid) for e in entries.values()} == {(0, 0)}
    found = {m.name: m for m in members(tar_bytes(entries))}
    assert found["opt/app/hardlink.txt"].isfile() and found["opt/app/hardlink.txt"].size == 1
    assert found["opt"].isdir() and found["opt"].mode == 0o755


def test_owner_rules_map_owners(tmp_path: Path) -> None:
    make_tree(tmp_path / "tree")
    kept = tree_entries(tmp_path / "tree", owner=keep_host_owner)
    assert {(e.uid, e.gid) for e in kept.values()} == {(os.getuid(), os.getgid())}

    def grader_owns_data(path: str, host: os.stat_result) -> tuple[int, int]:
        return (10001, 10001) if path.startswith("data") else (0, 0)

    ruled = tree_entries(tmp_path / "tree", owner=grader_owns_data)
    assert (ruled["data/a.txt"].uid, ruled["bin/tool"].uid) == (10001, 0)


def test_devices_fifos_and_sockets_are_left_out(tmp_path: Path) -> None:
    root = tmp_path / "tree"
    root.mkdir()
    (root / "file").write_bytes(b"f")
    os.mkfifo(root / "fifo")
    server = socket.socket(socket.AF_UNIX)
    server.bind(str(root / "sock"))
    expected_gone = {"fifo", "sock"}
    try:
        os.mknod(root / "null", 0o666 | stat.S_IFCHR, os.makedev(1, 3))
        expected_gone.add("null")
    except PermissionError:
        pass  # no CAP_MKNOD here: the fifo and the socket take the same path through the code
    try:
        entries = tree_entries(root)
    finally:
        server.close()
    assert list(entries) == ["file"]
    assert expected_gone <= {p.name for p in root.iterdir()}
    assert all(m.isfile() for m in members(tar_bytes(entries)))


def test_a_missing_tree_is_a_build_error(tmp_path: Path) -> None:
    with pytest.raises(BuildError, match="not a directory"):
        tree_entries(tmp_path / "nope")
