"""Folders and files only their owner may read: the state folder (0700) and the secrets nodus keeps in it.

Who calls it: `Store` (the state folder, `.nodus/` or `NODUS_HOME`, and the image store's blobs) and the SQLite
state store (`state.db`, its WAL, shared-memory and rollback journal files). The state folder holds receipts,
key hashes, stored answers of idempotent requests and Environment packages with their answers, so nothing in it
is for other users. New folders and files are made with their mode at creation (never wider for a moment);
`tighten` narrows what an older nodus left readable by others.
"""

from __future__ import annotations

import contextlib
import os
import stat
import tempfile
from pathlib import Path

FOLDER_MODE = 0o700
FILE_MODE = 0o600
_OTHERS = 0o077
"""Bits of the group and of everyone else."""


def make_folder(path: Path) -> bool:
    """Create `path` as a 0700 folder (missing parents get the usual modes); whether it was created now.

    The mode is given to mkdir, so the folder is never open to others, not even between creating and chmod."""
    if path.is_dir():
        return False
    path.parent.mkdir(parents=True, exist_ok=True)
    try:
        path.mkdir(mode=FOLDER_MODE)
    except FileExistsError:
        return False  # another process made it first; `tighten` narrows it if that was an older nodus
    return True


def tighten(path: Path) -> bool:
    """Take the group's and everyone else's bits off `path` (a folder 0755 -> 0700, a file 0644 -> 0600, an
    executable 0755 -> 0700); whether it changed. Only our own files: another user's (a shared NODUS_HOME) are
    theirs to change, and a link is left alone (chmod would follow it)."""
    try:
        info = path.lstat()
    except FileNotFoundError:
        return False
    mode = stat.S_IMODE(info.st_mode)
    if stat.S_ISLNK(info.st_mode) or info.st_uid != os.geteuid() or not mode & _OTHERS:
        return False
    with contextlib.suppress(FileNotFoundError):  # removed meanwhile (a WAL file at the last close)
        os.chmod(path, mode & ~_OTHERS)
        return True
    return False


def write_file(target: Path, data: bytes) -> None:
    """Write `target` whole and 0600: a temporary file beside it (mkstemp makes it 0600), then a rename, so
    readers never see half a file and others never see any of it. Missing folders are made 0700."""
    target.parent.mkdir(mode=FOLDER_MODE, parents=True, exist_ok=True)
    handle, temporary = tempfile.mkstemp(prefix=".nodus-", dir=target.parent)
    try:
        with os.fdopen(handle, "wb") as out:
            out.write(data)
        os.replace(temporary, target)
    except BaseException:
        Path(temporary).unlink(missing_ok=True)
        raise
