"""The pure half of nodus-build: an Environment and its pinned inputs in, a `BuildSpec` out.

Who calls it: nodus-build's build step (to be written) plans before it builds, and looks the plan's `key`
up in its content-addressed cache and in `nodus.lock` (`nodus-build --check` compares the key with the one
recorded there). `plan` does no I/O: everything it needs comes in its arguments, so the same arguments give
the same `BuildSpec` and the same `key` on any machine. The one input read from disk, the package folder,
is hashed beforehand by `source_digest` and handed in through `sources`.

What goes into a `BuildSpec` is exactly what decides the image's bytes: the package's source, the loader,
the base image digest, the locked requirements, the splits and seeds to materialise, the image's tag, env
vars and labels, and the builder's version. Fields an Environment may change in place (description,
licence, category, grading settings: `Environment.UPDATABLE_IN_PLACE`) are left out on purpose: were they
in the image, changing them would change a published version's digest, which `nodus.lock` refuses.

Golden files: `builder/tests/golden/<name>.json` hold the plan of each `catalog/*/environment.yaml`, made
from the fixed inputs in `builder/tests/golden/inputs.json` (a fake base image and fake locked
requirements) and a fake source digest per package folder (see `golden_source`), so that a golden file
changes only when planning does, not when a catalog package's code does. A test fails when a plan drifts
from its golden file. After a deliberate change, rewrite them and review the diff:

    .venv/bin/python -m nodus.builder.plan --update-golden
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import re
import stat
import sys
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

from nodus.builder.lockfile import project_prefix
from nodus.builder.oci import canonical_json, check_tag, sha256_digest
from nodus.builder.package_files import package_files
from nodus.errors import BuildError, ConfigError
from nodus.specs.environment import Environment
from nodus.specs.parse import parse_resources
from nodus.specs.types import image_is_pinned

JSONObject = dict[str, Any]

ENVIRONMENT_PATH = "/opt/environment"
"""Where a path package's files are installed in the image (`NODUS_ENVIRONMENT_PATH`)."""
SITE_PACKAGES_PATH = "/opt/nodus/site-packages"
"""Where the locked requirements (and a pip package) are installed (on `PYTHONPATH`)."""
DATA_PATH = "/opt/nodus/data"
"""`HF_HOME`: the datasets the environment loaded at build time, read offline when grading."""
DATASETS_CACHE_PATH = "/tmp/nodus-datasets-cache"
"""`HF_DATASETS_CACHE`: Arrow files the datasets library derives from HF_HOME's downloads, per sandbox."""
MANIFESTS_PATH = "/opt/nodus/manifests"
"""The task manifests, `<split>/<seed>.jsonl` (prompts and metadata, never answers)."""
_ENV_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
# Seed 0 is the specs' default and 42 the one the documentation's examples use; a job that asks for another
# seed has its manifests made at first use (by the reconciler) and reused after that.
DEFAULT_SEEDS: tuple[int, ...] = (0, 42)
DEFAULT_SPLITS: tuple[str, ...] = ("train", "test")


_DIGEST = re.compile(r"sha256:[0-9a-f]{64}")
# `name==version --hash=sha256:...` as `uv pip compile --generate-hashes` writes it, one line per package
# (hashes joined onto the line). Markers and extras are resolved away by locking for one platform.
_REQUIREMENT = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]*==[^\s=;]+( --hash=sha256:[0-9a-f]{64})+")
_SPLIT = re.compile(r"[a-z][a-z0-9_-]{0,31}")


def _check_digest(value: str, what: str) -> str:
    if not _DIGEST.fullmatch(value):
        raise ConfigError(f"{what} {value!r} is not a sha256 digest", hint="write it as sha256:<64 hex digits>")
    return value


@dataclass(frozen=True)
class BaseImage:
    """The image the grader image is built on, pinned by its manifest digest."""

    reference: str
    """Where it came from (a registry reference or `oci:<layout>:<tag>`); informative, the digest pins it."""
    digest: str
    """The base image's manifest digest, `sha256:<hex>`."""

    def __post_init__(self) -> None:
        if not self.reference.strip():
            raise ConfigError("the base image reference is empty")
        _check_digest(self.digest, "base image digest")

    def to_dict(self) -> JSONObject:
        return {"reference": self.reference, "digest": self.digest}


