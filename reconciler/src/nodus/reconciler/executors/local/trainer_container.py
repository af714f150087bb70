"""Running a job's command in its image: the `podman run` the supervisor starts instead of the bare command.

Who calls it: `nodus.reconciler.executors.local.supervisor.Supervisor` when the job spec has an `image` (a Job's
`spec.image`, a TrainingRuntime's `image`). Without one the command runs on this host, as before.

What the container gets, and why:
- the contract at fixed paths (`/nodus/...`): `NODUS_INPUT_PARAMS` read-only, `NODUS_STATE_DIR` and
  `NODUS_OUTPUT_DIR` writable, the attempt API socket, and the model folder (`NODUS_INPUT_MODEL`) read-only;
  the host's paths never reach the trainer;
- no network at all (`--network=none`): tasks, gradings and events go through the Unix socket, and the model is
  mounted (`HF_HUB_OFFLINE`), so a trainer has nothing to reach; the answers stay with the graders;
- only the job's `env` and the contract, not the supervisor's environment (which may hold this host's tokens);
- the command as the entrypoint (Kubernetes' `command`: the image's own ENTRYPOINT and CMD are replaced);
- user 0 with no capabilities and `no-new-privileges`: it owns the mounted state and output folders as the
  supervisor does (rootless podman maps it to the host user), whatever user the image names;
- `--init` (PID 1 forwards SIGTERM: a Python trainer as PID 1 would ignore it), and a fixed name per job
  folder, so a stop is `podman stop` (SIGTERM, SIGKILL after the grace) and a container a lost supervisor left
  behind is removed before the next attempt starts;
- podman's global flags and explicit ulimits measured to work on this kind of machine (FACTS.md), as the
  graders' containers use them (`nodus.reconciler.grading.sandbox.runtime_global_flags`).
GPUs are not passed through: the local executor runs CPU jobs (a GPU host would add CDI devices here).
"""

from __future__ import annotations

import hashlib
import resource
import subprocess
from collections.abc import Mapping
from pathlib import Path

from nodus.builder import host_programs
from nodus.errors import PrerequisiteError
from nodus.reconciler.grading.sandbox import runtime_global_flags

from .job import JobFiles, JobSpec

ROOT = "/nodus"
INPUT = f"{ROOT}/input"
STATE = f"{ROOT}/state"
OUTPUTS = f"{ROOT}/outputs"
SOCKET = f"{ROOT}/attempt.sock"
MODEL = f"{ROOT}/model"
MOUNTED = {"NODUS_INPUT_MODEL": MODEL, "NODUS_INPUT_TEACHER": f"{ROOT}/teacher", "NODUS_INPUT_DATA": f"{ROOT}/data"}
"""Input folders a controller hands over as host paths in the job's env: mounted read-only at these paths."""
FILE_LIMIT = 65536
PROCESS_LIMIT = 4096


def container_name(files: JobFiles) -> str:
    """One name per job folder (two projects may both have default/quickstart): `nodus-trainer-<hash>`."""
    return "nodus-trainer-" + hashlib.sha256(str(files.dir.resolve()).encode()).hexdigest()[:16]


def podman() -> str:
    found = host_programs.which("podman")
    if found is None:
        raise PrerequisiteError(
            "the job has an image but podman is not installed", hint="apt-get install podman (or drop the image)"
        )
    return found


def run_argv(spec: JobSpec, files: JobFiles, contract: Mapping[str, str]) -> list[str]:
    """`podman run` of the job's command in its image, with the contract (`contract`: the NODUS_* variables
    the supervisor sets, host paths) translated to the container's paths."""
    assert spec.image is not None
    tool = podman()
    argv = [tool, *runtime_global_flags("podman"), "run", "--rm", "--init", "--pull=never"]
    argv += ["--name", container_name(files), "--network=none", "--log-driver=none"]
    argv += ["--security-opt", "no-new-privileges", "--cap-drop=ALL", "--user", "0:0"]
    # Explicit ulimits: the defaults podman copies from the host fail with EPERM on this kind of machine.
    argv += ["--ulimit", f"nofile={_limit(resource.RLIMIT_NOFILE, FILE_LIMIT)}"]
    argv += ["--ulimit", f"nproc={_limit(resource.RLIMIT_NPROC, PROCESS_LIMIT)}"]
    mounts = [(files.input, INPUT, "ro"), (files.state, STATE, "rw"), (files.outputs, OUTPUTS, "rw")]
    mounts.append((files.socket, SOCKET, "rw"))
    variables = dict(spec.env)
    for name, target in MOUNTED.items():
        if variables.get(name):
            mounts.append((Path(variables[name]), target, "ro"))
            variables[name] = target
    for source, target, mode in mounts:
        argv += ["--volume", f"{source}:{target}:{mode}"]
    translated = {
        "NODUS_INPUT_PARAMS": INPUT,
        "NODUS_STATE_DIR": STATE,
        "NODUS_OUTPUT_DIR": OUTPUTS,
        "NODUS_ATTEMPT_API": SOCKET,
    }
    variables.update({name: translated.get(name, value) for name, value in contract.items()})
    for name, value in sorted(variables.items()):
        argv += ["--env", f"{name}={value}"]
    return [*argv, "--entrypoint", spec.command[0], spec.image, *spec.command[1:]]


def stop(files: JobFiles, grace_s: float) -> None:
    """SIGTERM to the container's command, SIGKILL after `grace_s`, then the container removed (if any)."""
    tool = host_programs.which("podman")
    if tool is None:
        return
    name = container_name(files)
    flags = runtime_global_flags("podman")
    seconds = str(max(0, round(grace_s)))
    subprocess.run([tool, *flags, "stop", "--ignore", "--time", seconds, name], capture_output=True, check=False)
    remove(files)


def remove(files: JobFiles) -> None:
    """Remove the job's container if one is left (a supervisor killed while its trainer ran)."""
    tool = host_programs.which("podman")
    if tool is None:
        return
    argv = [tool, *runtime_global_flags("podman"), "rm", "--force", "--ignore", container_name(files)]
    subprocess.run(argv, capture_output=True, check=False)


def _limit(which: int, wanted: int) -> str:
    """`soft:hard` no higher than this process's hard limit (a container cannot be given more)."""
    _, hard = resource.getrlimit(which)
    value = wanted if hard == resource.RLIM_INFINITY else min(wanted, hard)
    return f"{value}:{value}"
