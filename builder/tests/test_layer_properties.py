"""Property: any file tree gives the same layer twice, whatever order its mapping was built in.

Trees are random names (unicode, dots, dashes, spaces), nesting, modes, owners, contents and symlinks.
"""

from __future__ import annotations

import gzip
import io
import tarfile

from hypothesis import given, settings
from hypothesis import strategies as st

from nodus.builder.layers import Entry, build_layer, tar_bytes

NAMES = st.text(alphabet="abcXYZ019._- é", min_size=1, max_size=12).filter(lambda n: n not in (".", ".."))
MODES = st.sampled_from([0o644, 0o600, 0o755, 0o700, 0o4755, 0o1777, 0o444])
OWNERS = st.sampled_from([0, 1000, 10001, 65534])


@st.composite
def trees(draw: st.DrawFn, prefix: str = "", depth: int = 0) -> dict[str, Entry]:
    entries: dict[str, Entry] = {}
    for name in draw(st.lists(NAMES, max_size=5, unique=True)):
        path = f"{prefix}{name}"
        kinds = ["file", "symlink", "directory"] if depth < 3 else ["file", "symlink"]
        kind = draw(st.sampled_from(kinds))
        owner = draw(OWNERS)
        if kind == "file":
            entries[path] = Entry.file(draw(st.binary(max_size=2000)), mode=draw(MODES), uid=owner, gid=owner)
        elif kind == "symlink":
            entries[path] = Entry.symlink(draw(st.sampled_from(["../x", "/usr/bin/python3", name, "a/b"])))
        else:
            if draw(st.booleans()):  # sometimes listed, sometimes only implied by its children
                entries[path] = Entry.directory(mode=draw(MODES), uid=owner, gid=owner)
            entries.update(draw(trees(prefix=f"{path}/", depth=depth + 1)))
    return entries


@settings(max_examples=60, deadline=None)
@given(tree=trees(), data=st.data(), epoch=st.sampled_from([0, 1, 1_700_000_000]))
def test_the_same_tree_in_any_order_gives_the_same_layer(
    tree: dict[str, Entry], data: st.DataObject, epoch: int
) -> None:
    shuffled = dict(data.draw(st.permutations(list(tree.items()))))
    first = build_layer(tree, epoch=epoch)
    assert build_layer(tree, epoch=epoch) == first
    assert build_layer(shuffled, epoch=epoch) == first
    assert gzip.decompress(first.data) == tar_bytes(shuffled, epoch=epoch)
    with tarfile.open(fileobj=io.BytesIO(gzip.decompress(first.data))) as tar:
        found = tar.getmembers()
    names = [member.name for member in found]
    assert names == sorted(names) and set(tree) <= set(names)
    assert all(m.mtime == epoch and m.uname == m.gname == "" for m in found)
    assert all(not {"atime", "ctime", "mtime"} & set(m.pax_headers) for m in found)
