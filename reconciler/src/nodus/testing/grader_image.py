"""A grader image for podman built from this host's files only: no pulls, no network, seconds to build.

Who uses it: container-mode tests of the grading service and `bench/grading.py`. The real base image (a
Debian rootfs from mmdebstrap, pinned by digest) is nodus-build's job; tests need an image before and
without that, so this one copies Debian's python3.11 with its standard library and the shared libraries it
links, `nodus-env`, and one environment package (owned by the grader uid 10001, mode 0700, as the contract
wants). Images are tagged by a hash of their content and reused; older tags of the same repository go.
"""

from __future__ import annotations

import hashlib
import io
import os
import subprocess
import tarfile
from pathlib import Path

from nodus.builder import host_programs
from nodus.errors import PrerequisiteError

PODMAN = ["podman", "--runtime", "runc", "--cgroup-manager", "cgroupfs"]
PYTHON = Path("/usr/bin/python3.11")
GRADER_UID = 10001
NODUS_ENV_SCRIPT = b"""#!/usr/bin/python3.11
import sys
from nodus.env.cli import main
sys.exit(main())
"""


def _env_source() -> Path:
    """The folder that holds the `nodus/env` package (this checkout's images/env-base/src)."""
    import importlib.util

    spec = importlib.util.find_spec("nodus.env")
    if spec is None or not spec.submodule_search_locations:
        raise PrerequisiteError("nodus-env is not installed", hint="uv sync --all-packages")
    return Path(next(iter(spec.submodule_search_locations))).parents[1]


def image_files(environment: Path) -> dict[str, Path]:
    """Path in the image -> host file: python3.11, its stdlib, linked libraries, nodus-env, the environment."""
    files: dict[str, Path] = {"usr/bin/python3.11": PYTHON}
    stdlib = Path("/usr/lib/python3.11")
    for path in stdlib.rglob("*"):
        if path.is_file() and "__pycache__" not in path.parts and "site-packages" not in path.parts:
            files[str(path.relative_to("/"))] = path
    files.update(_linked_libraries([PYTHON, *stdlib.glob("lib-dynload/*.so")]))
    source = _env_source()
    for path in (source / "nodus" / "env").rglob("*.py"):
        files[f"usr/local/lib/python3.11/dist-packages/{path.relative_to(source)}"] = path
    for path in sorted(environment.rglob("*")):
        if path.is_file() and "__pycache__" not in path.parts and "tests" not in path.relative_to(environment).parts:
            files[f"opt/environment/{path.relative_to(environment)}"] = path
    return files


def _linked_libraries(binaries: list[Path]) -> dict[str, Path]:
    """Each library `ldd` lists, at the path the loader looks for it (its soname), read from its real file."""
    found: dict[str, Path] = {}
    for binary in binaries:
        out = subprocess.run(["ldd", str(binary)], capture_output=True, text=True, check=False).stdout
        for line in out.splitlines():
            parts = line.split()
            if "=>" in parts and len(parts) >= 3 and parts[2].startswith("/"):
                found[parts[2].lstrip("/")] = Path(os.path.realpath(parts[2]))
            elif parts and parts[0].startswith("/"):  # the dynamic loader itself
                found[parts[0].lstrip("/")] = Path(os.path.realpath(parts[0]))
    return found


def rootfs_tar(files: dict[str, Path]) -> bytes:
    """A deterministic tar: root-owned system files; the environment owned by the grader uid, 0700."""
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w", format=tarfile.PAX_FORMAT) as tar:

        def add(name: str, data: bytes | None, mode: int, uid: int = 0, kind: bytes = tarfile.REGTYPE) -> None:
            info = tarfile.TarInfo(name)
            info.mode, info.uid, info.gid, info.mtime, info.type = mode, uid, uid, 0, kind
            if kind == tarfile.SYMTYPE:
                info.linkname = data.decode() if data else ""
                tar.addfile(info)
            elif data is None:
                tar.addfile(info)
            else:
                info.size = len(data)
                tar.addfile(info, io.BytesIO(data))

        folders = {str(Path(name).parent) for name in files} | {"tmp", "usr/local/bin", "opt/environment"}
        expanded = {str(p) for f in folders for p in [Path(f), *Path(f).parents] if str(p) != "."}
        for folder in sorted(expanded):
            owner = GRADER_UID if folder.startswith("opt/environment") else 0
            mode = 0o1777 if folder == "tmp" else 0o700 if owner else 0o755
            add(folder, None, mode, owner, tarfile.DIRTYPE)
        for name, path in sorted(files.items()):
            owner = GRADER_UID if name.startswith("opt/environment") else 0
            mode = 0o600 if owner else (0o755 if os.access(path, os.X_OK) else 0o644)
            add(name, path.read_bytes(), mode, owner)
        add("usr/bin/python3", b"python3.11", 0o777, kind=tarfile.SYMTYPE)
        add("usr/local/bin/nodus-env", NODUS_ENV_SCRIPT, 0o755)
    return buffer.getvalue()


def build_grader_image(
    environment: Path, *, name: str, version: str, loader: str, repository: str, workdir: Path
) -> str:
    """Build (or reuse) the image for `environment`; returns its local reference."""
    if host_programs.which("podman") is None:
        raise PrerequisiteError("podman is not installed", hint="apt-get install podman runc uidmap")
    if not PYTHON.exists():
        raise PrerequisiteError(f"{PYTHON} is needed to build a test image", hint="apt-get install python3.11")
    files = image_files(environment)
    changes = [
        f"ENV NODUS_ENVIRONMENT={name}",
        f"ENV NODUS_ENVIRONMENT_VERSION={version}",
        f"ENV NODUS_ENVIRONMENT_LOADER={loader}",
        "ENV PATH=/usr/local/bin:/usr/bin:/bin",
    ]
    key = hashlib.sha256(NODUS_ENV_SCRIPT + "\n".join(changes).encode())
    for item, path in sorted(files.items()):
        stat = path.stat()
        key.update(f"{item}\0{stat.st_size}\0{stat.st_mtime_ns}\0".encode())
    image = f"{repository}:{key.hexdigest()[:16]}"
    if subprocess.run([*PODMAN, "image", "exists", image], check=False).returncode == 0:
        return image
    tar = workdir / f"{repository.rsplit('/', 1)[-1]}-rootfs.tar"
    tar.write_bytes(rootfs_tar(files))
    argv = [*PODMAN, "import", *(f"--change={c}" for c in changes), str(tar), image]
    subprocess.run(argv, check=True, capture_output=True)
    tar.unlink()
    # Older builds of this repository (other content) are ours to remove.
    listed = subprocess.run(
        [*PODMAN, "images", "--format", "{{.Repository}}:{{.Tag}}", repository],
        capture_output=True,
        text=True,
        check=False,
    ).stdout.split()
    for old in listed:
        if old != image:
            subprocess.run([*PODMAN, "rmi", old], capture_output=True, check=False)
    return image
