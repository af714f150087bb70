"""Running a command in an image of nodus-build's store as a grader would: podman, no network, the grader's uid.

Who uses it: the image-level tests of the ecosystem adapters (tests/test_ecosystem_images.py,
tests/test_verl_openenv_images.py, tests/test_verifiers_image.py), which check `nodus-env tasks` and
`nodus-env grade` inside the images nodus-build makes. The store's OCI layout is linked under a plain lower-case
name first: podman names an `oci:` image after its path and refuses upper-case or odd characters in it.
"""

from __future__ import annotations

import subprocess
from collections.abc import Mapping
from pathlib import Path

PODMAN = ["podman", "--runtime", "runc", "--cgroup-manager", "cgroupfs"]
RUN = [*PODMAN, "run", "--rm", "--network=none", "--ulimit", "nofile=1024:1024", "--ulimit", "nproc=1000:1000"]
GRADER_USER = "10001:10001"


def layout_link(images: Path, link: Path) -> Path:
    """`link`, a symlink to the store's image layout `images` (podman wants a plain lower-case path)."""
    link.symlink_to(images, target_is_directory=True)
    return link


def run_in_image(
    layout: Path, tag: str, *command: str, stdin: str = "", env: Mapping[str, str] | None = None
) -> subprocess.CompletedProcess[str]:
    """COMMAND in the image TAG of `layout` as the grader's uid, with no network, STDIN as its input."""
    variables = [flag for name, value in (env or {}).items() for flag in ("-e", f"{name}={value}")]
    return subprocess.run(
        [
            *RUN,
            "-i",
            "--user",
            GRADER_USER,
            *variables,
            "--entrypoint",
            command[0],
            f"oci:{layout}:{tag}",
            *command[1:],
        ],
        input=stdin,
        capture_output=True,
        text=True,
        check=False,
    )