@dataclass(frozen=True)
class LockedRequirements:
    """The package's third-party requirements, locked with hashes: sorted `name==version --hash=...` lines,
    and where each came from (`indexes`)."""

    lines: tuple[str, ...]
    sha256: str
    """`sha256:<hex>` of `text()`, the requirements file the build installs with `--require-hashes`."""
    indexes: tuple[tuple[str, str], ...] = ()
    """`(name, index URL)`, sorted, for each package locked from a named index (`package.pip.index`) alone;
    every other line came from the default index (PyPI, or the one uv's configuration names)."""

    def __post_init__(self) -> None:
        for line in self.lines:
            if not _REQUIREMENT.fullmatch(line):
                raise ConfigError(
                    f"locked requirement {line!r} is not `name==version --hash=sha256:<hex>`",
                    hint="lock requirements with `uv pip compile --generate-hashes`",
                )
        # Sorted and unique, so that the same set of requirements always hashes the same.
        if list(self.lines) != sorted(set(self.lines)):
            raise ConfigError("locked requirements must be sorted and unique", hint="use LockedRequirements.of(lines)")
        if list(self.indexes) != sorted(set(self.indexes)):
            raise ConfigError("locked requirement indexes must be sorted and unique", hint="use LockedRequirements.of")
        names = {requirement_name(line) for line in self.lines}
        for name, url in self.indexes:
            if name not in names or not url.strip() or any(c.isspace() for c in url):
                raise ConfigError(f"locked requirement index {name!r} -> {url!r} names no locked package and URL")
        expected = sha256_digest(self.text().encode())
        if self.sha256 != expected:
            raise ConfigError(f"locked requirements hash to {expected}, not {self.sha256}")

    @classmethod
    def of(cls, lines: Sequence[str], indexes: Mapping[str, str] | None = None) -> LockedRequirements:
        """Sorts and deduplicates `lines` and computes their hash; `indexes` maps a package to its index."""
        ordered = tuple(sorted(set(lines)))
        pinned = tuple(sorted((normalized_name(name), url) for name, url in (indexes or {}).items()))
        return cls(ordered, sha256_digest(_requirements_text(ordered, pinned).encode()), pinned)

    @classmethod
    def from_text(cls, text: str) -> LockedRequirements:
        """The inverse of `text()` (the requirements cache stores it)."""
        lines, indexes = [], {}
        for line in text.splitlines():
            if line.startswith(_INDEX_COMMENT):
                name, _, url = line.removeprefix(_INDEX_COMMENT).partition(" from ")
                indexes[name] = url
            elif line.strip():
                lines.append(line)
        return cls.of(lines, indexes)

    def text(self) -> str:
        """The requirements file: one line each, a newline after each (empty when there are none), then a
        comment per package from a named index (so the hash changes when where a package comes from does)."""
        return _requirements_text(self.lines, self.indexes)

    def index_of(self, line: str) -> str | None:
        """The named index `line`'s package is locked from, None for the default index."""
        return dict(self.indexes).get(requirement_name(line))

    def to_dict(self) -> JSONObject:
        # `indexes` only when there are any: plans of path packages (and their golden files) stay as they were.
        pinned = {"indexes": dict(self.indexes)} if self.indexes else {}
        return {"lines": list(self.lines), "sha256": self.sha256, **pinned}


_INDEX_COMMENT = "# index: "


def normalized_name(name: str) -> str:
    """A distribution name as PEP 503 compares them: lower case, runs of `-_.` as one `-`."""
    return re.sub(r"[-_.]+", "-", name).lower()


def requirement_name(line: str) -> str:
    """The normalised package name of a locked `name==version ...` line."""
    return normalized_name(line.partition("==")[0])


def _requirements_text(lines: Sequence[str], indexes: Sequence[tuple[str, str]] = ()) -> str:
    pinned = "".join(f"{_INDEX_COMMENT}{name} from {url}\n" for name, url in indexes)
    return "".join(f"{line}\n" for line in lines) + pinned


@dataclass(frozen=True)
class PathSource:
    """A package folder beside the spec, known by the digest of its files (`source_digest`)."""

    digest: str
    kind: Literal["path"] = "path"

    def to_dict(self) -> JSONObject:
        return {"kind": self.kind, "digest": self.digest}


