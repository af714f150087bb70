"""Fixtures for the grading service tests: a misbehaving fake grader, the tiny environment, real sandboxes.

The fake grader (`fixtures/fake_grader.py`) runs as a plain process through the same `SandboxProcess` and
`Grader` code as real graders, so the protocol, timeouts, crashes and restarts are tested without
namespaces. `tiny_env` is a real environment package for `nodus-env` in process mode; `grader_image` builds
a container image for podman from local files only (no pulls, no network), once per content.
"""

from __future__ import annotations

import hashlib
import io
import os
import shutil
import subprocess
import sys
import tarfile
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path

import pytest

from nodus.reconciler.grading.grader import Grader, GraderTimings
from nodus.reconciler.grading.launcher import Launcher
from nodus.reconciler.grading.models import EnvironmentRef
from nodus.reconciler.grading.process import SandboxProcess
from nodus.reconciler.grading.sandbox import SandboxCommand
from nodus.reconciler.grading.service import GradingService
from nodus.reconciler.grading.settings import GradingSettings

FIXTURES = Path(__file__).parent / "fixtures"
REPO = Path(__file__).resolve().parents[3]
ENV_SOURCE = REPO / "images" / "env-base" / "src"


def fake_command(*args: str) -> SandboxCommand:
    """The fake grader as a plain process (no sandbox: the protocol is what is under test)."""
    argv = (sys.executable, str(FIXTURES / "fake_grader.py"), *args)
    return SandboxCommand(argv, "process", "same-uid", network_isolated=False)


@pytest.fixture
def make_grader() -> Iterator[Callable[..., Grader]]:
    """`make_grader(*fake_args, task_timeout_s=, window=, ...)`: a Grader on the fake, closed afterwards."""
    made: list[Grader] = []

    def make(
        *args: str,
        task_timeout_s: float = 5.0,
        kill_grace_s: float = 0.0,
        start_timeout_s: float = 5.0,
        window: int = 1,
        crash_loop_limit: int = 3,
        max_line_bytes: int = 1 << 20,
    ) -> Grader:
        grader = Grader(
            lambda: SandboxProcess(fake_command(*args), max_line_bytes=max_line_bytes),
            timings=GraderTimings(task_timeout_s, kill_grace_s, start_timeout_s),
            window=window,
            crash_loop_limit=crash_loop_limit,
        )
        made.append(grader)
        return grader

    yield make
    for grader in made:
        grader.close()


class FakeLauncher(Launcher):
    """Starts the fake grader for every environment and remembers the runner uid of each grader made."""

    def __init__(self, settings: GradingSettings, *args: str) -> None:
        super().__init__(settings)
        self.args = args
        self.runner_uids: list[int | None] = []

    def command_factory(
        self, env: EnvironmentRef, arguments: Sequence[str], *, runner_uid: int | None
    ) -> Callable[[], SandboxCommand]:
        self.runner_uids.append(runner_uid)
        return lambda: fake_command(*self.args)


@pytest.fixture
def fake_service(tmp_path: Path) -> Iterator[Callable[..., GradingService]]:
    """`fake_service(*fake_args, **settings)`: a GradingService whose graders are the fake, closed afterwards."""
    made: list[GradingService] = []

    def make(*args: str, **settings: object) -> GradingService:
        chosen = GradingSettings(stage_dir=tmp_path / "stage", **settings)  # type: ignore[arg-type]
        service = GradingService(chosen, launcher=FakeLauncher(chosen, *args))
        made.append(service)
        return service

    yield make
    for service in made:
        service.close_all()


@pytest.fixture
def fake_env() -> EnvironmentRef:
    return EnvironmentRef("fake", "1.0.0", paths=(FIXTURES,))


@pytest.fixture
def tiny_env() -> EnvironmentRef:
    """The tiny environment package, for process mode."""
    return EnvironmentRef("tiny", "1.0.0", paths=(FIXTURES / "tiny_env",), loader="tiny")


@pytest.fixture
def needs_root_namespaces() -> None:
    if os.geteuid() != 0:
        pytest.skip("process mode with its own uid and namespaces needs root")
    for tool in ("unshare", "setpriv", "prlimit", "mount"):
        if shutil.which(tool) is None:
            pytest.skip(f"{tool} is not installed (util-linux)")


