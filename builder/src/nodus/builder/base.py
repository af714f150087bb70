"""The base of every grader image: a Debian rootfs with python3 (mmdebstrap), plus `nodus-env`.

Who calls it: the build step (`nodus.builder.build.ensure_base`) when the base that `nodus.lock` pins is not
in the local store yet, and `nodus-build base` to make or refresh it.

Two layers:
1. the rootfs: `mmdebstrap --variant=essential --include=python3` of Debian bookworm with
   `SOURCE_DATE_EPOCH` fixed, docs, man pages and locales left out. mmdebstrap gives the same tar twice while
   the mirror does not change; when it does change, the tar (and so the base digest) changes, which is why
   the tar is an input pinned by digest (the image label `dev.nodus.base.rootfs`) and cached per user;
2. `nodus-env` from this installation: its package under Debian's `/usr/local/lib/python3.11/dist-packages`
   and a `/usr/local/bin/nodus-env` script.

The tar is turned into a layer entry by entry (sorted, fixed mtimes, numeric owners, devices dropped), so the
layer's bytes depend only on the tar's content, never on how or where it was unpacked.
"""

from __future__ import annotations

import importlib.metadata
import importlib.util
import os
import shutil
import subprocess
import tarfile
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from nodus.builder import host_programs
from nodus.builder.layers import Entry, normalize_path
from nodus.builder.oci import (
    ImageConfig,
    ImageRef,
    NewLayer,
    add_layer,
    canonical_json,
    read_image,
    sha256_digest,
    tagged,
    write_image,
)
from nodus.builder.plan import file_digest
from nodus.builder.store import Store, file_lock, user_cache
from nodus.errors import BuildError, PrerequisiteError

BASE_TAG = "nodus-env-base"
BASE_FORMAT = "2"
"""Bumped when how the base is assembled changes (its config, its layers), so a stored base is rebuilt."""
SITE_PACKAGES = "usr/local/lib/python3.11/dist-packages"
GRADER_UID = 10001
NODUS_ENV_SCRIPT = b"#!/usr/bin/python3\nimport sys\nfrom nodus.env.cli import main\nsys.exit(main())\n"
Progress = Callable[[str], None]


@dataclass(frozen=True)
class BaseRecipe:
    """What the rootfs is made from; its `key` names the cached tar."""

    suite: str = "bookworm"
    variant: str = "essential"
    # libstdc++6: numpy, pyarrow and most compiled wheels link it; the essential variant lacks it.
    include: tuple[str, ...] = ("python3", "libstdc++6")
    # 2025-01-01T00:00:00Z: the mtime mmdebstrap writes and every layer entry of the base gets.
    epoch: int = 1735689600
    excludes: tuple[str, ...] = ("/usr/share/doc/*", "/usr/share/man/*", "/usr/share/locale/*", "/usr/share/info/*")
    mirror: str | None = None
    """A Debian mirror URL; None uses mmdebstrap's default (the host's apt sources)."""

    @property
    def key(self) -> str:
        document = {
            "suite": self.suite,
            "variant": self.variant,
            "include": list(self.include),
            "epoch": self.epoch,
            "excludes": list(self.excludes),
            "mirror": self.mirror,
        }
        return sha256_digest(canonical_json(document))

    def command(self, output: Path) -> list[str]:
        command = [
            "mmdebstrap",
            f"--variant={self.variant}",
            f"--include={','.join(self.include)}",
            "--mode=root" if os.geteuid() == 0 else "--mode=unshare",
            *(f"--dpkgopt=path-exclude={pattern}" for pattern in self.excludes),
            self.suite,
            str(output),
        ]
        if self.mirror:
            command.append(self.mirror)
        return command


def rootfs_tar(recipe: BaseRecipe, *, progress: Progress | None = None) -> Path:
    """The recipe's rootfs tar, made with mmdebstrap once per user and reused (two builds wait for one)."""
    cache = user_cache() / "rootfs"
    target = cache / f"{recipe.key.removeprefix('sha256:')}.tar"
    with file_lock(cache / ".lock"):
        if target.exists():
            return target
        if host_programs.which("mmdebstrap") is None:
            raise PrerequisiteError(
                "building the base image needs mmdebstrap", hint="apt-get install mmdebstrap (or pull a base: --base)"
            )
        partial = target.with_suffix(".partial.tar")
        if progress:
            progress(f"mmdebstrap {recipe.suite} ({recipe.variant}, {', '.join(recipe.include)}): about a minute")
        environ = {**os.environ, "SOURCE_DATE_EPOCH": str(recipe.epoch)}
        result = subprocess.run(recipe.command(partial), capture_output=True, text=True, env=environ, check=False)
        if result.returncode != 0:
            partial.unlink(missing_ok=True)
            tail = " | ".join(result.stderr.strip().splitlines()[-3:])
            raise BuildError(f"mmdebstrap failed (exit {result.returncode}): {tail}", hint="check the Debian mirror")
        partial.replace(target)
    return target


