"""`nodus.lock`: which image each published Environment version is, read and written without losing edits.

Who calls it: nodus-build's build step records each image it builds (`Lock.record`, then `Lock.save`), and
`nodus-build --check` asks `Lock.is_current` whether a recorded build still matches its plan's key; the
reconciler reads the image digests from it, and `nodus plan` compares a path package's files with the `source`
digest recorded (`Lock.source_changed`), so code edited without a version bump is said at plan time.

The file is YAML, kept in git beside the specs and reviewed like them:

    lockfileVersion: 1
    base:                      # the base image every environment is built on
      reference: nodus/env-base:0.1.0
      digest: sha256:...
    environments:
      arithmetic@2.0.0:          # an Environment of the default project: name@version
      # nodus/gsm8k@1.0.0:       # of another project (the catalog's is `nodus`): project/name@version
        image: sha256:...        # the image's manifest digest: what a published version *is*
        base: sha256:...         # the base image it was built on
        requirements: sha256:... # the locked requirements file
        key: sha256:...          # the BuildSpec key (nodus.builder.plan): same key, nothing to rebuild
        splits: {train: 5000, test: 500}
        manifests: {train/0: sha256:..., test/0: sha256:...}
        builder: 0.1.0
        source: sha256:...       # a path package's source digest (nodus.builder.plan.source_digest)
        indexes: {reverse-words: https://...}  # packages locked from package.pip.index (the rest: PyPI)

It is read and written in ruamel.yaml's round-trip mode, so people's comments, key order and top-level
keys this module does not know survive a record and save. A published name@version never changes its
image: `record` refuses a different digest for it (publish a new version instead). An Environment of a project other
than `default` (the catalog's `nodus`) is keyed `project/name@version`, so a project's own `gsm8k@1.0.0` and the
catalog's `nodus/gsm8k@1.0.0` are two entries of one lock rather than one entry two builds fight over.
"""

from __future__ import annotations

import io
import os
import re
import tempfile
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ruamel.yaml import YAML
from ruamel.yaml.comments import CommentedMap
from ruamel.yaml.error import MarkedYAMLError, YAMLError

from nodus.errors import BuildError, ConfigError

LOCKFILE_VERSION = 1
HEADER = "nodus.lock: the image of each Environment version, written by nodus-build (comments are kept)."
_DIGEST = re.compile(r"sha256:[0-9a-f]{64}")
# [project/]name@version: DNS labels, then a semantic version (checked loosely: the specs validated it when built).
_ENTRY_KEY = re.compile(r"([a-z0-9]([a-z0-9-]*[a-z0-9])?/)?[a-z0-9]([a-z0-9-]*[a-z0-9])?@[0-9][0-9A-Za-z.+-]*")
DEFAULT_PROJECT = "default"
"""The project whose Environments are keyed `name@version` (every other project's: `project/name@version`)."""


def project_prefix(project: str | None, separator: str) -> str:
    """`project` and `separator` for a project other than `default`, else nothing: how the lock key, the store's
    tag and podman's repository of an Environment tell another project's (the catalog's) from the default's."""
    return f"{project}{separator}" if project and project != DEFAULT_PROJECT else ""


def entry_key(name: str, version: str, project: str | None = None) -> str:
    """The key of name@version of `project` in `environments` (None or `default`: no project prefix)."""
    return f"{project_prefix(project, '/')}{name}@{version}"


_FIELDS = ("image", "base", "requirements", "key", "splits", "manifests", "builder", "source", "indexes")
_OPTIONAL = frozenset({"source", "indexes"})
"""Fields added after lockfileVersion 1 was first written: left out when empty, read as empty when absent, so
older locks stay valid and a lock without them reads the same in an older nodus-build."""


@dataclass(frozen=True)
class LockEntry:
    """What was built for one name@version."""

    image: str
    """The image's manifest digest."""
    base: str
    """The base image's manifest digest."""
    requirements: str
    """The locked requirements' sha256 (`LockedRequirements.sha256`)."""
    key: str
    """The BuildSpec key the image was built from (`BuildSpec.key`)."""
    splits: Mapping[str, int] = field(default_factory=dict)
    """How many tasks each split has."""
    manifests: Mapping[str, str] = field(default_factory=dict)
    """`split/seed` -> the task manifest's sha256."""
    builder: str = ""
    """The nodus-build version that built it."""
    source: str = ""
    """A path package's source digest when it was built (`nodus.builder.plan.source_digest`); empty for pip and
    image packages and in entries written before nodus-build recorded it."""
    indexes: Mapping[str, str] = field(default_factory=dict)
    """Package -> the named index it was locked from (a pip package's `package.pip.index`); every locked
    requirement not here came from the default index. Empty for most entries."""

    def __post_init__(self) -> None:
        for name in ("image", "base", "requirements", "key"):
            value = getattr(self, name)
            if not isinstance(value, str) or not _DIGEST.fullmatch(value):
                raise ConfigError(f"lock entry {name} {value!r} is not a sha256 digest")
        for split, count in self.splits.items():
            if not isinstance(split, str) or isinstance(count, bool) or not isinstance(count, int) or count < 0:
                raise ConfigError(f"lock entry split {split!r}: {count!r} is not a task count")
        for manifest, digest in self.manifests.items():
            if not isinstance(manifest, str) or not isinstance(digest, str) or not _DIGEST.fullmatch(digest):
                raise ConfigError(f"lock entry manifest {manifest!r}: {digest!r} is not a sha256 digest")
        if not isinstance(self.builder, str):
            raise ConfigError(f"lock entry builder {self.builder!r} is not a version")
        if self.source and not (isinstance(self.source, str) and _DIGEST.fullmatch(self.source)):
            raise ConfigError(f"lock entry source {self.source!r} is not a sha256 digest")
        for package, url in self.indexes.items():
            if not isinstance(package, str) or not isinstance(url, str) or not url.strip():
                raise ConfigError(f"lock entry index {package!r}: {url!r} is not an index URL")

    def to_map(self) -> CommentedMap:
        data = CommentedMap()
        for name in _FIELDS:
            if name in _OPTIONAL and not getattr(self, name):
                continue
            data[name] = self._yaml_value(name)
        return data

    def _yaml_value(self, name: str) -> Any:
        value = getattr(self, name)
        if isinstance(value, Mapping):
            # Sorted, so a rebuild with the same result writes the same text.
            return CommentedMap(sorted(value.items()))
        return value