# --- a container image from local files only ------------------------------------------------------------

IMAGE_REPOSITORY = "localhost/nodus-grading-test"
PODMAN = ["podman", "--runtime", "runc", "--cgroup-manager", "cgroupfs"]
PYTHON = Path("/usr/bin/python3.11")


def _image_files() -> dict[str, Path]:
    """Path in the image -> host file: Debian's python3.11, its stdlib, the libraries it links, nodus-env."""
    files: dict[str, Path] = {"usr/bin/python3.11": PYTHON}
    stdlib = Path("/usr/lib/python3.11")
    for path in stdlib.rglob("*"):
        if path.is_file() and "__pycache__" not in path.parts and "site-packages" not in path.parts:
            files[str(path.relative_to("/"))] = path
    binaries = [PYTHON, *stdlib.glob("lib-dynload/*.so")]
    files.update(_linked_libraries(binaries))
    for path in (ENV_SOURCE / "nodus" / "env").rglob("*.py"):
        files[f"usr/local/lib/python3.11/dist-packages/{path.relative_to(ENV_SOURCE)}"] = path
    files["opt/environment/tiny.py"] = FIXTURES / "tiny_env" / "tiny.py"
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


NODUS_ENV_SCRIPT = b"""#!/usr/bin/python3.11
import sys
from nodus.env.cli import main
sys.exit(main())
"""


def _rootfs_tar(files: dict[str, Path]) -> bytes:
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

        folders = {str(Path(name).parent) for name in files} | {"tmp", "usr/local/bin"}
        expanded = {str(p) for f in folders for p in [Path(f), *Path(f).parents] if str(p) != "."}
        for folder in sorted(expanded):
            owner = 10001 if folder.startswith("opt/environment") else 0
            mode = 0o1777 if folder == "tmp" else 0o700 if owner else 0o755
            add(folder, None, mode, owner, tarfile.DIRTYPE)
        for name, path in sorted(files.items()):
            owner = 10001 if name.startswith("opt/environment") else 0
            mode = 0o600 if owner else (0o755 if os.access(path, os.X_OK) else 0o644)
            add(name, path.read_bytes(), mode, owner)
        add("usr/bin/python3", b"python3.11", 0o777, kind=tarfile.SYMTYPE)
        add("usr/local/bin/nodus-env", NODUS_ENV_SCRIPT, 0o755)
    return buffer.getvalue()


@pytest.fixture(scope="session")
def grader_image(tmp_path_factory: pytest.TempPathFactory) -> str:
    """A local podman image with python3, nodus-env and the tiny environment; built once per content."""
    if shutil.which("podman") is None:
        pytest.skip("podman is not installed (Debian: apt-get install podman runc)")
    if not PYTHON.exists():
        pytest.skip(f"{PYTHON} is needed to build the test image (Debian: apt-get install python3.11)")
    files = _image_files()
    key = hashlib.sha256(NODUS_ENV_SCRIPT)
    for name, path in sorted(files.items()):
        stat = path.stat()
        key.update(f"{name}\0{stat.st_size}\0{stat.st_mtime_ns}\0".encode())
    image = f"{IMAGE_REPOSITORY}:{key.hexdigest()[:16]}"
    if subprocess.run([*PODMAN, "image", "exists", image], check=False).returncode == 0:
        return image
    tar = tmp_path_factory.mktemp("image") / "rootfs.tar"
    tar.write_bytes(_rootfs_tar(files))
    changes = ["ENV NODUS_ENVIRONMENT=tiny", "ENV NODUS_ENVIRONMENT_VERSION=1.0.0", "ENV NODUS_ENVIRONMENT_LOADER=tiny"]
    changes += ["ENV PATH=/usr/local/bin:/usr/bin:/bin"]
    argv = [*PODMAN, "import", *(f"--change={c}" for c in changes), str(tar), image]
    subprocess.run(argv, check=True, capture_output=True)
    # Older builds of this test image (other content) are ours to remove.
    listed = subprocess.run(
        [*PODMAN, "images", "--format", "{{.Repository}}:{{.Tag}}", IMAGE_REPOSITORY],
        capture_output=True,
        text=True,
        check=False,
    ).stdout.split()
    for old in listed:
        if old != image:
            subprocess.run([*PODMAN, "rmi", old], capture_output=True, check=False)
    return image