@dataclass(frozen=True)
class PipSource:
    """A pip package at one exact version, from PyPI or `index`."""

    name: str
    version: str
    index: str | None
    kind: Literal["pip"] = "pip"

    def to_dict(self) -> JSONObject:
        return {"kind": self.kind, "name": self.name, "version": self.version, "index": self.index}


@dataclass(frozen=True)
class ImageSource:
    """A prebuilt grader image, pinned by digest: verified, not rebuilt."""

    reference: str
    kind: Literal["image"] = "image"

    def to_dict(self) -> JSONObject:
        return {"kind": self.kind, "reference": self.reference}


PackageSource = PathSource | PipSource | ImageSource


@dataclass(frozen=True)
class ImagePlan:
    """What the image is called and what its config sets."""

    tag: str
    env: tuple[tuple[str, str], ...]
    labels: tuple[tuple[str, str], ...]

    def to_dict(self) -> JSONObject:
        return {"tag": self.tag, "env": dict(self.env), "labels": dict(self.labels)}


@dataclass(frozen=True)
class BuildSpec:
    """Everything that decides an Environment image's bytes; `key` is the hash of all of it."""

    environment: str
    version: str
    package: PackageSource
    loader: str
    base: BaseImage
    requirements: LockedRequirements
    splits: tuple[str, ...]
    seeds: tuple[int, ...]
    image: ImagePlan
    builder: str
    key: str = field(init=False)
    """`sha256:<hex>` of the canonical JSON of every other field: the content-addressed cache key."""

    def __post_init__(self) -> None:
        # Computed here rather than passed in, so a BuildSpec can never carry a key that does not match it.
        object.__setattr__(self, "key", sha256_digest(canonical_json(self._content())))

    def _content(self) -> JSONObject:
        return {
            "environment": self.environment,
            "version": self.version,
            "package": self.package.to_dict(),
            "loader": self.loader,
            "base": self.base.to_dict(),
            "requirements": self.requirements.to_dict(),
            "splits": list(self.splits),
            "seeds": list(self.seeds),
            "image": self.image.to_dict(),
            "builder": self.builder,
        }

    def to_dict(self) -> JSONObject:
        return {**self._content(), "key": self.key}

    def to_json(self) -> str:
        """Canonical JSON (sorted keys, no spaces, ASCII): the same BuildSpec always gives the same text."""
        return canonical_json(self.to_dict()).decode()

    @property
    def manifests(self) -> tuple[str, ...]:
        """The task manifests the build writes, `split/seed`, in order (the keys of `nodus.lock`'s manifests)."""
        return tuple(f"{split}/{seed}" for split in self.splits for seed in self.seeds)


def image_tag(name: str, version: str, project: str | None = None) -> str:
    """The local store's tag of an Environment version: `env-NAME-VERSION`, or `env-PROJECT.NAME-VERSION` for a
    project other than `default` (the catalog's `nodus`), so a project's own gsm8k@1.0.0 and the catalog's never
    take each other's tag (a DNS label has no dot, so no name of the default project reads as one of another)."""
    # Versions with build metadata (1.0.0+abc) are valid SemVer, but `+` is not allowed in an image tag;
    # `_` is, and cannot appear in a SemVer, so the mapping is one to one.
    return check_tag(f"env-{project_prefix(project, '.')}{name}-{version.replace('+', '_')}")


def package_folder(environment: Environment, spec_dir: Path) -> Path | None:
    """The package folder of a path package (normalised, not resolved: no I/O), None for pip and image."""
    path = environment.spec.package.path
    return None if path is None else Path(os.path.normpath(spec_dir / path))


