"""Fixtures for the grading service tests: a misbehaving fake grader, the tiny environment, real sandboxes.

The fake grader (`fixtures/fake_grader.py`) runs as a plain process through the same `SandboxProcess` and
`Grader` code as real graders, so the protocol, timeouts, crashes and restarts are tested without
namespaces. `tiny_env` is a real environment package for `nodus-env` in process mode; `grader_image` builds
a container image for podman from local files only (no pulls, no network), once per content.
"""

from __future__ import annotations

import os
import shutil
import sys
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path

import pytest

from nodus.errors import PrerequisiteError
from nodus.reconciler.grading.grader import Grader, GraderTimings
from nodus.reconciler.grading.launcher import Launcher
from nodus.reconciler.grading.models import EnvironmentRef
from nodus.reconciler.grading.process import SandboxProcess
from nodus.reconciler.grading.sandbox import SandboxCommand
from nodus.reconciler.grading.service import GradingService
from nodus.reconciler.grading.settings import GradingSettings
from nodus.testing.grader_image import build_grader_image

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


@pytest.fixture(scope="session")
def grader_image(tmp_path_factory: pytest.TempPathFactory) -> str:
    """A local podman image with python3, nodus-env and the tiny environment; built once per content."""
    try:
        return build_grader_image(
            FIXTURES / "tiny_env",
            name="tiny",
            version="1.0.0",
            loader="tiny",
            repository=IMAGE_REPOSITORY,
            workdir=tmp_path_factory.mktemp("image"),
        )
    except PrerequisiteError as exc:
        pytest.skip(f"{exc.message} ({exc.hint})")
