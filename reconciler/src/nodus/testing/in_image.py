"""Running a command in an image of nodus-build's store as a grader would: podman, no network, the grader's uid.

Who uses it: the image-level tests of the ecosystem adapters (tests/test_ecosystem_images.py,
tests/test_verl_openenv_images.py, tests/test_verifiers_image.py), which check `nodus-env tasks` and
`nodus-env grade` inside the images nodus-build makes. The store's OCI layout is linked under a plain lower-case
name first: podman names an `oci:` image after its path and refuses upper-case or odd characters in it.
"""

from __future__ import annotations

import json
import subprocess
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from nodus.builder.store import Store

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


class BuiltImage:
    """An image nodus-build made for the project at `project` (its store's layout, linked under `scratch`), by
    tag: what the grader's commands print in it."""

    def __init__(self, project: Path, scratch: Path, tag: str) -> None:
        self.layout = layout_link(Store(project / ".nodus").images, scratch / "layout-link")
        self.tag = tag

    def run(self, *command: str, stdin: str = "", loader: str | None = None) -> str:
        """COMMAND in the image as the grader's uid with no network (LOADER, if given, as the loader): its stdout.
        A command that fails fails the test, with the end of its stderr."""
        env = {"NODUS_ENVIRONMENT_LOADER": loader} if loader else None
        result = run_in_image(self.layout, self.tag, *command, stdin=stdin, env=env)
        assert result.returncode == 0, result.stderr[-2000:]
        return result.stdout

    def test_tasks(self) -> tuple[list[str], list[dict[str, Any]]]:
        """`nodus-env tasks --split test` in the image: its lines, raw and parsed."""
        lines = self.run("nodus-env", "tasks", "--split", "test", "--seed", "0").splitlines()
        return lines, [json.loads(line) for line in lines]

    def grade(self, requests: list[dict[str, Any]], loader: str | None = None) -> list[dict[str, Any]]:
        """`nodus-env grade` of `requests` (one JSON line each) in the image: one verdict line each, parsed."""
        stdin = "".join(json.dumps(request) + "\n" for request in requests)
        return [json.loads(line) for line in self.run("nodus-env", "grade", stdin=stdin, loader=loader).splitlines()]
