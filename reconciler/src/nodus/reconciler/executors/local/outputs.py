"""A job's outputs as recorded when it succeeded, and copies of them that are verified and all or nothing.

Who calls it: `LocalExecutor`'s `outputs` and `copy_outputs` (and `RayExecutor.copy_outputs`, with files fetched
from a registry), which `nodus cp` (`nodus.cli.jobs`), the SDK's
`run.outputs.download` (`nodus.recipes.runs`) and `spec.exportTo` (`nodus.reconciler.controllers.export`) use. The
supervisor writes `outputs.json` (`manifest_of`: a sha256 and size per regular file of outputs/) when the
trainer succeeds; a copy is taken from the file beside its final place, checked against that sha256, and only
when every file of the request checked are they renamed into place. A failure leaves nothing behind: no
partial file, no folder this copy made. A copy never follows a symbolic link: a source that is a link (or sits
under a folder of outputs/ that is one) is refused, never read; each file is written first to a new file beside
its final place, made exclusively under a fresh name (so a link planted there is never written through); a link
already at a final place is replaced, never written through, and no existing folder under the destination may be
a link: a copy never writes outside the destination. The same copy serves `nodus cp` out of a Volume
(`nodus.reconciler.controllers.volume_files`), with its own words for what is copied.

    wanted = recorded(files)                       # None until the generation succeeded
    sources = {"results.json": files.outputs / "results.json"}
    copy_verified(sources, [("results.json", Path("out/results.json"))], wanted, "TrainingJob/run")
"""

from __future__ import annotations

import contextlib
import errno
import hashlib
import json
import os
import secrets
import stat
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path, PurePosixPath
from typing import Any, BinaryIO

from nodus.errors import ConfigError

from ..protocol import OutputFile, OutputManifest
from .job import JobFiles

Recorded = Mapping[str, Mapping[str, Any]]
"""`path -> {"sha256", "size"}` of every output, as outputs.json records them."""


def recorded(files: JobFiles) -> dict[str, dict[str, Any]] | None:
    """Every output of the job folder's generation, or None when outputs.json is not there (not succeeded)."""
    manifest = _read_manifest(files)
    if manifest is None:
        return None
    entries = manifest.get("files")
    if not isinstance(entries, dict):
        raise ConfigError(f"{files.outputs_manifest} has no files object")
    return {str(path): dict(entry) for path, entry in entries.items() if isinstance(entry, dict)}


def manifest(files: JobFiles) -> OutputManifest | None:
    """outputs.json of the job folder's generation as the Executor protocol hands it out; None when it is not
    there (the generation has not succeeded). ConfigError naming the file when an entry is not a size and a
    sha256."""
    wanted = recorded(files)
    if wanted is None:
        return None
    entries: dict[str, OutputFile] = {}
    for path, entry in wanted.items():
        size, sha256 = entry.get("size"), entry.get("sha256")
        if isinstance(size, bool) or not isinstance(size, int) or not isinstance(sha256, str):
            raise ConfigError(f"{files.outputs_manifest}: {path!r} has no size and sha256")
        entries[path] = OutputFile(path, size, sha256)
    skipped = (_read_manifest(files) or {}).get("skipped") or []
    return OutputManifest(entries, tuple(str(path) for path in skipped if isinstance(path, str)))


def _read_manifest(files: JobFiles) -> dict[str, Any] | None:
    try:
        document = json.loads(files.outputs_manifest.read_text(encoding="utf-8"))
    except FileNotFoundError:
        return None
    except (ValueError, UnicodeDecodeError) as exc:
        raise ConfigError(f"{files.outputs_manifest} is not JSON ({exc})") from None
    if not isinstance(document, dict):
        raise ConfigError(f"{files.outputs_manifest} has no files object")
    return document


def inside(relative: str, manifest: Path) -> PurePosixPath:
    """An output's path, refused unless it stays inside outputs/ (outputs.json is a file anyone could edit)."""
    path = PurePosixPath(relative)
    if not path.parts or path.is_absolute() or ".." in path.parts:
        raise ConfigError(f"{manifest}: {relative!r} is not a path inside outputs/")
    return path


def sources_in(files: JobFiles, copies: Sequence[tuple[str, Path]], label: str) -> dict[str, Path]:
    """Where each output of `copies` is in the job folder (`inside` outputs/, or refused), none under a folder of
    outputs/ that is a link (swapped in after the outputs were recorded: never read)."""
    sources = {relative: files.outputs / inside(relative, files.outputs_manifest) for relative, _ in copies}
    for source in sources.values():
        refuse_links_between(files.outputs, source, lambda folder: f"outputs/{folder} of {label}")
    return sources


def refuse_links_between(base: Path, path: Path, named: Callable[[str], str]) -> None:
    """ConfigError when a folder between `base` (not itself) and `path` is a symbolic link; `named(relative
    path)` says what the folder is to the user."""
    for parent in reversed(path.parents):
        if parent == base or base not in parent.parents:
            continue
        if parent.is_symlink():
            shown = named(parent.relative_to(base).as_posix())
            raise ConfigError(f"{shown} is a symbolic link: it is never followed", hint="nothing was copied")


_READ = os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC
_CREATE = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC


