"""Running a shell script inside an image from the local store, with podman, as the grader user.

Who calls it: the build step, twice per image: the freeze step (the environment loads its data, which the
build keeps, and prints its tasks; network as `--network` says) and the check step (the finished image,
with no network: `nodus-env selfcheck` and the tasks again, compared with the manifests). Also used to
verify a prebuilt image (`package.image`).

The podman flags are the ones FACTS.md found to work here (runc, cgroupfs, explicit ulimits), plus a
read-only root, no capabilities and no new privileges. The image is read straight from the OCI layout
(`oci:<layout>:<tag>`); podman copies it into its own storage for the run, and the build removes that copy
afterwards so repeated builds do not fill the disk.
"""

from __future__ import annotations

import contextlib
import os
import secrets
import shutil
import subprocess
import tempfile
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from nodus.builder.store import file_lock, user_cache
from nodus.errors import BuildError, PrerequisiteError

PODMAN = ("podman", "--runtime", "runc", "--cgroup-manager", "cgroupfs")
GRADER_UID = 10001


@dataclass(frozen=True)
class Mount:
    host: Path
    target: str
    writable: bool = False


@dataclass(frozen=True)
class RunResult:
    returncode: int
    stdout: str
    stderr: str


def podman() -> list[str]:
    if shutil.which(PODMAN[0]) is None:
        raise PrerequisiteError(
            "nodus-build runs each environment's self-check in a sandbox and needs podman for it",
            hint="apt-get install podman runc uidmap",
        )
    return list(PODMAN)


def run_script(
    layout: Path,
    tag: str,
    config_digest: str,
    script: str,
    *,
    network: str = "none",
    mounts: Sequence[Mount] = (),
    env: Mapping[str, str] | None = None,
    timeout: float = 900,
) -> RunResult:
    """Runs `sh -c script` in `oci:layout:tag` as uid 10001 and returns what it printed.

    `config_digest` is the image's config digest: podman stores the copy it makes under that id (and under
    a name made from the layout path, whatever the tag), which is how the copy is removed afterwards.
    """
    if network not in ("none", "host"):
        raise BuildError(f"sandbox network {network!r} is not none or host")
    command = [
        *podman(),
        "run",
        "--rm",
        f"--network={network}",
        "--ulimit",
        "nofile=1024:1024",
        "--ulimit",
        "nproc=1000:1000",
        "--user",
        f"{GRADER_UID}:{GRADER_UID}",
        "--read-only",
        "--tmpfs",
        "/tmp:rw,size=256m",
        "--cap-drop=ALL",
        "--security-opt",
        "no-new-privileges",
        "--entrypoint",
        "/bin/sh",
    ]
    for mount in mounts:
        command += ["-v", f"{mount.host}:{mount.target}:{'rw' if mount.writable else 'ro'}"]
    for name, value in sorted((env or {}).items()):
        command += ["-e", f"{name}={value}"]
    # podman keeps its copy under the config digest, which two identical builds share: one build's cleanup
    # would delete the image from under the other's run. Runs of one image wait for each other instead.
    lock = user_cache() / "podman-runs" / f"{config_digest.removeprefix('sha256:')}.lock"
    with file_lock(lock), _podman_name(layout) as named:
        command += [f"oci:{named}:{tag}", "-c", script]
        try:
            result = subprocess.run(command, capture_output=True, text=True, timeout=timeout, check=False)
        except subprocess.TimeoutExpired as exc:
            raise BuildError(f"the sandbox run in {tag} took longer than {timeout:.0f} s") from exc
        finally:
            _forget(config_digest)
    if result.returncode in (125, 126, 127) and result.stderr.startswith("Error: "):
        raise BuildError(f"podman could not run {tag}: {_tail(result.stderr)}")
    return RunResult(result.returncode, result.stdout, result.stderr)


@contextlib.contextmanager
def _podman_name(layout: Path) -> Iterator[Path]:
    """A path to the layout that podman can use as an image name.

    podman names an `oci:` image after the layout's path, which must then be a valid lower-case reference:
    `.nodus/images` is not. A symlink under the temporary folder with a plain name is.
    """
    link = Path(tempfile.gettempdir()) / f"nodus-oci-{os.getpid()}-{secrets.token_hex(6)}"
    link.symlink_to(layout.absolute(), target_is_directory=True)
    try:
        yield link
    finally:
        link.unlink(missing_ok=True)


def _forget(config_digest: str) -> None:
    """Removes podman's stored copy of the image (the layout stays the source of truth)."""
    image_id = config_digest.removeprefix("sha256:")
    subprocess.run([*PODMAN, "rmi", "--force", image_id], capture_output=True, check=False)


def _tail(text: str, count: int = 4) -> str:
    return " | ".join(text.strip().splitlines()[-count:]) or "no output"
