"""Running a shell script inside an image from the local store, with podman, as the grader user.

Who calls it: the build step, twice per image: the freeze step (the environment loads its data, which the
build keeps, and prints its tasks; network as `--network` says) and the check step (the finished image,
with no network: `nodus-env selfcheck` and the tasks again, compared with the manifests). Also used to
verify a prebuilt image (`package.image`). And `load_image`, which copies an image from the layout into
podman's own storage under a name (the reconciler's Environment controller: graders run from there) with podman
alone, so no other image tool (skopeo) is needed on the host.

The podman flags are the ones FACTS.md found to work here (runc, cgroupfs, explicit ulimits), plus a
read-only root, no capabilities and no new privileges. The image is read straight from the OCI layout
(`oci:<layout>:<tag>`); podman copies it into its own storage for the run, and the build removes that copy
afterwards so repeated builds do not fill the disk.

When a run fails, `failure_cause` finds the environment's own error in what it printed (a failed check of
the self-check report, the loader's `nodus-env: ...` line, or the last line of a Python traceback, with the
file and line it points at), never podman's progress lines (`Copying blob ...`, `Storing signatures`), which
come on the same standard error while it copies the image.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import secrets
import subprocess
import tempfile
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from nodus.builder import host_programs
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
    if host_programs.which(PODMAN[0]) is None:
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
    with file_lock(lock), podman_name(layout) as named:
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


def load_image(layout: Path, tag: str, name: str, config_digest: str, *, timeout: float = 600) -> None:
    """Copy `oci:layout:tag` into podman's storage as `name` (its id is the config digest); a no-op when `name`
    already is that image. Raises BuildError with podman's own error line when podman cannot."""
    image_id = config_digest.removeprefix("sha256:")
    found = subprocess.run([*podman(), "image", "inspect", "--format", "{{.Id}}", name], capture_output=True, text=True)
    if found.returncode == 0 and found.stdout.strip() == image_id:
        return
    with podman_name(layout) as named:
        # podman names what it pulls from a layout after the layout's path (`localhost<path>:latest`): the
        # image is then tagged with its real name and that path's name is taken off again.
        steps = (
            ["pull", "--quiet", f"oci:{named}:{tag}"],
            ["tag", image_id, name],
            ["untag", image_id, f"localhost{named}:latest"],
        )
        for step in steps:
            try:
                done = subprocess.run([*PODMAN, *step], capture_output=True, text=True, timeout=timeout, check=False)
            except subprocess.TimeoutExpired as exc:
                raise BuildError(f"podman {step[0]} of {tag} took longer than {timeout:.0f} s") from exc
            if done.returncode != 0 and step[0] != "untag":
                raise BuildError(f"podman could not {step[0]} {tag} as {name}: {_error_line(done.stderr)}")


def _error_line(stderr: str) -> str:
    """podman's own error (`Error: ...`), not its progress lines."""
    lines = [text.strip() for text in stderr.splitlines() if text.strip()]
    errors = [text.removeprefix("Error: ") for text in lines if text.startswith("Error: ")]
    return (errors or lines or ["no output"])[-1]


@contextlib.contextmanager
def podman_name(layout: Path) -> Iterator[Path]:
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
    return " | ".join(environment_lines(text)[-count:]) or "no output"


PODMAN_PROGRESS = re.compile(
    r"^(Getting image source signatures|Copying (blob|config) |Writing manifest( to image destination)?|"
    r"Storing signatures|Trying to pull |time=\S+ level=(info|warning)|WARN\[\d+\])"
)
"""Lines podman prints while it copies an image in (or about its own set-up): never an environment's error."""
TRACEBACK_FRAME = re.compile(r'^\s*File "(?P<file>[^"]+)", line (?P<line>\d+)')
EXCEPTION_LINE = re.compile(r"^(?:[A-Za-z_][\w.]*\.)?[A-Z]\w*(?:Error|Exception|Exit|Interrupt|Warning)\b:?.*")


def environment_lines(text: str) -> list[str]:
    """`text` without podman's progress lines and blank lines."""
    return [row.rstrip() for row in text.splitlines() if row.strip() and not PODMAN_PROGRESS.match(row.strip())]


def failure_cause(stdout: str, stderr: str) -> tuple[str, str]:
    """Why a sandbox run of `nodus-env` failed, in the environment's own words, and where (which check):
    (`ZeroDivisionError: division by zero in reward (reverse_words.py:12)`, `on the gold answer of train task
    t1 (expected Correct)`); the second is empty when the run failed before any check."""
    report = _selfcheck_report(stdout)
    if report is not None:
        failed = [check for check in report.get("checks") or [] if isinstance(check, dict) and not check.get("ok")]
        if failed:
            cause, where = _check_failure(failed[0])
            more = f" (and {len(failed) - 1} more failed checks)" if len(failed) > 1 else ""
            return cause, where + more
    lines = environment_lines(stderr)
    for row in reversed(lines):
        if row.startswith("nodus-env: "):
            return row.removeprefix("nodus-env: "), ""
    traceback_line = _traceback_cause(lines)
    if traceback_line:
        return traceback_line, ""
    return " | ".join([*lines, *environment_lines(stdout)][-3:]) or "it printed nothing", ""


def _selfcheck_report(stdout: str) -> dict[str, Any] | None:
    """The JSON report `nodus-env selfcheck` prints last (indented, so from its last line that is `{`)."""
    start = stdout.rfind("\n{")
    candidate = stdout[start + 1 :] if start >= 0 else stdout if stdout.startswith("{") else ""
    try:
        report = json.loads(candidate)
    except ValueError:
        return None
    return report if isinstance(report, dict) and "checks" in report else None


def _check_failure(check: dict[str, Any]) -> tuple[str, str]:
    """(the grader's message or the verdict it gave, which check it was)."""
    what, split = str(check.get("check", "a check")), check.get("split")
    where = f"{split} " if split else ""
    detail = check.get("detail")
    if what.startswith("gold answers") and isinstance(detail, list) and detail and isinstance(detail[0], dict):
        first = detail[0]
        verdicts = ", ".join(map(str, first.get("verdicts") or [])) or "no verdict"
        cause = "; ".join(map(str, first.get("messages") or [])) or f"the gold answer was graded {verdicts}"
        return cause, f"on the gold answer of {where}task {first.get('taskId')} (expected Correct)"
    if what.startswith("empty reply"):
        cause = str(check.get("message") or f"an empty reply was graded {detail}")
        return cause, f"on an empty reply to {where}task {check.get('taskId')} (expected InvalidOutput or Incorrect)"
    if isinstance(detail, dict) and "expected" in detail:
        got, expected = detail.get("got") or ["?", None], detail.get("expected") or ["?", None]
        cause = str(detail.get("message") or f"graded {got[0]} (reward {got[1]})")
        return cause, f"in {what} (expected {expected[0]}, reward {expected[1]})"
    return f"{what}: {detail}" if detail else what, ""


def _traceback_cause(lines: list[str]) -> str:
    """The exception line of the last Python traceback, with the file and line of its innermost frame."""
    start = max((i for i, row in enumerate(lines) if row.startswith("Traceback (most recent call last)")), default=-1)
    if start < 0:
        return ""
    frame = ""
    for row in lines[start + 1 :]:
        found = TRACEBACK_FRAME.match(row)
        if found:
            frame = f"{os.path.basename(found['file'])}:{found['line']}"
        elif not row.startswith(" ") and EXCEPTION_LINE.match(row):
            return f"{row} ({frame})" if frame and frame not in row else row
    return ""
