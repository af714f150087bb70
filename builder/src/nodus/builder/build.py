"""The effectful half of nodus-build: Environment specs in, digest-pinned grader images in the store out.

Who calls it: the `nodus-build` CLI (`nodus.builder.cli`), benchmarks and tests; later the reconciler's
`nodus apply --build`. `build_paths` finds the Environments under the given paths, makes sure the base image
is there, and builds each one with `build_environment`:

1. **plan**: lock the requirements (`nodus.builder.requirements`), hash the package folder, and make the
   pure `BuildSpec` (`nodus.builder.plan`). Its key is looked up in the build cache: same key and the image
   still in the store -> nothing to do (a no-op rebuild reads specs and hashes files, nothing more).
2. **layers**: the installed requirements, the package (owned by the grader uid, mode 0700: answers are for
   the grader only), on top of the base.
3. **freeze**: that image runs `nodus-env info` and `nodus-env tasks` for every split and seed in the
   sandbox; datasets the environment loads land in a mounted `HF_HOME`, which becomes the data layer, and
   the task lists become the manifests (stored content-addressed and in a layer at /opt/nodus/manifests).
4. **check**: the finished image runs with no network: `nodus-env selfcheck` with the package's fixture
   cases, and every task list again, which must equal its manifest byte for byte (the data really is in the
   image and offline grading sees what the build saw).
5. **publish**: `nodus.lock` refuses a published name@version whose digest would change, else records it;
   the image is tagged `env-<name>-<version>`, provenance (in-toto SLSA v1 in DSSE) is attached beside it,
   and the build cache remembers the key.

An image named by `package.image` is not rebuilt: it is found in the store or pulled by digest, and steps
3-5 verify it (its tasks become its manifests) and record it.
"""

from __future__ import annotations

import json
import os
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path, PurePosixPath
from typing import Any, NoReturn

from nodus.builder import base as base_image
from nodus.builder.layers import Entry, Kind, tree_entries
from nodus.builder.lockfile import Lock, LockEntry
from nodus.builder.oci import (
    Image,
    ImageConfig,
    ImageRef,
    NewLayer,
    add_layer,
    canonical_json,
    read_image,
    remove_tag,
    resolve,
    sha256_digest,
    tag_manifest,
    tagged,
    tags_of,
    write_image,
)
from nodus.builder.package_files import package_files
from nodus.builder.plan import (
    DATA_PATH,
    DEFAULT_SEEDS,
    DEFAULT_SPLITS,
    ENVIRONMENT_PATH,
    MANIFESTS_PATH,
    SITE_PACKAGES_PATH,
    BaseImage,
    BuildSpec,
    LockedRequirements,
    PathSource,
    image_tag,
    package_folder,
    plan,
    source_digest,
)
from nodus.builder.private import write_file
from nodus.builder.requirements import install, lock, package_requirements
from nodus.builder.sandbox import GRADER_UID, Mount, RunResult, failure_cause, run_script
from nodus.builder.store import Store, file_lock
from nodus.errors import BuildError, ConfigError, NodusError
from nodus.specs.environment import Environment
from nodus.specs.parse import Parsed, parse_resources

# Layer mtimes of environment images. Fixed (not SOURCE_DATE_EPOCH), because it is not part of the
# BuildSpec: a variable here would change digests without changing keys.
EPOCH = 0
FIXTURES = "fixtures.jsonl"
OUT = "/nodus-out"
Runner = Callable[..., RunResult]
"""`nodus.builder.sandbox.run_script` or the Dagger backend's: runs a script in an image from the store."""
Reporter = Callable[[str, str, str], None]
"""`reporter(environment, step, detail)`: the CLI shows it as a progress line."""


def builder_version() -> str:
    import importlib.metadata

    return importlib.metadata.version("nodus-build")


