"""Settings of the grading service: sandbox mode, parallelism, timeouts, limits and the sandbox's variables.

Who uses it: whoever builds a `GradingService` (the job supervisor, from a TrainingJob's `grading`
section and the host's configuration; tests with small limits). Every field has a default that works
on a single machine; `ProcessSettings` describes the host Python that process-mode graders run on.
"""

from __future__ import annotations

import importlib.util
import os
import site
import sys
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Literal

from nodus.errors import ConfigError

Mode = Literal["auto", "container", "process"]
Runtime = Literal["podman", "docker"]


def _interpreter() -> Path:
    # The venv's `bin/python` is a symlink to the base interpreter, whose prefix holds the standard library.
    return Path(os.path.realpath(sys.executable))


def _site_dirs() -> tuple[Path, ...]:
    # Exactly the current interpreter's site folders: a venv's own, not its base's (graders run with -S).
    return tuple(Path(p) for p in site.getsitepackages() if Path(p).is_dir())


def _env_source() -> Path | None:
    """The folder holding `nodus/env` (found without importing it: the reconciler never imports nodus.env)."""
    spec = importlib.util.find_spec("nodus.env")
    if spec is None or not spec.submodule_search_locations:
        return None
    return Path(next(iter(spec.submodule_search_locations))).parent.parent


@dataclass(frozen=True)
class ProcessSettings:
    """The host Python a process-mode grader runs on, and where `nodus.env` comes from.

    `python` is a real interpreter binary in `<home>/bin/`; its home (standard library included) is
    bind-mounted read-only into the sandbox, as are `site_dirs` (processed like site-packages, .pth files
    included) and `env_source` (the folder holding `nodus/env`, put first on `sys.path`).
    """

    python: Path = field(default_factory=_interpreter)
    site_dirs: tuple[Path, ...] = field(default_factory=_site_dirs)
    env_source: Path | None = field(default_factory=_env_source)

    @property
    def python_home(self) -> Path:
        return self.python.parent.parent


@dataclass(frozen=True)
class GradingSettings:
    """How graders run. Time in seconds, sizes in MiB; limits apply to each grader process."""

    mode: Mode = "auto"
    """auto: container when a runtime is installed and the environment has an image, else process."""
    runtime: Runtime | None = None
    """Container runtime; None picks podman, then docker."""
    max_parallel: int = 4
    """Graders per (environment, job) at most."""
    task_timeout_s: float = 30.0
    """Per line, from when the grader could start it; passed to `nodus-env grade --timeout` too."""
    kill_grace_s: float = 5.0
    """Extra wait past `task_timeout_s` before the host kills a grader (it reports its own timeouts first)."""
    start_timeout_s: float = 150.0
    """Extra time for the first line after a grader (re)starts: it loads the environment first. Ecosystem images
    are slow to load: a verifiers or openenv-core image's first reply took 79 s, then more than 95 s, on a
    2-core host busy with a training run (its read-only image holds no byte-compiled files, so every start
    compiles verifiers, datasets and their dependencies), where 60 s failed those first lines."""
    window: int = 256
    """Lines written ahead to one grader at most; a grader that dies fails the lines it had not answered, so
    at most this many. A fresh (or restarted) grader gets 4, then one more per line it answers, up to about
    20 ms of its work: a grader that cannot start fails few lines, and a slow one does not hoard lines. With
    a trivial reward, two graders on two cores grade about 36,000 lines/s with 256 and 23,000 with 4
    (process mode, measured here)."""
    crash_loop_limit: int = 3
    """Restarts in a row without one answered line before the rest of a batch fails without more restarts."""
    idle_timeout_s: float = 300.0
    """Graders unused this long are stopped."""
    tasks_timeout_s: float = 600.0
    """Limit for one `nodus-env tasks` run."""
    memory_mb: int = 2048
    cpu_seconds: int = 3600
    """CPU time of one grader process over its whole life (RLIMIT_CPU); a grader that uses it up dies and is
    restarted. The per-line bound is `task_timeout_s`."""
    file_size_mb: int = 64
    max_processes: int = 256
    tmp_mb: int = 256
    """Size of the grader's private /tmp (and /var/tmp, /dev/shm in process mode)."""
    grader_uid: int = 10001
    runner_uid_base: int = 20000
    """Each live grader gets its own runner uid from `runner_uid_base` on (RLIMIT_NPROC counts per uid)."""
    runner_uid_count: int = 10000
    privileged_spawner: bool = True
    """Start graders as root with only SETUID, SETGID and KILL; `nodus-env` drops to `grader_uid` itself and keeps
    a spawner that runs completion code as the runner uid. False: start directly as `grader_uid` (third-party
    images whose grader does not drop privileges)."""
    variables: Mapping[str, str] = field(default_factory=dict)
    """Extra NODUS_* variables for the sandbox (NODUS_GRADING_TIMEOUT, NODUS_RUNNER_PYTHON, ...)."""
    container_command: tuple[str, ...] = ("nodus-env",)
    """The grader CLI inside images."""
    stage_dir: Path | None = None
    """Where process mode stages environment files for the grader uid; None: ~/.cache/nodus/grading."""
    max_line_bytes: int = 16 * 1024 * 1024
    process: ProcessSettings = field(default_factory=ProcessSettings)

    def __post_init__(self) -> None:
        positive = {
            "max_parallel": self.max_parallel,
            "window": self.window,
            "crash_loop_limit": self.crash_loop_limit,
            "memory_mb": self.memory_mb,
            "cpu_seconds": self.cpu_seconds,
            "file_size_mb": self.file_size_mb,
            "max_processes": self.max_processes,
            "tmp_mb": self.tmp_mb,
            "runner_uid_count": self.runner_uid_count,
        }
        for name, value in positive.items():
            if value < 1:
                raise ConfigError(f"grading setting {name} must be at least 1, got {value}")
        if self.task_timeout_s <= 0 or self.start_timeout_s < 0 or self.kill_grace_s < 0:
            raise ConfigError("grading timeouts must be positive")
        if self.grader_uid in range(self.runner_uid_base, self.runner_uid_base + self.runner_uid_count):
            raise ConfigError(f"grader uid {self.grader_uid} lies in the runner uid range")
        for key in self.variables:
            if not key.startswith("NODUS_"):
                raise ConfigError(f"sandbox variable {key}: only NODUS_* variables go into the sandbox")

    def resolved_stage_dir(self) -> Path:
        if self.stage_dir is not None:
            return self.stage_dir
        cache = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
        return Path(cache) / "nodus" / "grading"
