"""A job's outputs as recorded when it succeeded, and copies of them that are verified and all or nothing.

Who calls it: `LocalExecutor`'s `outputs` and `copy_outputs` (and `RayExecutor.copy_outputs`, with files fetched
from a registry), which `nodus cp` (`nodus.cli.jobs`), the SDK's
`run.outputs.download` (`nodus.recipes.runs`) and `spec.exportTo` (`nodus.reconciler.controllers.export`) use. The
supervisor writes `outputs.json` (`manifest_of`: a sha256 and size per regular file of outputs/) when the
trainer succeeds; a copy is taken from the file beside its final place, checked against that sha256, and only
when every file of the request checked are they renamed into place. A failure leaves nothing behind: no
partial file, no folder this copy made. A link already at a final place is replaced, never written through,
and no existing folder under the destination may be a link: a copy never writes outside the destination.

    wanted = recorded(files)                       # None until the generation succeeded
    sources = {"results.json": files.outputs / "results.json"}
    copy_verified(sources, [("results.json", Path("out/results.json"))], wanted, "TrainingJob/run")
"""

from __future__ import annotations

import contextlib
import json
import shutil
from collections.abc import Mapping, Sequence
from pathlib import Path, PurePosixPath
from typing import Any

from nodus.errors import ConfigError

from ..protocol import OutputFile, OutputManifest
from .job import JobFiles, file_sha256

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


def sources_in(files: JobFiles, copies: Sequence[tuple[str, Path]]) -> dict[str, Path]:
    """Where each output of `copies` is in the job folder (`inside` outputs/, or refused)."""
    return {relative: files.outputs / inside(relative, files.outputs_manifest) for relative, _ in copies}


def copy_verified(
    sources: Mapping[str, Path],
    copies: Sequence[tuple[str, Path]],
    wanted: Recorded,
    label: str,
    *,
    root: Path | None = None,
) -> list[Path]:
    """Copy each `(output path, final path)` from `sources[output path]` (the job folder's file: `sources_in`; or a
    blob fetched from a registry); every copy is checked against its recorded sha256 before any is renamed into
    place. `root`: the destination given, under which no existing folder may be a link. ConfigError naming the
    output and the path on any failure, with nothing left behind."""
    for relative, final in copies:  # everything that can be checked before a byte is written
        source = sources[relative]
        if source.is_symlink() or not source.is_file():
            raise ConfigError(f"outputs/{relative} of {label} is missing", hint="nothing was copied")
        if root is not None:
            _refuse_links_below(root, final)
    made: list[Path] = []
    partials: list[tuple[Path, Path]] = []
    try:
        for relative, final in copies:
            source = sources[relative]
            made += _folders_for(final)
            if final.is_dir() and not final.is_symlink():
                raise ConfigError(f"{final} is a folder: outputs/{relative} of {label} would replace it")
            partial = final.with_name(f".{final.name}.partial")
            partials.append((partial, final))
            _copy_file(source, partial, relative, label)
            if file_sha256(partial) != wanted[relative].get("sha256"):
                raise ConfigError(
                    f"outputs/{relative} of {label} no longer matches the sha256 recorded when it was collected",
                    hint="the file changed after the run finished; nothing was copied",
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


def _copy_file(source: Path, partial: Path, relative: str, label: str) -> None:
    try:
        shutil.copyfile(source, partial)
    except OSError as exc:
        where = exc.filename if exc.filename and str(exc.filename) != str(source) else partial.parent
        raise ConfigError(f"cannot copy outputs/{relative} of {label} to {where}: {exc.strerror}") from None