@dataclass(frozen=True)
class BuildOptions:
    """How to build: what the CLI's flags set."""

    network: str = "host"
    """The freeze step's network: `host` lets an environment fetch its datasets; `none` forbids it."""
    env: Mapping[str, Mapping[str, str]] = field(default_factory=dict)
    """Extra image variables per environment name (`*` for all): `nodus-build --env [NAME:]VAR=VALUE`."""
    check_only: bool = False
    """Plan and compare with nodus.lock; build nothing (`--check`)."""
    base: str | None = None
    """Where the base comes from: None (the store, else mmdebstrap), `oci:LAYOUT:TAG`, or REGISTRY/REPO@sha256:..."""
    update_base: bool = False
    """Pin a rebuilt base in nodus.lock even when it differs from the one pinned there."""
    provenance: bool = True
    backend: str = "local"
    """`local` runs the sandbox steps with podman; `dagger` on a Dagger engine (same digests)."""


@dataclass
class BuildResult:
    """What happened to one Environment (the CLI's table row and `--json` object)."""

    name: str
    version: str
    source: str
    status: str
    """built, cached (nothing to do), verified (a prebuilt image), current / stale (`--check`), failed."""
    tag: str = ""
    image: str = ""
    key: str = ""
    splits: dict[str, int] = field(default_factory=dict)
    manifests: dict[str, str] = field(default_factory=dict)
    seconds: float = 0.0
    error: str = ""
    hint: str = ""

    def to_json(self) -> dict[str, Any]:
        return {k: v for k, v in self.__dict__.items() if v not in ("", None) or k in ("status", "name")}


@dataclass
class BaseChoice:
    """The base image every environment of this run is built on (`image` is None when only checking)."""

    image: Image | None
    pinned: BaseImage


def pinned_base(lockfile: Lock) -> BaseChoice:
    """For `--check`: the base nodus.lock pins, without looking for it (checking never builds)."""
    pinned = lockfile.base()
    if pinned is None:
        # Nothing was ever built: any digest will do, every environment is stale anyway.
        return BaseChoice(None, BaseImage(base_image.base_reference("unknown"), "sha256:" + "0" * 64))
    return BaseChoice(None, BaseImage(pinned.reference, pinned.digest))


def _silent(environment: str, step: str, detail: str) -> None:
    return None


# The run ----------------------------------------------------------------------------------------------


def find_environments(paths: Sequence[Path]) -> list[Parsed]:
    """Every Environment under `paths` (files or folders); a spec error stops everything (fix it first)."""
    result = parse_resources(list(paths))
    result.raise_for_errors()
    found = [parsed for parsed in result.resources if isinstance(parsed.resource, Environment)]
    if not found:
        raise ConfigError(f"no Environment specs under {', '.join(str(p) for p in paths)}")
    return found


def build_paths(
    paths: Sequence[Path],
    *,
    store: Store,
    lock_path: Path,
    options: BuildOptions | None = None,
    reporter: Reporter | None = None,
    only: Callable[[Parsed], bool] | None = None,
) -> list[BuildResult]:
    """Builds (or with `check_only`, checks) every Environment under `paths`; `only` filters them."""
    options = options or BuildOptions()
    report = reporter or _silent
    environments = [parsed for parsed in find_environments(paths) if only is None or only(parsed)]
    store.ensure()
    # Two builds of one project at once would each rewrite nodus.lock from what they read: one waits.
    with file_lock(store.root / "build.lock"):
        return _build_all(environments, store=store, lock_path=lock_path, options=options, report=report)


def _build_all(
    environments: list[Parsed], *, store: Store, lock_path: Path, options: BuildOptions, report: Reporter
) -> list[BuildResult]:
    lockfile = Lock.load(lock_path)
    results: list[BuildResult] = []
    choice: BaseChoice | None = None
    try:
        for parsed in environments:
            environment = parsed.resource
            assert isinstance(environment, Environment)
            started = time.monotonic()
            try:
                if choice is None and environment.spec.package.image is None:
                    choice = (
                        pinned_base(lockfile) if options.check_only else ensure_base(store, lockfile, options, report)
                    )
                result = build_environment(
                    parsed, store=store, lock=lockfile, base=choice, options=options, report=report
                )
            except NodusError as exc:
                result = BuildResult(
                    environment.metadata.name,
                    environment.spec.version,
                    parsed.source.file,
                    "failed",
                    error=exc.message,
                    hint=exc.hint or "",
                )
            result.seconds = round(time.monotonic() - started, 3)
            results.append(result)
    finally:
        # Everything that did build is recorded, even when a later environment failed: nothing is lost.
        if not options.check_only and lockfile.dumps() != _original(lock_path):
            lockfile.save()
    return results