@dataclass(frozen=True)
class BaseEntry:
    """The base image nodus.lock pins: every environment image is built on exactly this digest."""

    reference: str
    digest: str


@dataclass
class Lock:
    """A `nodus.lock` file in memory; `save` writes it back with comments and order kept."""

    path: Path
    document: CommentedMap

    @classmethod
    def load(cls, path: Path) -> Lock:
        """Reads `path`; a missing file is an empty lock. A broken one is a ConfigError naming file:line."""
        try:
            text = path.read_text(encoding="utf-8")
        except FileNotFoundError:
            document = CommentedMap()
            document.yaml_set_start_comment(HEADER)
            document["lockfileVersion"] = LOCKFILE_VERSION
            document["environments"] = CommentedMap()
            return cls(path, document)
        except (OSError, UnicodeDecodeError) as exc:
            raise ConfigError(f"{path}: cannot read: {exc}") from exc
        try:
            data = _yaml().load(text)
        except MarkedYAMLError as exc:
            mark = exc.problem_mark or exc.context_mark
            where = f"{path}:{mark.line + 1}:{mark.column + 1}" if mark is not None else str(path)
            raise ConfigError(
                f"{where}: not valid YAML: {exc.problem or exc.context}", hint="fix or remove the file"
            ) from exc
        except YAMLError as exc:
            raise ConfigError(f"{path}: not valid YAML: {exc}", hint="fix or remove the file") from exc
        if data is None:
            data = CommentedMap()
        if not isinstance(data, CommentedMap):
            raise ConfigError(f"{path}:1:1: a lock file is a mapping (lockfileVersion, environments)")
        lock = cls(path, data)
        lock._check()
        return lock

    def _where(self, parent: CommentedMap, key: str) -> str:
        """`file:line` of `key` in `parent` (ruamel keeps each key's position)."""
        try:
            line, column = parent.lc.key(key)
        except (KeyError, TypeError):
            return f"{self.path}:{parent.lc.line + 1}"
        return f"{self.path}:{line + 1}:{column + 1}"

    def _check(self) -> None:
        version = self.document.get("lockfileVersion", LOCKFILE_VERSION)
        if version != LOCKFILE_VERSION:
            raise ConfigError(
                f"{self._where(self.document, 'lockfileVersion')}: lockfileVersion {version!r} is not "
                f"{LOCKFILE_VERSION}",
                hint="this nodus-build reads version 1; upgrade nodus-build if the file is newer",
            )
        environments = self.document.get("environments")
        if environments is None:
            return
        if not isinstance(environments, CommentedMap):
            raise ConfigError(f"{self._where(self.document, 'environments')}: environments must be a mapping")
        for key, value in environments.items():
            where = self._where(environments, key)
            if not isinstance(key, str) or not _ENTRY_KEY.fullmatch(key):
                raise ConfigError(f"{where}: {key!r} is not name@version or project/name@version")
            if not isinstance(value, CommentedMap):
                raise ConfigError(f"{where}: {key} must be a mapping of image, base, requirements...")
            # A bad digest is reported on its own line, where the person will look for it.
            for name in ("image", "base", "requirements", "key"):
                digest = value.get(name)
                if digest is not None and not (isinstance(digest, str) and _DIGEST.fullmatch(digest)):
                    raise ConfigError(f"{self._where(value, name)}: {key}: {name} {digest!r} is not a sha256 digest")
            try:
                _entry(value)
            except ConfigError as exc:
                raise ConfigError(f"{where}: {key}: {exc.message}") from exc

    def _environments(self) -> CommentedMap:
        environments = self.document.get("environments")
        if environments is None:
            environments = CommentedMap()
            self.document["environments"] = environments
        assert isinstance(environments, CommentedMap)  # _check refused anything else at load
        return environments

    def base(self) -> BaseEntry | None:
        """The base image pinned by `base:` (reference and digest), or None before the first build."""
        value = self.document.get("base")
        if value is None:
            return None
        if not isinstance(value, Mapping) or not _DIGEST.fullmatch(str(value.get("digest", ""))):
            raise ConfigError(f"{self._where(self.document, 'base')}: base must be a mapping with a sha256 digest")
        return BaseEntry(str(value.get("reference", "")), str(value["digest"]))

    def record_base(self, reference: str, digest: str) -> None:
        """Pins the base image every environment is built on (kept above `environments`)."""
        if not _DIGEST.fullmatch(digest):
            raise ConfigError(f"base digest {digest!r} is not a sha256 digest")
        current = self.document.get("base")
        if isinstance(current, CommentedMap):
            current["reference"], current["digest"] = reference, digest
            return
        position = (
            list(self.document.keys()).index("environments") if "environments" in self.document else len(self.document)
        )
        self.document.insert(position, "base", CommentedMap([("reference", reference), ("digest", digest)]))

    def get(self, name: str, version: str, project: str | None = None) -> LockEntry | None:
        """The entry for name@version of `project` (`entry_key`), or None when it was never built."""
        value = self._environments().get(entry_key(name, version, project))
        return None if value is None else _entry(value)

    def record(self, name: str, version: str, entry: LockEntry, project: str | None = None) -> None:
        """Records a build; a published name@version whose image digest would change is refused."""
        key = entry_key(name, version, project)
        if not _ENTRY_KEY.fullmatch(key):
            raise ConfigError(f"{key!r} is not name@version or project/name@version")
        environments = self._environments()
        current = environments.get(key)
        if current is None:
            environments[key] = entry.to_map()
            return
        old = _entry(current)
        if old.image != entry.image:
            raise BuildError(
                f"{key} is published as image {old.image} in {self.path}; this build gives {entry.image}",
                hint=f"a published version never changes: give {name} a new spec.version and build that",
            )
        # The same image from newer inputs (a new builder giving the same bytes, say): update the fields in
        # place rather than replacing the mapping, so comments on the entry's lines stay where they were.
        # Keys of the entry this module does not know are left alone, like unknown top-level keys.
        for field_name in _FIELDS:
            if field_name in _OPTIONAL and not getattr(entry, field_name):
                continue
            current[field_name] = entry._yaml_value(field_name)

    def is_current(self, name: str, version: str, build_spec_key: str, project: str | None = None) -> bool:
        """True when name@version was built from a BuildSpec with this key (nothing to rebuild)."""
        entry = self.get(name, version, project)
        return entry is not None and entry.key == build_spec_key

    def source_changed(self, name: str, version: str, digest: str, project: str | None = None) -> bool:
        """True when name@version was built from a package folder whose recorded source digest is not `digest`
        (its code was edited since the build); False when it matches, or the entry records no source."""
        entry = self.get(name, version, project)
        return entry is not None and bool(entry.source) and entry.source != digest

    def dumps(self) -> str:
        buffer = io.StringIO()
        _yaml().dump(self.document, buffer)
        return buffer.getvalue()

    def save(self) -> None:
        """Writes the file atomically (a temporary file beside it, then a rename): never half written."""
        text = self.dumps()
        self.path.parent.mkdir(parents=True, exist_ok=True)
        try:
            mode = self.path.stat().st_mode & 0o777
        except FileNotFoundError:
            mode = 0o644
        handle, temporary = tempfile.mkstemp(prefix=f".{self.path.name}.", suffix=".tmp", dir=self.path.parent)
        try:
            with os.fdopen(handle, "w", encoding="utf-8") as out:
                out.write(text)
                out.flush()
                os.fsync(out.fileno())
            os.chmod(temporary, mode)
            os.replace(temporary, self.path)
        except BaseException:
            Path(temporary).unlink(missing_ok=True)
            raise


def _yaml() -> YAML:
    yaml = YAML(typ="rt")
    yaml.preserve_quotes = True
    # Digests are long; folding them would make diffs hard to read.
    yaml.width = 4096
    yaml.indent(mapping=2, sequence=4, offset=2)
    return yaml


def _entry(value: Any) -> LockEntry:
    if not isinstance(value, Mapping):
        raise ConfigError("an entry must be a mapping")
    missing = [name for name in ("image", "base", "requirements", "key") if name not in value]
    if missing:
        raise ConfigError(f"missing {', '.join(missing)}")
    splits = value.get("splits") or {}
    manifests = value.get("manifests") or {}
    indexes = value.get("indexes") or {}
    if not isinstance(splits, Mapping) or not isinstance(manifests, Mapping) or not isinstance(indexes, Mapping):
        raise ConfigError("splits, manifests and indexes must be mappings")
    return LockEntry(
        image=value["image"],
        base=value["base"],
        requirements=value["requirements"],
        key=value["key"],
        splits=dict(splits),
        manifests=dict(manifests),
        builder=str(value.get("builder", "")),
        source=str(value.get("source") or ""),
        indexes=dict(indexes),
    )