def plan(
    environment: Environment,
    *,
    spec_dir: Path,
    base: BaseImage,
    requirements: LockedRequirements,
    builder_version: str,
    sources: Mapping[Path, str] | None = None,
    seeds: Sequence[int] = DEFAULT_SEEDS,
    splits: Sequence[str] = DEFAULT_SPLITS,
    extra_env: Mapping[str, str] | None = None,
) -> BuildSpec:
    """The BuildSpec of `environment`, whose file is in `spec_dir`.

    `sources` maps package folders (as `package_folder` gives them) to their `source_digest`; only a path
    package needs its folder's entry. Two Environments sharing a folder share its digest. `extra_env` adds
    variables to the image (`nodus-build --env`, e.g. where a package finds data shipped in its folder); it
    may not replace the ones nodus sets.
    """
    name, spec = environment.metadata.name, environment.spec
    package = spec.package
    source: PackageSource
    if package.path is not None:
        folder = package_folder(environment, spec_dir)
        digest = (sources or {}).get(folder) if folder is not None else None
        if digest is None:
            raise BuildError(
                f"plan {name}@{spec.version}: no source digest for its package folder {folder}",
                hint="hash the folder with nodus.builder.plan.source_digest and pass it in sources",
            )
        source = PathSource(_check_digest(digest, f"source digest of {folder}"))
    elif package.pip is not None:
        source = PipSource(package.pip.name, package.pip.version, package.pip.index)
    elif package.image is not None:
        if not image_is_pinned(package.image):
            raise ConfigError(
                f"Environment/{name}: spec.package.image {package.image!r} is not pinned by a sha256 digest",
                hint="name the image as <reference>@sha256:<digest>: nodus-build verifies images by digest",
            )
        source = ImageSource(package.image)
    else:  # Package validates that exactly one source is set; this keeps the type checker and a reader sure.
        raise ConfigError(f"Environment/{name}: spec.package names no path, pip or image")
    if not seeds or any(isinstance(s, bool) or not isinstance(s, int) or s < 0 for s in seeds):
        raise ConfigError(f"seeds must be non-negative integers (got {list(seeds)})")
    if not splits or len(set(splits)) != len(splits) or not all(_SPLIT.fullmatch(s) for s in splits):
        raise ConfigError(f"splits must be distinct lower-case names such as train and test (got {list(splits)})")
    tag = image_tag(name, spec.version, environment.metadata.project)
    env = {
        "NODUS_ENVIRONMENT": name,
        "NODUS_ENVIRONMENT_VERSION": spec.version,
        "NODUS_ENVIRONMENT_LOADER": package.loader,
        "NODUS_ENVIRONMENT_PATH": ENVIRONMENT_PATH,
        # Datasets are frozen into the image at build time; a grader must never fetch at grading time.
        "HF_HUB_OFFLINE": "1",
        "HF_DATASETS_OFFLINE": "1",
        "HF_HOME": DATA_PATH,
        # The datasets library locks and writes its Arrow cache even when it only reads, and the image runs
        # read-only: the derived cache goes to the sandbox's tmpfs, the frozen downloads stay in HF_HOME.
        "HF_DATASETS_CACHE": DATASETS_CACHE_PATH,
        "PYTHONPATH": SITE_PACKAGES_PATH,
    }
    if package.pip is not None:
        # The loader finds a pip package's module from this distribution's metadata, not from whatever is
        # importable (its dependencies are importable too): nodus.env.loader.
        env["NODUS_ENVIRONMENT_DISTRIBUTION"] = package.pip.name
    for variable, value in sorted((extra_env or {}).items()):
        if not _ENV_NAME.fullmatch(variable) or variable in env:
            raise ConfigError(
                f"plan {name}@{spec.version}: image variable {variable!r} is not a name nodus leaves to packages",
                hint=f"nodus sets {', '.join(sorted(env))}; pick another name",
            )
        env[variable] = value
    # No licence or description labels: both may change in place (UPDATABLE_IN_PLACE), an image may not.
    # No `created` label either: the build fixes the config's `created` from SOURCE_DATE_EPOCH.
    labels = {
        "dev.nodus.environment": name,
        "dev.nodus.version": spec.version,
        "dev.nodus.builder": builder_version,
        "org.opencontainers.image.title": name,
        "org.opencontainers.image.version": spec.version,
        "org.opencontainers.image.base.name": base.reference,
        "org.opencontainers.image.base.digest": base.digest,
    }
    return BuildSpec(
        environment=name,
        version=spec.version,
        package=source,
        loader=package.loader,
        base=base,
        requirements=requirements,
        splits=tuple(splits),
        seeds=tuple(sorted(set(seeds))),
        image=ImagePlan(tag, tuple(sorted(env.items())), tuple(sorted(labels.items()))),
        builder=builder_version,
    )


def _file_records(folder: Path, files: Sequence[str]) -> Iterator[list[str]]:
    for rel in files:
        path = folder / rel
        info = path.lstat()
        if stat.S_ISLNK(info.st_mode):
            # A link is its target text, never followed: a link out of the folder must not pull files in.
            yield [rel, "link", sha256_digest(os.readlink(path).encode())]
        elif stat.S_ISREG(info.st_mode):
            # Only the executable bit matters: the build installs files 0644 or 0755, whatever else is set.
            executable = "x" if info.st_mode & stat.S_IXUSR else "-"
            yield [rel, executable, file_digest(path)]
        else:
            raise BuildError(f"{path} is neither a file, a folder nor a symlink", hint="remove it from the package")