def open_regular(path: Path) -> BinaryIO:
    """`path` opened for reading when it is a regular file, without following a link at its last part (the caller
    checks the folders above it: `refuse_links_between`); OSError ELOOP for a link, EINVAL for anything else
    that is not a regular file (a FIFO is not waited on: O_NONBLOCK)."""
    fd = os.open(path, _READ)
    try:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            raise OSError(errno.EINVAL, "not a regular file", str(path))
        os.set_blocking(fd, True)
        return os.fdopen(fd, "rb")
    except BaseException:
        os.close(fd)
        raise


def write_beside(final: Path, source: BinaryIO) -> tuple[Path, str]:
    """Copy `source` into a new file beside `final` (`.NAME.XXXXXXXX.partial`, made with O_EXCL under a fresh
    name: never an existing file, never through a link); (its path, the sha256 of what was written). The caller
    renames it into place or removes it; on an error here it is removed already."""
    for _ in range(16):
        partial = final.with_name(f".{final.name}.{secrets.token_hex(4)}.partial")
        try:
            fd = os.open(partial, _CREATE, 0o666)
        except FileExistsError:
            continue
        break
    else:
        raise OSError(errno.EEXIST, "no fresh name for a partial file", str(final.parent))
    digest = hashlib.sha256()
    try:
        with os.fdopen(fd, "wb") as out:
            for chunk in iter(lambda: source.read(1 << 20), b""):
                digest.update(chunk)
                out.write(chunk)
    except BaseException:
        with contextlib.suppress(OSError):
            partial.unlink()
        raise
    return partial, digest.hexdigest()


def copy_verified(
    sources: Mapping[str, Path],
    copies: Sequence[tuple[str, Path]],
    wanted: Recorded,
    label: str,
    *,
    root: Path | None = None,
    named: Callable[[str], str] | None = None,
    recorded_as: tuple[str, str] = ("recorded when it was collected", "the file changed after the run finished"),
) -> list[Path]:
    """Copy each `(output path, final path)` from `sources[output path]` (the job folder's file: `sources_in`; or a
    blob fetched from a registry); every copy is checked against its recorded sha256 before any is renamed into
    place. `root`: the destination given, under which no existing folder may be a link. ConfigError naming the
    output and the path on any failure, with nothing left behind. `named(path)` is how a message names a file
    (`outputs/PATH of LABEL` by default); `recorded_as`: when its sha256 was taken, and what a mismatch means."""
    name = named or (lambda relative: f"outputs/{relative} of {label}")
    for relative, final in copies:  # everything that can be checked before a byte is written
        source = sources[relative]
        if source.is_symlink():
            raise ConfigError(f"{name(relative)} is a symbolic link: it is never followed", hint="nothing was copied")
        if not source.is_file():
            raise ConfigError(f"{name(relative)} is missing", hint="nothing was copied")
        if root is not None:
            _refuse_links_below(root, final)
    made: list[Path] = []
    partials: list[tuple[Path, Path]] = []
    try:
        for relative, final in copies:
            source = sources[relative]
            made += _folders_for(final)
            if final.is_dir() and not final.is_symlink():
                raise ConfigError(f"{final} is a folder: {name(relative)} would replace it")
            partial, digest = _copy_file(source, final, name(relative))
            partials.append((partial, final))
            if digest != wanted[relative].get("sha256"):
                raise ConfigError(
                    f"{name(relative)} no longer matches the sha256 {recorded_as[0]}",
                    hint=f"{recorded_as[1]}; nothing was copied",
                )
        for partial, final in partials:
            partial.replace(final)
    except BaseException:
        for partial, _ in partials:
            with contextlib.suppress(OSError):
                partial.unlink()
        for folder in reversed(made):
            with contextlib.suppress(OSError):
                folder.rmdir()  # only folders this copy made, and only while they are empty
        raise
    return [final for _, final in copies]


def _folders_for(final: Path) -> list[Path]:
    """Make the missing folders above `final`, outermost first, and return them; an existing one that is a link
    or not a folder is refused (the copy would land outside the destination, or nowhere)."""
    missing: list[Path] = []
    parent = final.parent
    while not parent.exists() and not parent.is_symlink():
        missing.append(parent)
        parent = parent.parent
    if not parent.is_dir():
        raise ConfigError(f"{parent} is not a folder: nothing can be copied under it")
    made: list[Path] = []
    try:
        for folder in reversed(missing):
            folder.mkdir()
            made.append(folder)
    except OSError as exc:
        for folder in reversed(made):
            with contextlib.suppress(OSError):
                folder.rmdir()
        raise ConfigError(f"cannot make the folder {exc.filename or final.parent}: {exc.strerror}") from None
    return made


def _refuse_links_below(root: Path, final: Path) -> None:
    """Refuse `final` when a folder between `root` (the destination given) and it is a symbolic link."""
    for parent in final.parents:
        if parent == root or root not in parent.parents:
            return
        if parent.is_symlink():
            raise ConfigError(f"{parent} is a symbolic link: a copy under it could land outside {root}")


def _copy_file(source: Path, final: Path, shown: str) -> tuple[Path, str]:
    """(partial file beside `final`, its sha256): `source` copied without following a link."""
    try:
        with open_regular(source) as reading:
            return write_beside(final, reading)
    except OSError as exc:
        if exc.errno == errno.ELOOP:
            raise ConfigError(f"{shown} is a symbolic link: it is never followed", hint="nothing was copied") from None
        if exc.filename is not None and str(exc.filename) == str(source):
            raise ConfigError(f"cannot read {shown}: {exc.strerror}", hint="nothing was copied") from None
        raise ConfigError(f"cannot copy {shown} to {final.parent}: {exc.strerror}") from None
