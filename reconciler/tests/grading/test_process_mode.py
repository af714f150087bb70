"""Process mode for real: `nodus-env` as uid 10001 in its own network, PID and mount namespaces.

Network isolation is shown the only allowed way: a listener on 127.0.0.1 in the host namespace, which the
host reaches and the sandbox does not. Nothing else is ever probed.
"""

from __future__ import annotations

import json
import os
import socket
import subprocess
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

from nodus.reconciler.grading.models import EnvironmentRef
from nodus.reconciler.grading.service import GradingService
from nodus.reconciler.grading.settings import GradingSettings

REPO = Path(__file__).resolve().parents[3]


pytestmark = pytest.mark.usefixtures("needs_root_namespaces")


@pytest.fixture
def listener() -> Iterator[int]:
    """A TCP listener on 127.0.0.1 of the host namespace; yields its port."""
    server = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    server.bind(("127.0.0.1", 0))
    server.listen(8)
    try:
        yield server.getsockname()[1]
    finally:
        server.close()


@pytest.fixture
def service(tmp_path: Path) -> Iterator[GradingService]:
    settings = GradingSettings(mode="process", stage_dir=tmp_path / "stage", max_parallel=2, task_timeout_s=5)
    with GradingService(settings) as grading:
        yield grading


def _by_word(tasks: list[dict[str, object]]) -> dict[str, str]:
    return {str(t["metadata"]["word"]): str(t["taskId"]) for t in tasks}  # type: ignore[index]


def test_tasks_come_from_the_sandbox_without_answers(service: GradingService, tiny_env: EnvironmentRef) -> None:
    train = service.tasks(tiny_env, "train", seed=1)
    assert len(train) == 8 and all(set(t) == {"taskId", "prompt", "metadata"} for t in train)
    assert [t["taskId"] for t in service.tasks(tiny_env, "train", seed=1)] == [t["taskId"] for t in train]
    assert len(service.tasks(tiny_env, "test", seed=1, limit=1)) == 1


def test_grading_runs_as_the_grader_uid_with_host_evidence(service: GradingService, tiny_env: EnvironmentRef) -> None:
    ids = _by_word(service.tasks(tiny_env, "train", seed=0))
    items = [
        {"taskId": ids["alpha"], "completion": "ahpla"},
        {"taskId": ids["bravo"], "completion": "bravo"},
        {"taskId": ids["delta"], "completion": ""},
        {"taskId": ids["echo"], "completion": "whoami"},
    ]
    verdicts = service.grade("job", tiny_env, items)
    assert [v.verdict for v in verdicts] == ["Correct", "Incorrect", "InvalidOutput", "Correct"]
    process = verdicts[0].evidence["process"]
    assert process["mode"] == "process" and process["isolation"] == "namespaces" and process["networkIsolated"]
    assert process["environmentDigest"].startswith("sha256:") and process["argv"][0] == "unshare"
    assert verdicts[0].evidence["exitCode"] is None and len(verdicts[0].evidence["outputSha256"]) == 64


def test_the_environments_original_files_are_hidden_and_only_its_staged_copy_is_read(
    service: GradingService, tiny_env: EnvironmentRef
) -> None:
    source = tiny_env.paths[0] / "tiny.py"
    assert source.stat().st_mode & 0o004, "the fixture is world-readable on the host"
    task = service.tasks(tiny_env, "train", seed=0)[0]["taskId"]
    completions = [f"read:{source}", "read:/tmp/nodus/environment/0/tiny.py", "read:/etc/passwd"]
    verdicts = service.grade("job", tiny_env, [{"taskId": task, "completion": c} for c in completions])
    assert [v.verdict for v in verdicts] == ["Incorrect", "Correct", "Correct"]


def test_the_sandbox_cannot_reach_a_listener_on_the_hosts_loopback(
    service: GradingService, tiny_env: EnvironmentRef, listener: int
) -> None:
    socket.create_connection(("127.0.0.1", listener), timeout=2).close()  # the host reaches it
    task = service.tasks(tiny_env, "train", seed=0)[0]["taskId"]
    verdict = service.grade("job", tiny_env, [{"taskId": task, "completion": f"connect:{listener}"}])[0]
    assert verdict.verdict == "Incorrect", verdict.evidence