def _original(path: Path) -> str | None:
    try:
        return path.read_text(encoding="utf-8")
    except FileNotFoundError:
        return None


def ensure_base(store: Store, lockfile: Lock, options: BuildOptions, report: Reporter) -> BaseChoice:
    """The base image: from `--base`, else the one nodus.lock pins (from the store), else built and pinned."""
    pinned = lockfile.base()
    if options.base:
        image = _external_base(store, options.base)
    elif pinned is not None and tagged(store.images, base_image.BASE_TAG) == pinned.digest:
        image = read_image(store.images, base_image.BASE_TAG)
    elif pinned is None and (current := base_image.current_base(store)) is not None:
        image = read_image(store.images, current.tag)
    else:
        report("base", "build", "Debian rootfs (mmdebstrap) + nodus-env")
        built = base_image.build_base(store, progress=lambda detail: report("base", "build", detail))
        image = read_image(store.images, built.tag)
    version = str(image.config.get("config", {}).get("Labels", {}).get("dev.nodus.env.version", "unknown"))
    reference = (
        options.base if options.base and not options.base.startswith("oci:") else base_image.base_reference(version)
    )
    choice = BaseChoice(image, BaseImage(reference, image.ref.manifest_digest))
    if pinned is not None and pinned.digest != choice.pinned.digest and not options.update_base:
        raise BuildError(
            f"nodus.lock pins base image {pinned.digest}, but the base available is {choice.pinned.digest} "
            "(rebuilt from a Debian mirror that has moved on, or given with --base)",
            hint="pull the pinned base with --base REGISTRY/REPO@" + pinned.digest + ", or pin the new one with "
            "--update-base (every environment then needs a new version)",
        )
    if pinned is None or pinned.digest != choice.pinned.digest:
        lockfile.record_base(choice.pinned.reference, choice.pinned.digest)
    return choice


def _external_base(store: Store, reference: str) -> Image:
    """A base named on the command line: `oci:LAYOUT:TAG`, or a registry reference pinned by digest."""
    if reference.startswith("oci:"):
        layout, _, tag = reference.removeprefix("oci:").rpartition(":")
        if not layout or not tag:
            raise ConfigError(f"--base {reference!r} is not oci:LAYOUT:TAG")
        return read_image(Path(layout), tag)
    name, _, digest = reference.partition("@")
    if not digest.startswith("sha256:"):
        raise ConfigError(f"--base {reference!r} is not pinned", hint="name it as REGISTRY/REPO@sha256:<digest>")
    if tagged(store.images, base_image.BASE_TAG) != digest:
        from nodus.builder import registry

        registry.pull(registry.RegistryRef.parse(name), digest, store.images, tag=base_image.BASE_TAG)
    return read_image(store.images, base_image.BASE_TAG)


# One environment ----------------------------------------------------------------------------------------


