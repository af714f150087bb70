"""Container mode for real with podman: a local test image (no pulls), uid 10001, no network, restarts.

The image is built by the `grader_image` fixture from this host's files: Debian's python3.11 and the
libraries it links, the nodus-env sources and the tiny environment (owned by uid 10001, mode 0700).
"""

from __future__ import annotations

import socket
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

from nodus.reconciler.grading.models import EnvironmentRef
from nodus.reconciler.grading.service import GradingService
from nodus.reconciler.grading.settings import GradingSettings

pytestmark = pytest.mark.podman

PODMAN = ["podman", "--runtime", "runc", "--cgroup-manager", "cgroupfs"]


@pytest.fixture
def image_env(grader_image: str) -> EnvironmentRef:
    return EnvironmentRef("tiny", "1.0.0", image=grader_image)


@pytest.fixture
def service(tmp_path: Path) -> Iterator[GradingService]:
    settings = GradingSettings(mode="container", runtime="podman", stage_dir=tmp_path, max_parallel=1, window=1)
    with GradingService(settings) as grading:
        yield grading


def _name(argv: list[str]) -> str:
    return argv[argv.index("--name") + 1]


def _containers() -> list[str]:
    listed = subprocess.run(
        [*PODMAN, "ps", "--all", "--filter", "name=nodus-grader-", "--format", "{{.Names}}"],
        capture_output=True,
        text=True,
        check=True,
    )
    return listed.stdout.split()


def test_tasks_and_verdicts_from_a_container_running_as_the_grader_uid(
    service: GradingService, image_env: EnvironmentRef
) -> None:
    tasks = service.tasks(image_env, "train", seed=0)
    assert len(tasks) == 8 and all("answer" not in t for t in tasks)
    word = tasks[0]["metadata"]["word"]
    items = [{"taskId": tasks[0]["taskId"], "completion": c} for c in (word[::-1], "nope", "whoami")]
    verdicts = service.grade("job", image_env, items)
    assert [v.verdict for v in verdicts] == ["Correct", "Incorrect", "Correct"]
    process = verdicts[0].evidence["process"]
    assert process["mode"] == "container" and process["isolation"] == "container"
    assert process["image"].startswith("sha256:") and process["imageRef"] == image_env.image
    assert "--network=none" in process["argv"] and "--read-only" in process["argv"]


def test_the_container_cannot_reach_a_listener_on_the_hosts_loopback(
    service: GradingService, image_env: EnvironmentRef
) -> None:
    server = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    server.bind(("127.0.0.1", 0))
    server.listen(8)
    try:
        port = server.getsockname()[1]
        socket.create_connection(("127.0.0.1", port), timeout=2).close()  # the host reaches it
        task = service.tasks(image_env, "train", seed=0)[0]["taskId"]
        verdict = service.grade("job", image_env, [{"taskId": task, "completion": f"connect:{port}"}])[0]
    finally:
        server.close()
    assert verdict.verdict == "Incorrect", verdict.evidence


@pytest.mark.slow
def test_a_container_that_dies_or_hangs_is_replaced_and_removed(tmp_path: Path, image_env: EnvironmentRef) -> None:
    settings = GradingSettings(
        mode="container", stage_dir=tmp_path, max_parallel=1, window=1, task_timeout_s=1, kill_grace_s=0.5
    )
    with GradingService(settings) as grading:
        task = grading.tasks(image_env, "train", seed=0)[0]["taskId"]
        completions = ("crash:4", "whoami", "sleep:30", "hang:30", "whoami")
        verdicts = grading.grade("job", image_env, [{"taskId": task, "completion": c} for c in completions])
        assert [v.verdict for v in verdicts] == [
            "InfrastructureFailure",
            "Correct",
            *["InfrastructureFailure"] * 2,
            "Correct",
        ]
        assert verdicts[0].evidence["exitCode"] == 4
        # nodus-env ends a slow reward itself (and lives on); a hang it cannot end is killed by the host.
        assert "took longer than 1s" in verdicts[2].evidence["sandbox"]["message"]
        assert "no reply to task" in verdicts[3].evidence["message"] and verdicts[3].evidence["exitCode"] is not None
        assert [v.evidence["process"]["start"] for v in verdicts] == [1, 2, 2, 2, 3]
        names = [_name(verdicts[i].evidence["process"]["argv"]) for i in (0, 3, 4)]
        # The dead and the killed containers are gone; the live one is kept for the next call.
        assert [name in _containers() for name in names] == [False, False, True]
    assert not set(names) & set(_containers())


def test_completion_code_runs_as_the_graders_runner_uid_and_cannot_read_the_environment(
    service: GradingService, image_env: EnvironmentRef
) -> None:
    task = service.tasks(image_env, "train", seed=0)[0]["taskId"]
    verdict = service.grade("job", image_env, [{"taskId": task, "completion": "runner"}])[0]
    assert verdict.verdict == "Correct", verdict.evidence
