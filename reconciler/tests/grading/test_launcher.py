"""Choosing the sandbox mode from the settings and what the host has; settings that are refused."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest

from nodus.errors import ConfigError, PrerequisiteError
from nodus.reconciler.grading.launcher import Launcher
from nodus.reconciler.grading.models import EnvironmentRef
from nodus.reconciler.grading.settings import GradingSettings

IMAGE_ONLY = EnvironmentRef("img", "1.0.0", image="localhost/env:1", digest="sha256:aa")
BOTH = EnvironmentRef("both", "1.0.0", image="localhost/env:1", digest="sha256:aa", paths=(Path("/x"),))
FOLDERS_ONLY = EnvironmentRef("dir", "1.0.0", paths=(Path("/x"),))


def _which(*installed: str) -> Callable[[str], str | None]:
    return lambda name: f"/usr/bin/{name}" if name in installed else None


def _launcher(tmp_path: Path, *installed: str, **settings: object) -> Launcher:
    chosen = GradingSettings(stage_dir=tmp_path, **settings)  # type: ignore[arg-type]
    return Launcher(chosen, which=_which(*installed), is_root=True)


def test_auto_picks_a_container_when_podman_is_installed_and_the_environment_has_an_image(tmp_path: Path) -> None:
    launcher = _launcher(tmp_path, "podman", "docker")
    assert launcher.mode_for(BOTH) == "container" and launcher.runtime() == ("podman", "/usr/bin/podman")
    assert launcher.mode_for(FOLDERS_ONLY) == "process"


def test_auto_picks_a_process_without_a_runtime(tmp_path: Path) -> None:
    assert _launcher(tmp_path).mode_for(BOTH) == "process"


def test_a_docker_client_without_an_engine_does_not_count(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("DOCKER_HOST", raising=False)
    monkeypatch.setattr("nodus.reconciler.grading.launcher._docker_engine_configured", lambda: False)
    assert _launcher(tmp_path, "docker").mode_for(BOTH) == "process"
    monkeypatch.setenv("DOCKER_HOST", "unix:///run/user/docker.sock")
    monkeypatch.setattr("nodus.reconciler.grading.launcher._docker_engine_configured", lambda: True)
    assert _launcher(tmp_path, "docker").runtime() == ("docker", "/usr/bin/docker")


def test_an_image_without_a_runtime_asks_for_podman(tmp_path: Path) -> None:
    with pytest.raises(PrerequisiteError) as raised:
        _launcher(tmp_path).mode_for(IMAGE_ONLY)
    assert raised.value.hint and "apt-get install podman" in raised.value.hint


def test_forced_modes_need_what_they_run(tmp_path: Path) -> None:
    with pytest.raises(PrerequisiteError, match="needs docker"):
        _launcher(tmp_path, "podman", mode="container", runtime="docker").mode_for(BOTH)
    with pytest.raises(ConfigError, match="no image"):
        _launcher(tmp_path, "podman", mode="container").mode_for(FOLDERS_ONLY)
    with pytest.raises(ConfigError, match="needs the folders"):
        _launcher(tmp_path, "podman", mode="process").mode_for(IMAGE_ONLY)
    assert _launcher(tmp_path, "podman", mode="process").mode_for(BOTH) == "process"


def test_process_mode_names_the_missing_tools(tmp_path: Path) -> None:
    launcher = _launcher(tmp_path, "unshare", mode="process")
    with pytest.raises(PrerequisiteError, match="prlimit, setpriv, mount") as raised:
        launcher.command_factory(FOLDERS_ONLY, ["grade"], runner_uid=20000)
    assert raised.value.hint and "util-linux" in raised.value.hint


def test_an_environment_needs_an_image_or_folders() -> None:
    with pytest.raises(ConfigError, match="give an image or the folders"):
        EnvironmentRef("empty", "1.0.0")


@pytest.mark.parametrize(
    ("settings", "message"),
    [
        ({"max_parallel": 0}, "max_parallel must be at least 1"),
        ({"window": 0}, "window must be at least 1"),
        ({"task_timeout_s": 0}, "timeouts must be positive"),
        ({"variables": {"PATH": "/evil"}}, "only NODUS_"),
        ({"grader_uid": 20005}, "lies in the runner uid range"),
    ],
)
def test_bad_settings_are_refused(settings: dict[str, object], message: str) -> None:
    with pytest.raises(ConfigError, match=message):
        GradingSettings(**settings)  # type: ignore[arg-type]