def build_environment(
    parsed: Parsed,
    *,
    store: Store,
    lock: Lock,
    base: BaseChoice | None,
    options: BuildOptions,
    report: Reporter,
) -> BuildResult:
    environment = parsed.resource
    assert isinstance(environment, Environment)
    name, version = environment.metadata.name, environment.spec.version
    spec_file = Path(parsed.source.file)
    if environment.spec.package.image is not None:
        return verify_prebuilt(parsed, store=store, lock=lock, options=options, report=report)
    assert base is not None  # build_paths makes the base before the first environment that needs one
    report(name, "plan", "locking requirements, hashing the package")
    build, folder, _index = plan_environment(environment, spec_file, store=store, base=base.pinned, options=options)
    result = BuildResult(name, version, str(spec_file), "built", tag=build.image.tag, key=build.key)
    entry = lock.get(name, version, environment.metadata.project)
    if options.check_only:
        result.status = "current" if entry is not None and entry.key == build.key else "stale"
        if entry is not None:
            result.image, result.splits, result.manifests = entry.image, dict(entry.splits), dict(entry.manifests)
        return result
    cached = store.cached_build(build.key)
    if cached is not None and tagged(store.images, build.image.tag) == cached.get("image"):
        _fill(result, cached)
        result.status = "cached"
        _record(lock, build, result, environment.metadata.project)
        return result
    return _build(build, parsed, folder, store=store, lock=lock, base=base, options=options, report=report)


def plan_environment(
    environment: Environment, spec_file: Path, *, store: Store, base: BaseImage, options: BuildOptions
) -> tuple[BuildSpec, Path | None, str | None]:
    """The BuildSpec (and the package folder and index) of one environment: the only inputs that matter."""
    package = environment.spec.package
    folder = package_folder(environment, spec_file.parent)
    sources: dict[Path, str] = {}
    index: str | None = None
    if folder is not None:
        sources[folder] = source_digest(folder, skip=_skipped(folder, spec_file))
        asked = package_requirements(folder)
    else:
        assert package.pip is not None
        index = package.pip.index
        asked = [f"{package.pip.name}=={package.pip.version}"]
    requirements = lock(asked, index=index, store=store)
    extra_env = {**options.env.get("*", {}), **options.env.get(environment.metadata.name, {})}
    build = plan(
        environment,
        spec_dir=spec_file.parent,
        base=base,
        requirements=requirements,
        builder_version=builder_version(),
        sources=sources,
        extra_env=extra_env,
    )
    return build, folder, index


def _skipped(folder: Path, spec_file: Path) -> list[str]:
    """The spec file itself when it lives in the package folder (its in-place fields must not change images)."""
    try:
        return [spec_file.resolve().relative_to(folder.resolve()).as_posix()]
    except ValueError:
        return []


def _build(
    build: BuildSpec,
    parsed: Parsed,
    folder: Path | None,
    *,
    store: Store,
    lock: Lock,
    base: BaseChoice,
    options: BuildOptions,
    report: Reporter,
) -> BuildResult:
    name, version = build.environment, build.version
    project = parsed.resource.metadata.project
    spec_file = Path(parsed.source.file)
    assert base.image is not None  # only --check goes without the base image, and it never builds
    with store.scratch(f"build-{name}") as scratch:
        report(name, "layers", "installing requirements" if build.requirements.lines else "package files")
        layers = _package_layers(build, folder, spec_file, store=store, scratch=scratch)
        config = ImageConfig(env=dict(build.image.env), labels=dict(build.image.labels))
        stage_tag = f"build-{build.key.removeprefix('sha256:')[:16]}"
        stage = write_image(store.images, stage_tag, layers, config=config, base=base.image, epoch=EPOCH)
        try:
            report(name, "freeze", f"loading data and writing task manifests (network: {options.network})")
            data, manifests, info = _freeze(
                build, stage, store=store, scratch=scratch, network=options.network, runner=_runner(options)
            )
            splits = {split: int(count) for split, count in dict(info.get("splits") or {}).items()}
            final_layers = [*layers]
            if data:
                final_layers.append(NewLayer(add_layer(store.images, data, epoch=EPOCH), "datasets (HF_HOME)"))
            final_layers.append(
                NewLayer(add_layer(store.images, _manifest_entries(manifests), epoch=EPOCH), "task manifests")
            )
            digests = {key: store.put_manifest(data_) for key, data_ in manifests.items()}
            labels = {
                **dict(build.image.labels),
                **{f"dev.nodus.splits.{split}": str(count) for split, count in sorted(splits.items())},
                **{f"dev.nodus.manifests.{key.replace('/', '.')}": digest for key, digest in sorted(digests.items())},
            }
            final_config = ImageConfig(env=dict(build.image.env), labels=labels)
            final = write_image(
                store.images, f"{stage_tag}-final", final_layers, config=final_config, base=base.image, epoch=EPOCH
            )
            try:
                report(name, "check", "selfcheck and task lists again, no network")
                _check(
                    build,
                    final,
                    manifests,
                    fixtures=_fixtures(spec_file),
                    store=store,
                    scratch=scratch,
                    runner=_runner(options),
                )
                result = BuildResult(name, version, str(spec_file), "built", tag=build.image.tag, key=build.key)
                result.image, result.splits, result.manifests = final.manifest_digest, splits, digests
                # The lock first: a published version that would change digest is refused before it is tagged.
                _record(lock, build, result, project)
                tag_manifest(store.images, build.image.tag, resolve(store.images, final.tag))
                if options.provenance:
                    report(name, "provenance", "in-toto SLSA v1 statement beside the image")
                    _attach_provenance(build, result, store)
                store.record_build(build.key, {k: v for k, v in result.to_json().items() if k != "seconds"})
                return result
            finally:
                remove_tag(store.images, final.tag)
        finally:
            remove_tag(store.images, stage.tag)


