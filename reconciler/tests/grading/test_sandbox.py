"""The sandbox command lines (pure): every isolation flag, in each mode and variant."""

from __future__ import annotations

import itertools
import subprocess
from pathlib import Path

import pytest

from nodus.reconciler.grading.sandbox import (
    BOOTSTRAP,
    ContainerName,
    Limits,
    ProcessLayout,
    SandboxCommand,
    container_argv,
    process_argv,
)

LIMITS = Limits(cpu_seconds=100, memory_mb=512, file_size_mb=8, max_processes=64, tmp_mb=32)
LAYOUT = ProcessLayout(
    python=Path("/root/.pyenv/versions/3.11.7/bin/python3.11"),
    python_home=Path("/root/.pyenv/versions/3.11.7"),
    env_source=Path("/src/env-base/src"),
    site_dirs=(Path("/venv/lib/python3.11/site-packages"),),
    environment_dirs=(Path("/stage/environments/tiny-1/0"), Path("/stage/environments/tiny-1/1")),
    view_mount=Path("/stage/view"),
    python_needs_library_path=True,
    hidden=(Path("/srv/envs/tiny"),),
)


def _container(**overrides: object) -> list[str]:
    arguments: dict[str, object] = {
        "runtime": "podman",
        "runtime_path": "/usr/bin/podman",
        "image": "localhost/env@sha256:abc",
        "command": ["nodus-env", "grade", "--timeout", "30"],
        "name": "nodus-grader-1",
        "limits": LIMITS,
        "variables": {"NODUS_GRADER_UID": "10001", "NODUS_RUNNER_UID": "20003"},
        "grader_uid": 10001,
        "privileged_spawner": True,
    }
    arguments.update(overrides)
    return container_argv(**arguments)  # type: ignore[arg-type]


def _process(**overrides: object) -> list[str]:
    arguments: dict[str, object] = {
        "layout": LAYOUT,
        "command": ["grade", "--timeout", "30"],
        "limits": LIMITS,
        "variables": {"NODUS_RUNNER_UID": "20001", "NODUS_ENVIRONMENT": "tiny"},
        "grader_uid": 10001,
        "privileged_spawner": True,
        "namespaces": "root",
    }
    arguments.update(overrides)
    return process_argv(**arguments)  # type: ignore[arg-type]


def test_podman_argv_has_every_isolation_flag_and_the_podman_globals() -> None:
    argv = _container()
    assert argv[:7] == ["/usr/bin/podman", "--runtime", "runc", "--cgroup-manager", "cgroupfs", "run", "--rm"]
    for flag in ["-i", "--pull=never", "--network=none", "--read-only", "--cap-drop=ALL", "--log-driver=none"]:
        assert flag in argv
    pairs = list(itertools.pairwise(argv))
    assert ("--ulimit", "nofile=1024:1024") in pairs and ("--ulimit", "nproc=1000:1000") in pairs
    assert ("--ulimit", "cpu=100:105") in pairs and ("--ulimit", f"fsize={8 << 20}:{8 << 20}") in pairs
    assert ("--security-opt", "no-new-privileges") in pairs and ("--name", "nodus-grader-1") in pairs
    assert "--memory=512m" in argv and "--memory-swap=512m" in argv and "--pids-limit=64" in argv
    assert ("--user", "0:0") in pairs
    assert [a for a in argv if a.startswith("--cap-add")] == ["--cap-add=SETUID", "--cap-add=SETGID", "--cap-add=KILL"]
    assert ("--env", "NODUS_GRADER_UID=10001") in pairs and ("--env", "NODUS_RUNNER_UID=20003") in pairs
    assert argv[-5:] == ["localhost/env@sha256:abc", "nodus-env", "grade", "--timeout", "30"]


def test_docker_argv_is_the_same_without_the_podman_globals() -> None:
    podman, docker = _container(), _container(runtime="docker", runtime_path="/usr/bin/docker")
    assert docker[:3] == ["/usr/bin/docker", "run", "--rm"]
    assert docker[1:] == [a for a in podman[1:] if a not in ("--runtime", "runc", "--cgroup-manager", "cgroupfs")]


def test_container_without_privileged_spawner_runs_as_the_grader_uid_and_group_with_no_capability() -> None:
    argv = _container(privileged_spawner=False)
    assert ("--user", "10001:10001") in itertools.pairwise(argv)
    assert not [a for a in argv if a.startswith("--cap-add")]
    assert "--cap-drop=ALL" in argv


def test_container_name_removes_by_force_with_the_same_globals() -> None:
    name = ContainerName("/usr/bin/podman", ("--runtime", "runc"), "nodus-grader-1")
    assert name.remove_argv() == [
        "/usr/bin/podman",
        "--runtime",
        "runc",
        "rm",
        "--force",
        "--time",
        "0",
        "nodus-grader-1",
    ]