def test_a_grader_that_dies_is_restarted_in_a_fresh_sandbox(tmp_path: Path, tiny_env: EnvironmentRef) -> None:
    settings = GradingSettings(mode="process", stage_dir=tmp_path / "stage", max_parallel=1, window=1)
    with GradingService(settings) as grading:
        ids = _by_word(grading.tasks(tiny_env, "train", seed=0))
        items = [{"taskId": ids["alpha"], "completion": c} for c in ("ahpla", "crash:5", "ahpla")]
        verdicts = grading.grade("job", tiny_env, items)
    assert [v.verdict for v in verdicts] == ["Correct", "InfrastructureFailure", "Correct"]
    assert verdicts[1].evidence["exitCode"] == 5
    assert [v.evidence["process"]["start"] for v in verdicts] == [1, 1, 2]


def test_without_the_privileged_spawner_the_sandbox_drops_to_the_grader_uid_itself(
    tmp_path: Path, tiny_env: EnvironmentRef
) -> None:
    settings = GradingSettings(mode="process", stage_dir=tmp_path / "stage", privileged_spawner=False)
    with GradingService(settings) as grading:
        task = grading.tasks(tiny_env, "train", seed=0)[0]["taskId"]
        verdict = grading.grade("job", tiny_env, [{"taskId": task, "completion": "whoami"}])[0]
    assert verdict.verdict == "Correct"
    assert "--reuid=10001" in verdict.evidence["process"]["argv"][-1]


NOT_ROOT = """
import json, sys
from pathlib import Path
from nodus.reconciler.grading import EnvironmentRef, GradingService, GradingSettings
env = EnvironmentRef("tiny", "1.0.0", paths=(Path(sys.argv[1]),), loader="tiny")
with GradingService(GradingSettings(mode="process", stage_dir=Path(sys.argv[2]))) as grading:
    task = grading.tasks(env, "train", seed=0)[0]["taskId"]
    items = [{"taskId": task, "completion": c} for c in ("whoami", "connect:" + sys.argv[3])]
    print(json.dumps([v.to_json() for v in grading.grade("job", env, items)]))
"""


def test_without_root_the_grader_keeps_our_uid_in_a_user_namespace_and_says_so(
    tiny_env: EnvironmentRef, listener: int
) -> None:
    # Debian's python3 and the sources under /work are readable by any uid; the venv's interpreter is not.
    python = Path("/usr/bin/python3")
    if not python.exists():
        pytest.skip("needs Debian's /usr/bin/python3 to run as another uid")
    uid = 10077  # nobody else's: nodus-env's own tests kill every process of its default runner uid, 10002
    home = Path(tempfile.mkdtemp(prefix="nodus-grading-user-"))
    try:
        os.chown(home, uid, uid)
        sources = [REPO / name / "src" for name in ("reconciler", "builder", "specs", "images/env-base")]
        argv = ["setpriv", f"--reuid={uid}", f"--regid={uid}", "--clear-groups", str(python), "-c", NOT_ROOT]
        argv += [str(tiny_env.paths[0]), str(home / "stage"), str(listener)]
        environment = {"PATH": "/usr/bin:/bin", "HOME": str(home), "PYTHONPATH": ":".join(map(str, sources))}
        result = subprocess.run(
            argv, capture_output=True, text=True, cwd=home, env=environment, timeout=60, check=False
        )
    finally:
        subprocess.run(["rm", "-rf", str(home)], check=True)
    assert result.returncode == 0, result.stderr
    whoami, connect = json.loads(result.stdout)
    assert whoami["verdict"] == "Incorrect"  # it ran as 10077, not 10001
    assert whoami["evidence"]["process"]["isolation"] == "same-uid"
    assert whoami["evidence"]["sandbox"]["isolation"] == "same-uid"
    assert whoami["evidence"]["process"]["networkIsolated"] is True
    assert connect["verdict"] == "Incorrect"


def test_completion_code_runs_as_the_graders_runner_uid_and_cannot_read_the_environment(
    service: GradingService, tiny_env: EnvironmentRef
) -> None:
    task = service.tasks(tiny_env, "train", seed=0)[0]["taskId"]
    verdict = service.grade("job", tiny_env, [{"taskId": task, "completion": "runner"}])[0]
    assert verdict.verdict == "Correct", verdict.evidence