def _package_layers(
    build: BuildSpec, folder: Path | None, spec_file: Path, *, store: Store, scratch: Path
) -> list[NewLayer]:
    layers: list[NewLayer] = []
    if build.requirements.lines:
        # Environments with the same locked requirements (three catalog ones share Reasoning Gym's) share
        # the layer: it is made once per store, keyed by the lock's hash and where it goes.
        key = sha256_digest(
            canonical_json([build.requirements.sha256, SITE_PACKAGES_PATH, EPOCH, build.builder, PRIVATE_LAYOUT])
        )
        layer = store.cached_layer(key)
        if layer is None:
            site = scratch / "site-packages"
            install(build.requirements, site, scratch=scratch)
            entries = grader_private(tree_entries(site, prefix=SITE_PACKAGES_PATH, exclude=_no_bytecode))
            layer = add_layer(store.images, entries, epoch=EPOCH)
            store.record_layer(key, layer)
        layers.append(NewLayer(layer, "requirements (uv pip install --require-hashes)"))
    if folder is not None:
        entries = package_entries(folder, skip=_skipped(folder, spec_file))
        layers.append(
            NewLayer(add_layer(store.images, entries, epoch=EPOCH), f"environment package {build.environment}")
        )
    return layers


PRIVATE_LAYOUT = "grader-private-1"
"""Names the ownership rule below in cache keys: a layer cached before it holds world-readable files."""


def grader_private(entries: Mapping[str, Entry]) -> dict[str, Entry]:
    """`entries` owned by the grader uid, folders 0700, files 0600 (0700 if runnable): only the grader reads them.

    For what may hold answers besides the package (the requirements a pip package installs itself with, the
    datasets cached under HF_HOME at freeze time, the task manifests): completion code runs as another uid."""
    private: dict[str, Entry] = {}
    for path, entry in entries.items():
        if entry.kind is Kind.DIRECTORY:
            mode = 0o700
        elif entry.kind is Kind.FILE:
            mode = 0o700 if entry.mode & 0o100 else 0o600
        else:
            mode = entry.mode
        private[path] = replace(entry, mode=mode, uid=GRADER_UID, gid=GRADER_UID)
    return private


def _private_folder(path: str) -> dict[str, Entry]:
    """The folder itself, so it is the grader's 0700 too (a parent the layer leaves out is made root's 0755)."""
    return {path.strip("/"): Entry.directory(mode=0o700, uid=GRADER_UID, gid=GRADER_UID)}


def _no_bytecode(relative: str) -> bool:
    return relative.endswith((".pyc", "/__pycache__")) or relative == "__pycache__"