def test_process_argv_as_root_unshares_builds_the_view_and_keeps_only_three_capabilities() -> None:
    argv = _process()
    assert argv[:10] == [
        "unshare",
        "--net",
        "--pid",
        "--mount",
        "--fork",
        "--kill-child",
        "--mount-proc",
        "--",
        "/bin/sh",
        "-c",
    ]
    script = argv[10]
    assert "mount -t tmpfs -o nosuid,nodev,size=32m,mode=1777 nodus /stage/view" in script
    for source, target in [
        ("/root/.pyenv/versions/3.11.7", "python"),
        ("/src/env-base/src", "env-src"),
        ("/venv/lib/python3.11/site-packages", "site/0"),
        ("/stage/environments/tiny-1/0", "environment/0"),
        ("/stage/environments/tiny-1/1", "environment/1"),
    ]:
        assert f"mount --bind -o ro {source} /stage/view/nodus/{target}" in script
    assert "mount --move /stage/view /tmp" in script
    assert "if [ -d /srv/envs/tiny ]; then mount -t tmpfs -o ro,size=4k,mode=0755 nodus /srv/envs/tiny; fi" in script
    assert "--bounding-set=-all,+setuid,+setgid,+kill" in script and "--no-new-privs" in script
    assert "--reuid" not in script
    assert "prlimit --cpu=100:105 --as=536870912 --fsize=8388608 --nproc=64 --core=0" in script
    assert "NODUS_GRADER_UID=10001" in script and "NODUS_RUNNER_UID=20001" in script
    assert "NODUS_ENVIRONMENT_PATH=/tmp/nodus/environment/0:/tmp/nodus/environment/1" in script
    assert "LD_LIBRARY_PATH=/tmp/nodus/python/lib" in script
    assert "/tmp/nodus/python/bin/python3.11 -S -P -B -c" in script
    assert script.rstrip().endswith("<&3 3<&- &\nwait $!")


def test_process_view_script_is_valid_sh() -> None:
    result = subprocess.run(["sh", "-n", "-c", _process()[10]], capture_output=True, text=True, check=False)
    assert result.returncode == 0, result.stderr


def test_process_argv_without_privileged_spawner_drops_to_the_grader_uid_itself() -> None:
    script = _process(privileged_spawner=False)[10]
    assert "--reuid=10001 --regid=10001 --bounding-set=-all" in script
    assert "NODUS_GRADER_UID" not in script


def test_process_argv_for_a_user_without_root_uses_a_user_namespace_and_keeps_its_uid() -> None:
    argv = _process(namespaces="user")
    assert argv[:3] == ["unshare", "--user", "--map-current-user"] and "--net" in argv
    assert "setpriv" not in argv[-1] and "NODUS_GRADER_UID" not in argv[-1]


def test_process_argv_without_namespaces_is_a_plain_limited_process_on_host_paths() -> None:
    argv = _process(namespaces="none", variables={"NODUS_GRADER_UID": "10001"})
    assert argv[0] == "prlimit" and "unshare" not in argv and "setpriv" not in argv
    assert "NODUS_ENVIRONMENT_PATH=/stage/environments/tiny-1/0:/stage/environments/tiny-1/1" in argv
    assert "NODUS_GRADER_UID=10001" not in argv
    python = argv.index("/root/.pyenv/versions/3.11.7/bin/python3.11")
    assert argv[python + 1 : python + 9] == [
        "-S",
        "-P",
        "-B",
        "-c",
        BOOTSTRAP,
        "/src/env-base/src",
        "/venv/lib/python3.11/site-packages",
        "grade",
    ]


def test_library_path_is_set_only_for_interpreters_that_need_it() -> None:
    layout = ProcessLayout(
        python=Path("/usr/bin/python3.11"),
        python_home=Path("/usr"),
        env_source=None,
        site_dirs=(),
        environment_dirs=(Path("/stage/e/0"),),
        view_mount=Path("/stage/view"),
    )
    script = _process(layout=layout)[10]
    assert "LD_LIBRARY_PATH" not in script and "/tmp/nodus/python/bin/python3.11" in script
    assert "env-src" not in script


@pytest.mark.parametrize(
    ("command", "image"),
    [
        (SandboxCommand(("podman",), "container", "container", True, "img:1", "sha256:ff"), "sha256:ff"),
        (SandboxCommand(("unshare",), "process", "namespaces", True, environment_digest="sha256:ee"), None),
    ],
)
def test_sandbox_evidence_names_mode_isolation_image_and_argv(command: SandboxCommand, image: str | None) -> None:
    evidence = command.evidence()
    assert evidence["mode"] == command.mode and evidence["isolation"] == command.isolation
    assert evidence["image"] == image and evidence["argv"] == list(command.argv)
    assert evidence["networkIsolated"] is True
    assert evidence.get("environmentDigest") == command.environment_digest
