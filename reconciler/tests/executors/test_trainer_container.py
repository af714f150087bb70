"""The `podman run` of a job with an image: the contract at /nodus paths, no network, only the job's env."""

from __future__ import annotations

from pathlib import Path

import pytest

from nodus.errors import PrerequisiteError
from nodus.reconciler.executors.local import trainer_container
from nodus.reconciler.executors.local.job import JobFiles, JobSpec


def argv_of(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> tuple[list[str], JobFiles]:
    monkeypatch.setattr(trainer_container.host_programs, "which", lambda name: f"/usr/bin/{name}")
    files = JobFiles.of(tmp_path / "jobs", "default", "boxed")
    job = JobSpec(
        name="boxed",
        project="default",
        command=("python3", "-m", "trainer", "--fast"),
        image="localhost/trainer@sha256:" + "a" * 64,
        env={"HF_HUB_OFFLINE": "1", "NODUS_INPUT_MODEL": str(tmp_path / "models" / "tiny")},
    )
    contract = {
        "NODUS_INPUT_PARAMS": str(files.input),
        "NODUS_STATE_DIR": str(files.state),
        "NODUS_OUTPUT_DIR": str(files.outputs),
        "NODUS_ATTEMPT_API": str(files.socket),
        "NODUS_JOB_NAME": "boxed",
        "NODUS_ATTEMPT": "2",
    }
    return trainer_container.run_argv(job, files, contract), files


def pairs(argv: list[str], flag: str) -> list[str]:
    return [argv[i + 1] for i, part in enumerate(argv) if part == flag]


def test_the_contract_is_mounted_at_fixed_paths_and_nothing_else_leaks(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("HOST_TOKEN", "stays on the host")
    argv, files = argv_of(tmp_path, monkeypatch)
    assert argv[:6] == ["/usr/bin/podman", "--runtime", "runc", "--cgroup-manager", "cgroupfs", "run"]
    assert {"--rm", "--init", "--pull=never", "--network=none", "--cap-drop=ALL"} <= set(argv)
    assert pairs(argv, "--name") == [trainer_container.container_name(files)]
    assert pairs(argv, "--volume") == [
        f"{files.input}:/nodus/input:ro",
        f"{files.state}:/nodus/state:rw",
        f"{files.outputs}:/nodus/outputs:rw",
        f"{files.socket}:/nodus/attempt.sock:rw",
        f"{tmp_path / 'models' / 'tiny'}:/nodus/model:ro",
    ]
    assert pairs(argv, "--env") == [
        "HF_HUB_OFFLINE=1",
        "NODUS_ATTEMPT=2",
        "NODUS_ATTEMPT_API=/nodus/attempt.sock",
        "NODUS_INPUT_MODEL=/nodus/model",
        "NODUS_INPUT_PARAMS=/nodus/input",
        "NODUS_JOB_NAME=boxed",
        "NODUS_OUTPUT_DIR=/nodus/outputs",
        "NODUS_STATE_DIR=/nodus/state",
    ]
    assert not any("HOST_TOKEN" in part for part in argv)
    # The command replaces the image's entrypoint; its arguments follow the image.
    assert argv[-6:] == ["--entrypoint", "python3", "localhost/trainer@sha256:" + "a" * 64, "-m", "trainer", "--fast"]


def test_one_container_name_per_job_folder(tmp_path: Path) -> None:
    first = trainer_container.container_name(JobFiles.of(tmp_path / "a", "default", "run"))
    second = trainer_container.container_name(JobFiles.of(tmp_path / "b", "default", "run"))
    assert first != second and first.startswith("nodus-trainer-")


def test_without_podman_the_error_says_what_to_install(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(trainer_container.host_programs, "which", lambda name: None)
    job = JobSpec(name="boxed", project="default", command=("run",), image="localhost/trainer:1")
    with pytest.raises(PrerequisiteError, match="podman is not installed"):
        trainer_container.run_argv(job, JobFiles.of(tmp_path, "default", "boxed"), {})


def test_the_image_travels_in_the_job_spec() -> None:
    job = JobSpec(name="boxed", project="default", command=("run",), image="localhost/trainer:1")
    assert JobSpec.from_json(job.to_json()) == job
    assert JobSpec.from_json({k: v for k, v in job.to_json().items() if k != "image"}).image is None