def package_entries(folder: Path, *, skip: Sequence[str] = ()) -> dict[str, Entry]:
    """The package's files at /opt/environment, owned by the grader uid, 0700/0600: answers stay private."""
    root = ENVIRONMENT_PATH.strip("/")
    entries: dict[str, Entry] = {root: Entry.directory(mode=0o700, uid=GRADER_UID, gid=GRADER_UID)}
    for relative in package_files(folder, skip=skip):
        host = folder / relative
        parts = relative.split("/")
        for depth in range(1, len(parts)):
            entries.setdefault(
                f"{root}/{'/'.join(parts[:depth])}", Entry.directory(mode=0o700, uid=GRADER_UID, gid=GRADER_UID)
            )
        if host.is_symlink():
            entries[f"{root}/{relative}"] = Entry.symlink(os.readlink(host), uid=GRADER_UID, gid=GRADER_UID)
        else:
            mode = 0o700 if os.access(host, os.X_OK) else 0o600
            entries[f"{root}/{relative}"] = Entry.file(host, mode=mode, uid=GRADER_UID, gid=GRADER_UID)
    return entries


def _writable_folder(path: Path) -> Path:
    path.mkdir(parents=True, exist_ok=True)
    os.chmod(path, 0o700)
    os.chown(path, GRADER_UID, GRADER_UID)
    return path


def _tasks_script(build: BuildSpec) -> str:
    return tasks_script(build.manifests)


def tasks_script(keys: Sequence[str]) -> str:
    """The `sh` line that writes `nodus-env info` and each `split/seed` task list under OUT (one load)."""
    splits = sorted({key.split("/")[0] for key in keys})
    if splits != sorted(DEFAULT_SPLITS):
        raise BuildError(f"nodus-env lists the splits {', '.join(DEFAULT_SPLITS)}; asked for {', '.join(splits)}")
    seeds = sorted({int(key.split("/")[1]) for key in keys})
    return "set -e\nnodus-env manifests --out " + OUT + "".join(f" --seed {seed}" for seed in seeds)


def contract_script(keys: Sequence[str]) -> str:
    """The same files as `tasks_script`, from the contract's own commands only (`info`, `tasks`): for images
    nodus-build did not make, whose nodus-env may predate `manifests`."""
    lines = ["set -e", f"nodus-env info > {OUT}/info.json"]
    for key in keys:
        split, seed = key.split("/")
        lines.append(f"nodus-env tasks --split {split} --seed {seed} > {OUT}/{_tasks_file(key)}")
    return "\n".join(lines)


def _tasks_file(key: str) -> str:
    """`train/42` -> `tasks-train-42.jsonl`: where the scripts above write a task list under OUT."""
    return f"tasks-{key.replace('/', '-')}.jsonl"


def read_outputs(out: Path, keys: Sequence[str]) -> tuple[dict[str, Any], dict[str, bytes]]:
    """What a sandbox run of `tasks_script`/`contract_script` left in `out`: `info` and each task list."""
    info = json.loads((out / "info.json").read_text(encoding="utf-8"))
    return info, {key: (out / _tasks_file(key)).read_bytes() for key in keys}


def _freeze(
    build: BuildSpec, stage: ImageRef, *, store: Store, scratch: Path, network: str, runner: Runner
) -> tuple[dict[str, Entry], dict[str, bytes], dict[str, Any]]:
    data = _writable_folder(scratch / "data")
    out = _writable_folder(scratch / "freeze-out")
    run = runner(
        stage.layout,
        stage.tag,
        stage.config_digest,
        _tasks_script(build),
        network=network,
        mounts=[Mount(data, DATA_PATH, writable=True), Mount(out, OUT, writable=True)],
        # The image says offline; the freeze step is the one time an environment may fetch its data.
        env={"HF_HUB_OFFLINE": "0", "HF_DATASETS_OFFLINE": "0"},
    )
    if run.returncode != 0:
        _fail(build, "the freeze step failed", run, store=store, step="freeze")
    info, manifests = read_outputs(out, build.manifests)
    # Lock files are left by the datasets cache while loading; they are empty and never needed to read it.
    entries = tree_entries(data, prefix=DATA_PATH, owner=_grader_owner, exclude=lambda rel: rel.endswith(".lock"))
    has_data = any(entry.kind.value == "file" for entry in entries.values())
    return (grader_private({**entries, **_private_folder(DATA_PATH)}) if has_data else {}), manifests, info