def rootfs_entries(tar_path: Path, unpack: Path) -> dict[str, Entry]:
    """The entries of a rootfs tar. Regular files are copied out under numbered names in `unpack` (never by
    their own paths, so no member can write outside it); owners and modes come from the tar, not the disk."""
    entries: dict[str, Entry] = {}
    extracted: dict[str, Path] = {}
    with tarfile.open(tar_path) as tar:
        for number, member in enumerate(tar.getmembers()):
            name = member.name.removeprefix("./").strip("/")
            if name in ("", "."):
                continue  # the root itself
            path = normalize_path(name)
            mode = member.mode & 0o7777
            if member.isdir():
                entries[path] = Entry.directory(mode=mode, uid=member.uid, gid=member.gid)
            elif member.issym():
                entries[path] = Entry.symlink(member.linkname, uid=member.uid, gid=member.gid)
            elif member.isreg():
                host = unpack / str(number)
                source = tar.extractfile(member)
                if source is None:  # pragma: no cover - isreg() members always have content
                    raise BuildError(f"{tar_path}: cannot read {name}")
                with source, host.open("wb") as out:
                    shutil.copyfileobj(source, out, 1 << 20)
                extracted[path] = host
                entries[path] = Entry.file(host, mode=mode, uid=member.uid, gid=member.gid)
            elif member.islnk():
                # A hard link becomes a copy of the file it links to (layers hold no hard links).
                target = extracted.get(normalize_path(member.linkname.removeprefix("./")))
                if target is None:
                    raise BuildError(f"{tar_path}: hard link {name} points at {member.linkname}, not seen before")
                entries[path] = Entry.file(target, mode=mode, uid=member.uid, gid=member.gid)
            # Device nodes and fifos are dropped: the container runtime makes /dev.
    return entries


def nodus_env_entries() -> tuple[dict[str, Entry], str]:
    """`nodus-env` as installed here, at Debian's site path in the image, and its version."""
    spec = importlib.util.find_spec("nodus.env")
    if spec is None or not spec.submodule_search_locations:
        raise PrerequisiteError("nodus-env is not installed", hint="uv sync --all-packages")
    package = Path(next(iter(spec.submodule_search_locations)))
    entries: dict[str, Entry] = {}
    for path in sorted(package.rglob("*.py")):
        relative = path.relative_to(package.parent).as_posix()
        entries[f"{SITE_PACKAGES}/nodus/{relative}"] = Entry.file(path.read_bytes())
    entries["usr/local/bin/nodus-env"] = Entry.file(NODUS_ENV_SCRIPT, mode=0o755)
    return entries, importlib.metadata.version("nodus-env")


def entries_digest(entries: dict[str, Entry]) -> str:
    """A digest of in-memory file entries (paths, modes, bytes): tells whether a stored base is out of date."""
    records = [[path, entry.mode, sha256_digest(entry.data or b"")] for path, entry in sorted(entries.items())]
    return sha256_digest(canonical_json(records))


def base_reference(version: str) -> str:
    """The base's name in BuildSpecs and labels: logical, never a path, so digests do not depend on folders."""
    return f"nodus/env-base:{version}"


def build_base(store: Store, recipe: BaseRecipe | None = None, *, progress: Progress | None = None) -> ImageRef:
    """Builds the base image into the store under `nodus-env-base` and returns it (its digest pins it)."""
    recipe = recipe or BaseRecipe()
    store.ensure()
    tar_path = rootfs_tar(recipe, progress=progress)
    rootfs_digest = file_digest(tar_path)
    env_entries, env_version = nodus_env_entries()
    with store.scratch("base") as unpack:
        if progress:
            progress(f"rootfs layer from {tar_path.name} ({tar_path.stat().st_size // (1 << 20)} MB)")
        rootfs = add_layer(store.images, rootfs_entries(tar_path, unpack), epoch=recipe.epoch)
    tools = add_layer(store.images, env_entries, epoch=recipe.epoch)
    config = ImageConfig(
        env={
            "PATH": "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin",
            "LANG": "C.UTF-8",
            "PYTHONDONTWRITEBYTECODE": "1",
            "PYTHONUNBUFFERED": "1",
        },
        # No entrypoint: the grading service runs `IMAGE nodus-env grade` (GradingSettings.container_command),
        # and `podman run IMAGE` alone prints what the image holds.
        cmd=["nodus-env", "info"],
        user=f"{GRADER_UID}:{GRADER_UID}",
        labels={
            "dev.nodus.base.rootfs": rootfs_digest,
            "dev.nodus.base.recipe": recipe.key,
            "dev.nodus.base.format": BASE_FORMAT,
            "dev.nodus.env.version": env_version,
            "dev.nodus.env.source": entries_digest(env_entries),
            "org.opencontainers.image.title": "nodus-env-base",
            "org.opencontainers.image.version": env_version,
        },
    )
    return write_image(
        store.images,
        BASE_TAG,
        [
            NewLayer(
                rootfs, f"mmdebstrap --variant={recipe.variant} --include={','.join(recipe.include)} {recipe.suite}"
            ),
            NewLayer(tools, f"nodus-env {env_version}"),
        ],
        config=config,
        epoch=recipe.epoch,
    )


def current_base(store: Store, recipe: BaseRecipe | None = None) -> ImageRef | None:
    """The stored base when it was made from this recipe and this nodus-env, else None (build it again)."""
    if tagged(store.images, BASE_TAG) is None:
        return None
    image = read_image(store.images, BASE_TAG)
    labels = image.config.get("config", {}).get("Labels") or {}
    env_entries, _ = nodus_env_entries()
    wanted = {
        "dev.nodus.base.recipe": (recipe or BaseRecipe()).key,
        "dev.nodus.env.source": entries_digest(env_entries),
        "dev.nodus.base.format": BASE_FORMAT,
    }
    return image.ref if all(labels.get(name) == value for name, value in wanted.items()) else None
