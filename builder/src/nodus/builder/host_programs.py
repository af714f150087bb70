"""Every program nodus runs on the host, where it comes from, and which of them the main job needs.

Who calls it: every module that looks a host program up (`which(name)` here instead of `shutil.which`), so a program
the code starts to run is a line of this table first; `tests/test_host_programs.py` reads the source for the
programs it runs and checks each is here, and that the quickstart's setup (`.ci/system-packages quickstart`, the
Makefile) provides every program `quickstart` marks. That is how a missing install step shows on a machine where
earlier runs installed everything (CI's), not first on a user's fresh one. Standard library only: process-mode
grading imports it.
"""

from __future__ import annotations

import shutil
from dataclasses import dataclass


@dataclass(frozen=True)
class Program:
    name: str
    package: str
    """The Debian package that provides it (or `pip:NAME` for one the Makefile installs with pip)."""
    purpose: str
    quickstart: bool = False
    """`make quickstart` runs it on this kind of machine (then its setup must install it)."""
    base: bool = False
    """In every Debian 12 install (Essential or required: util-linux, mount, libc-bin)."""


PROGRAMS: dict[str, Program] = {
    program.name: program
    for program in (
        Program("podman", "podman", "graders in their images, nodus-build's self-check, trainer images", True),
        Program("runc", "runc", "podman's OCI runtime here (crun fails on this host's cgroups)", True),
        Program("newuidmap", "uidmap", "podman's user namespaces", True),
        Program("mmdebstrap", "mmdebstrap", "the base image's Debian root file system (nodus-build)", True),
        Program("uv", "pip:uv", "locking and installing an Environment's requirements (nodus-build)", True),
        Program("unshare", "util-linux", "process-mode graders: network, pid and mount namespaces", True, True),
        Program("prlimit", "util-linux", "process-mode graders: resource limits", True, True),
        Program("setpriv", "util-linux", "process-mode graders: the dropped uid and capabilities", True, True),
        Program("mount", "mount", "process-mode graders: their private view of the files", True, True),
        Program("git", "git", "nodus controller (the repository it syncs), nodus-build --changed"),
        Program("docker", "docker.io", "graders in their images where docker is configured instead of podman"),
        Program("dagger", "pip:dagger-io", "nodus-build's optional Dagger backend (CI runners)"),
        Program("skopeo", "skopeo", "tests: every image the builder writes is one skopeo accepts"),
        Program("umoci", "umoci", "tests: every image the builder writes is one umoci accepts"),
        Program("buildah", "buildah", "bench/build.py's baseline"),
        Program("docker-registry", "docker-registry", "tests: push and pull against a registry on 127.0.0.1"),
        Program("ip", "iproute2", "nodus cluster --netns and the Ray tests: a network namespace with only loopback"),
        Program("nsenter", "util-linux", "nodus cluster --netns: each Ray node started in that namespace", base=True),
        Program("ray", "pip:ray", "nodus cluster: the Ray nodes it starts (the nodus[ray] extra)"),
        Program("nvidia-smi", "nvidia-smi", "the local executor's GPUs: a GPU request this host lacks is refused"),
        Program("vllm", "pip:vllm", "GPU hosts' model server for InferenceEndpoints (nodus-runtimes' cuda extra)"),
        Program("ldd", "libc-bin", "tests: the libraries a hand-made test image needs", base=True),
        Program("bash", "bash", "nodus.testing.workflows: the steps of a GitHub workflow, run here", base=True),
        Program("sh", "dash", "nodus.testing.workflows: a workflow step's shell", base=True),
    )
}


def which(name: str) -> str | None:
    """`shutil.which` for a program of PROGRAMS; a name that is not there is a bug (add it to the table)."""
    if name not in PROGRAMS:
        raise KeyError(f"{name} is not in nodus.builder.host_programs.PROGRAMS: add it, with its package")
    return shutil.which(name)
