"""The graders' sandbox end to end, on a project whose package is the project folder itself (`path: .`, as the
quickstart's): container mode where podman runs, loaded with podman alone (a fresh machine has no skopeo), and
process mode when the project asks for it, said once, with a staged copy that holds no `.nodus/`.

Before: the image was loaded with skopeo, and without it graders fell silently to process mode, whose staging
copied the whole project folder, `.nodus/` included (its sockets made every grading fail with ENXIO).
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
from click.testing import CliRunner

from nodus.builder.cli import main as nodus_build
from nodus.cli.main import cli

pytestmark = [pytest.mark.podman, pytest.mark.slow]

REPO = Path(__file__).resolve().parents[1]
JOB = """apiVersion: nodus.dev/v1beta1
kind: TrainingJob
metadata: {name: in-place}
spec:
  runtime: echo
  environment: {name: arithmetic@2.0.0, trainTasks: 20, heldOutTasks: 8, seed: 42}
  evaluation: {minComparisonTasks: 8}
  parameters: {steps: 2}
"""


@pytest.fixture
def project(tmp_path: Path, base_reference: str, echo_runtime: str, monkeypatch: pytest.MonkeyPatch) -> Path:
    """The arithmetic package copied into the project folder itself, built, with the echo runtime and a job."""
    root = tmp_path / "project"
    shutil.copytree(REPO / "catalog" / "arithmetic", root, ignore=shutil.ignore_patterns("tests", "__pycache__"))
    text = (
        (root / "environment.yaml")
        .read_text()
        .replace("metadata: {name: arithmetic, project: nodus}", "metadata: {name: arithmetic}")
    )
    (root / "environment.yaml").write_text(text)
    (root / "runtime.yaml").write_text(echo_runtime)
    (root / "job.yaml").write_text(JOB)
    flags = ["--network", "none", "--base", base_reference, "--lock", str(root / "nodus.lock")]
    with pytest.raises(SystemExit) as exited:
        nodus_build([str(root), *flags, "--state-dir", str(root / ".nodus"), "--json"])
    assert exited.value.code == 0
    monkeypatch.chdir(root)
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))  # the process-mode stage goes there
    monkeypatch.setenv("NODUS_ACCOUNTING_INTERVAL", "0.5")
    return root


def nodus(*args: str) -> tuple[int, str]:
    result = CliRunner().invoke(cli, list(args), catch_exceptions=False)
    return result.exit_code, result.output


def isolations(project: Path) -> set[str]:
    log = project / ".nodus" / "jobs" / "default" / "in-place" / "logs" / "gradings.jsonl"
    found: set[str] = set()
    for line in log.read_text().splitlines():
        evidence = json.loads(line).get("evidence") or {}
        found.add(str((evidence.get("process") or {}).get("isolation")))
    return found


def test_graders_run_in_the_image_loaded_with_podman_alone(project: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from nodus.builder import host_programs

    real = host_programs.which
    absent = {"skopeo", "umoci", "buildah"}  # as on a fresh machine of this kind
    monkeypatch.setattr(host_programs, "which", lambda name: None if name in absent else real(name))
    code, output = nodus("apply", ".", "--yes", "--wait", "--timeout", "3m")
    assert code == 0, output
    assert "process mode" not in output
    assert isolations(project) == {"container"}
    code, output = nodus("get", "tj", "in-place", "-o", "json")
    status = json.loads(output)["status"]
    assert status["sandbox"] == {"mode": "container"}
    assert {"type": "ContainerSandbox", "status": "True"} in status["conditions"]


def test_process_mode_when_the_project_asks_says_so_once_and_stages_no_state_folder(project: Path) -> None:
    (project / "nodus.yaml").write_text("grading:\n  sandbox: process\n")
    code, output = nodus("apply", ".", "--yes", "--wait", "--timeout", "3m")
    assert code == 0, output
    said = "TrainingJob/in-place: warning: graders run in process mode: the project asks for it"
    assert output.count(said) == 1, output
    assert isolations(project) == {"namespaces"}
    code, output = nodus("get", "tj", "in-place", "-o", "json")
    status = json.loads(output)["status"]
    assert status["phase"] == "Succeeded"
    condition = next(c for c in status["conditions"] if c["type"] == "ContainerSandbox")
    assert (condition["status"], condition["reason"]) == ("False", "ProcessModeRequested")

    # Said once: a second apply and a describe add no second line or event.
    code, output = nodus("apply", ".", "--yes")
    assert code == 0 and "process mode" not in output, output
    code, output = nodus("describe", "tj/in-place")
    assert output.count("ProcessModeRequested") >= 1
    events = output.split("Events:", 1)[1]
    assert events.count("ProcessModeRequested") == 1, events

    # The staged copy is the image's file set: the package's files, never .nodus/, the lock or the specs.
    stages = list((project.parent / "cache" / "nodus" / "grading" / "environments").iterdir())
    assert len(stages) == 1
    staged = sorted(p.relative_to(stages[0] / "0").as_posix() for p in (stages[0] / "0").rglob("*"))
    assert staged == ["README.md", "arithmetic_env.py", "fixtures.jsonl", "pyproject.toml"], staged


def test_a_project_that_requires_containers_refuses_a_host_without_podman(
    project: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from nodus.builder import host_programs

    (project / "nodus.yaml").write_text("grading:\n  sandbox: container\n")
    real = host_programs.which
    monkeypatch.setattr(host_programs, "which", lambda name: None if name == "podman" else real(name))
    code, output = nodus("apply", ".", "--yes", "--wait", "--timeout", "3m")
    assert code == 1, output
    assert "TrainingJob/in-place: Failed: SandboxUnavailable: the project requires container grading" in output
    assert "podman is not installed" in output