def _runner(options: BuildOptions) -> Runner:
    if options.backend == "dagger":
        from nodus.builder import dagger_backend

        return dagger_backend.run_script
    return run_script


def _grader_owner(path: str, host: os.stat_result) -> tuple[int, int]:
    return GRADER_UID, GRADER_UID


def _manifest_entries(manifests: Mapping[str, bytes]) -> dict[str, Entry]:
    root = MANIFESTS_PATH.strip("/")
    entries = {f"{root}/{key}.jsonl": Entry.file(data) for key, data in manifests.items()}
    folders = {str(PurePosixPath(path).parent) for path in entries}
    return grader_private({**entries, **{folder: Entry.directory() for folder in folders}, **_private_folder(root)})


def _fixtures(spec_file: Path) -> Path | None:
    found = spec_file.parent / FIXTURES
    return found if found.is_file() else None


def _check(
    build: BuildSpec,
    final: ImageRef,
    manifests: Mapping[str, bytes],
    *,
    fixtures: Path | None,
    store: Store,
    scratch: Path,
    runner: Runner,
) -> None:
    out = _writable_folder(scratch / "check-out")
    mounts = [Mount(out, OUT, writable=True)]
    selfcheck = "nodus-env selfcheck --gold 1"
    if fixtures is not None:
        mounts.append(Mount(fixtures.resolve(), "/nodus-fixtures.jsonl"))
        selfcheck += " --fixtures /nodus-fixtures.jsonl"
    script = f"{_tasks_script(build)}\n{selfcheck}"
    run = runner(final.layout, final.tag, final.config_digest, script, network="none", mounts=mounts)
    if run.returncode != 0:
        _fail(build, "the self-check failed", run, store=store, step="check")
    for key, expected in manifests.items():
        again = (out / _tasks_file(key)).read_bytes()
        if again != expected:
            raise BuildError(
                f"{build.environment}@{build.version}: the {key} tasks differ offline from the ones the freeze step "
                "printed",
                hint="the environment must load only what it fetched at build time and make tasks deterministically",
            )


def _fail(build: BuildSpec, what: str, run: RunResult, *, store: Store, step: str) -> NoReturn:
    """A failed sandbox step as one line that starts with the environment's own error (never podman's
    progress), then the step and check it failed in, then where the whole output is. The log path is in the
    message itself, because `nodus apply --build` shows the message alone."""
    log = _save_log(store, build, step, run.stdout + run.stderr)
    cause, where = failure_cause(run.stdout, run.stderr)
    step_failed = f"{build.environment}@{build.version}: {what}" + (f" {where}" if where else "")
    raise BuildError(f"{cause}: {step_failed}; full log: {log}")


def _save_log(store: Store, build: BuildSpec, step: str, text: str) -> Path:
    path = store.root / "logs" / f"{build.environment}-{build.version}-{step}.log"
    write_file(path, text.encode("utf-8"))  # 0600: what a failed grader printed may show its answers
    return path


def _tail(text: str, count: int = 3) -> str:
    return " | ".join(text.strip().splitlines()[-count:]) or "no output"


def _fill(result: BuildResult, record: Mapping[str, Any]) -> None:
    result.image = str(record.get("image", ""))
    result.splits = dict(record.get("splits") or {})
    result.manifests = dict(record.get("manifests") or {})