def file_digest(path: Path) -> str:
    """`sha256:<hex>` of a file, read in chunks (package files, the base image's rootfs tar)."""
    digest = hashlib.sha256()
    with path.open("rb") as handle:
        for chunk in iter(lambda: handle.read(1 << 20), b""):
            digest.update(chunk)
    return f"sha256:{digest.hexdigest()}"


def source_digest(folder: Path, *, skip: Sequence[str] = ()) -> str:
    """`sha256:<hex>` of a package folder: its sorted files' paths, executable bits and contents.

    Timestamps, owners and the order of entries on disk play no part, so a checkout anywhere hashes the same.
    """
    records = list(_file_records(folder, package_files(folder, skip=skip)))
    return sha256_digest(canonical_json(records))


# Golden files ------------------------------------------------------------------------------------------


def golden_source(relative_folder: str) -> str:
    """The fake source digest golden files use for a package folder (POSIX, relative to the catalog)."""
    return sha256_digest(f"golden-source:{relative_folder}".encode())


def golden_plans(catalog: Path, inputs: Mapping[str, Any]) -> dict[str, BuildSpec]:
    """The plan of each `catalog/*/environment.yaml` from golden `inputs` (the content of inputs.json)."""
    base = BaseImage(str(inputs["base"]["reference"]), str(inputs["base"]["digest"]))
    requirements = LockedRequirements.of([str(line) for line in inputs["requirements"]])
    builder_version = str(inputs["builder"])
    files = sorted(catalog.glob("*/environment.yaml"))
    result = parse_resources(files)
    result.raise_for_errors()
    plans: dict[str, BuildSpec] = {}
    for parsed in result.resources:
        environment = parsed.resource
        if not isinstance(environment, Environment):
            continue
        spec_dir = Path(parsed.source.file).parent
        folder = package_folder(environment, spec_dir)
        sources = {} if folder is None else {folder: golden_source(folder.relative_to(catalog).as_posix())}
        plans[environment.metadata.name] = plan(
            environment,
            spec_dir=spec_dir,
            base=base,
            requirements=requirements,
            builder_version=builder_version,
            sources=sources,
        )
    return plans


def golden_text(build: BuildSpec) -> str:
    """A golden file's text: the BuildSpec as indented JSON with sorted keys (reviewable in diffs)."""
    return json.dumps(build.to_dict(), indent=2, sort_keys=True) + "\n"


def update_golden(catalog: Path, golden: Path) -> list[Path]:
    """Rewrites `golden/<name>.json` for every catalog Environment, removes stale ones; returns what changed."""
    inputs = json.loads((golden / "inputs.json").read_text(encoding="utf-8"))
    plans = golden_plans(catalog, inputs)
    changed: list[Path] = []
    for name, build in sorted(plans.items()):
        target = golden / f"{name}.json"
        text = golden_text(build)
        if not target.exists() or target.read_text(encoding="utf-8") != text:
            target.write_text(text, encoding="utf-8")
            changed.append(target)
    for stale in sorted(golden.glob("*.json")):
        if stale.name != "inputs.json" and stale.stem not in plans:
            stale.unlink()
            changed.append(stale)
    return changed


def main(argv: Sequence[str] | None = None) -> int:
    # From a source checkout: src/nodus/builder/plan.py -> builder/ is parents[3], the repository parents[4].
    here = Path(__file__).resolve()
    parser = argparse.ArgumentParser(prog="python -m nodus.builder.plan", description="Rewrite the golden BuildSpecs.")
    parser.add_argument("--update-golden", action="store_true", required=True, help="rewrite the golden files")
    parser.add_argument("--catalog", type=Path, default=here.parents[4] / "catalog")
    parser.add_argument("--golden", type=Path, default=here.parents[3] / "tests" / "golden")
    args = parser.parse_args(argv)
    if not (args.golden / "inputs.json").is_file():
        print(f"no {args.golden / 'inputs.json'}: pass --golden and --catalog", file=sys.stderr)
        return 2
    for path in update_golden(args.catalog, args.golden):
        print(f"updated {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