def _record(lock: Lock, build: BuildSpec, result: BuildResult, project: str | None) -> None:
    lock.record(
        build.environment,
        build.version,
        LockEntry(
            image=result.image,
            base=build.base.digest,
            requirements=build.requirements.sha256,
            key=build.key,
            splits=result.splits,
            manifests=result.manifests,
            builder=build.builder,
            source=build.package.digest if isinstance(build.package, PathSource) else "",
            indexes=dict(build.requirements.indexes),
        ),
        project,
    )


def _attach_provenance(build: BuildSpec, result: BuildResult, store: Store) -> None:
    from nodus.builder import provenance

    statement = provenance.statement(
        build,
        image_name=build.image.tag,
        image_digest=result.image,
        builder_id="https://nodus.dev/nodus-build",
        invocation_id=None,
        started_on=None,
        finished_on=None,
        byproducts={f"manifests/{key}": digest for key, digest in result.manifests.items()},
    )
    descriptor = resolve(store.images, build.image.tag)
    provenance.attach(store.images, descriptor, provenance.envelope(statement))


# Prebuilt images ---------------------------------------------------------------------------------------


def verify_prebuilt(
    parsed: Parsed, *, store: Store, lock: Lock, options: BuildOptions, report: Reporter
) -> BuildResult:
    """`package.image`: find or pull the image by digest, check it speaks the contract, record its tasks."""
    environment = parsed.resource
    assert isinstance(environment, Environment)
    assert environment.spec.package.image is not None
    name, version = environment.metadata.name, environment.spec.version
    reference = environment.spec.package.image
    repository, _, digest = reference.partition("@")
    tag = image_tag(name, version, environment.metadata.project)
    result = BuildResult(name, version, parsed.source.file, "verified", tag=tag, image=digest, key=digest)
    entry = lock.get(name, version, environment.metadata.project)
    if options.check_only:
        result.status = "current" if entry is not None and entry.image == digest else "stale"
        return result
    if entry is not None and entry.image == digest and tagged(store.images, tag) == digest:
        result.status, result.splits, result.manifests = "cached", dict(entry.splits), dict(entry.manifests)
        return result
    known = tags_of(store.images, digest)
    if known:
        tag_manifest(store.images, tag, resolve(store.images, known[0]))
    else:
        report(name, "pull", f"{repository}@{digest}")
        from nodus.builder import registry

        registry.pull(registry.RegistryRef.parse(_registry_repository(repository)), digest, store.images, tag=tag)
    image = read_image(store.images, tag)
    report(name, "verify", "nodus-env info and tasks in the sandbox, no network")
    with store.scratch(f"verify-{name}") as scratch:
        out = _writable_folder(scratch / "out")
        keys = [f"{split}/{seed}" for split in DEFAULT_SPLITS for seed in DEFAULT_SEEDS]
        script = contract_script(keys)
        run = run_script(
            store.images, tag, image.ref.config_digest, script, network="none", mounts=[Mount(out, OUT, True)]
        )
        if run.returncode != 0:
            raise BuildError(
                f"{name}@{version}: image {reference} does not implement the environment contract: {_tail(run.stderr)}",
                hint="the image must provide `nodus-env info` and `nodus-env tasks` (build it FROM nodus-env-base)",
            )
        info, listed = read_outputs(out, keys)
        result.splits = {split: int(count) for split, count in dict(info.get("splits") or {}).items()}
        result.manifests = {key: store.put_manifest(data) for key, data in listed.items()}
    base_digest = str(image.manifest.get("annotations", {}).get("org.opencontainers.image.base.digest") or digest)
    lock.record(
        name,
        version,
        LockEntry(
            image=digest,
            base=base_digest,
            requirements=LockedRequirements.of([]).sha256,
            key=digest,
            splits=result.splits,
            manifests=result.manifests,
            builder=builder_version(),
        ),
        environment.metadata.project,
    )
    return result


def _registry_repository(name: str) -> str:
    """`host/repo[:tag]` -> `host/repo` (the digest pins it; a tag beside it is informative only)."""
    last = name.rsplit("/", 1)
    if ":" in last[-1]:
        name = name[: name.rfind(":")]
    return name
