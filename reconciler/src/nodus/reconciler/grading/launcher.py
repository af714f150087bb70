"""Decides how graders run on this host and builds their commands: the effectful half of `sandbox.py`.

Who uses it: `GradingService` asks it for the command of each grader (and of `nodus-env tasks`). It finds
the container runtime, chooses the mode, resolves image digests once, probes whether user namespaces
work when we are not root, and stages environment files for process mode; `sandbox.py` turns what it
found into argv.
"""

from __future__ import annotations

import os
import subprocess
import threading
import uuid
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Literal

from nodus.builder import host_programs
from nodus.errors import ConfigError, PermanentError, PrerequisiteError

from .models import EnvironmentRef
from .sandbox import (
    ContainerName,
    Limits,
    Namespaces,
    ProcessLayout,
    SandboxCommand,
    container_argv,
    process_argv,
    runtime_global_flags,
)
from .settings import GradingSettings
from .staging import Stager

SandboxMode = Literal["container", "process"]
INSPECT_TIMEOUT_S = 30.0
PROBE_TIMEOUT_S = 10.0


class Launcher:
    """Turns an environment and the settings into sandbox commands for this host."""

    def __init__(
        self,
        settings: GradingSettings,
        *,
        which: Callable[[str], str | None] = host_programs.which,
        is_root: bool | None = None,
    ) -> None:
        self.settings = settings
        self._which = which
        self.is_root = os.geteuid() == 0 if is_root is None else is_root
        self.stager = Stager(settings.resolved_stage_dir(), settings.grader_uid if self.is_root else None)
        self._digests: dict[str, str] = {}
        self._namespaces: Namespaces | None = None
        self._lock = threading.Lock()

    # --- choices -----------------------------------------------------------------------------------

    def runtime(self) -> tuple[str, str] | None:
        """(name, path) of the container runtime to use, or None when there is none."""
        names = [self.settings.runtime] if self.settings.runtime else ["podman", "docker"]
        for name in names:
            path = self._which(name)
            # A docker client without an engine (as on hosts that only have podman) cannot run anything.
            if path and (name == "podman" or self.settings.runtime == "docker" or _docker_engine_configured()):
                return name, path
        return None

    def mode_for(self, env: EnvironmentRef) -> SandboxMode:
        """container or process for `env`, by the setting or (auto) by what this host and `env` offer."""
        mode = self.settings.mode
        if mode == "container":
            if self.runtime() is None:
                wanted = self.settings.runtime or "podman"
                raise PrerequisiteError(
                    f"grading mode 'container' needs {wanted}, which is not installed",
                    hint=f"install it (Debian: apt-get install {wanted} runc) or use grading mode 'process'",
                )
            if not env.image:
                raise ConfigError(f"environment {env.label} has no image to run in a container")
            return "container"
        if mode == "process":
            if not env.paths:
                raise ConfigError(f"environment {env.label}: process mode needs the folders of its package")
            return "process"
        if env.image and self.runtime() is not None:
            return "container"
        if env.paths:
            return "process"
        raise PrerequisiteError(
            f"environment {env.label} is only an image, and no container runtime is installed",
            hint="install podman (Debian: apt-get install podman runc) to run grader images",
        )

    def namespaces(self) -> Namespaces:
        """root: full namespaces; user: a user namespace works for us; none: neither (plain processes)."""
        if self.is_root:
            return "root"
        with self._lock:
            if self._namespaces is None:
                self._namespaces = "user" if self._user_namespaces_work() else "none"
            return self._namespaces

    # --- commands ----------------------------------------------------------------------------------

    def command_factory(
        self, env: EnvironmentRef, arguments: Sequence[str], *, runner_uid: int | None
    ) -> Callable[[], SandboxCommand]:
        """A function giving the command of one start of `nodus-env ARGUMENTS` for `env`.

        Everything slow (staging, digests, probes) happens here, once; each call of the result only
        names a fresh container, so restarts are cheap and never collide with a container being removed.
        """
        variables = dict(self.settings.variables)
        if runner_uid is not None:
            variables["NODUS_RUNNER_UID"] = str(runner_uid)
        if env.loader:
            variables["NODUS_ENVIRONMENT_LOADER"] = env.loader
        if self.mode_for(env) == "container":
            return self._container_factory(env, arguments, variables)
        return self._process_factory(env, arguments, variables)

    def _container_factory(
        self, env: EnvironmentRef, arguments: Sequence[str], variables: dict[str, str]
    ) -> Callable[[], SandboxCommand]:
        found = self.runtime()
        assert found is not None
        assert env.image is not None
        runtime, path = found
        image = env.image
        digest = env.digest or self.image_digest(runtime, path, image)
        if self.settings.privileged_spawner:
            variables["NODUS_GRADER_UID"] = str(self.settings.grader_uid)
        # The image names and versions itself (its task order is keyed by them): only the loader may be overridden.
        command = [*self.settings.container_command, *arguments]
        limits = self.limits()

        def make() -> SandboxCommand:
            name = f"nodus-grader-{uuid.uuid4().hex[:16]}"
            argv = container_argv(
                runtime=runtime,
                runtime_path=path,
                image=image,
                command=command,
                name=name,
                limits=limits,
                variables=variables,
                grader_uid=self.settings.grader_uid,
                privileged_spawner=self.settings.privileged_spawner,
            )
            return SandboxCommand(
                tuple(argv),
                "container",
                "container",
                network_isolated=True,
                image=image,
                image_digest=digest,
                container=ContainerName(path, runtime_global_flags(runtime), name),
            )

        return make

    def _process_factory(
        self, env: EnvironmentRef, arguments: Sequence[str], variables: dict[str, str]
    ) -> Callable[[], SandboxCommand]:
        namespaces = self.namespaces()
        self._require_process_tools(namespaces)
        staged = self.stager.stage(env)
        process = self.settings.process
        if not process.python.is_file():
            raise PrerequisiteError(f"the grader interpreter {process.python} does not exist")
        layout = ProcessLayout(
            python=process.python,
            python_home=process.python_home,
            env_source=process.env_source,
            site_dirs=(*process.site_dirs, *env.site_dirs),
            environment_dirs=staged.dirs,
            view_mount=self.stager.view_mount,
            python_needs_library_path=_links_libpython_from_home(process.python, process.python_home),
            hidden=env.paths,
        )
        variables = {"NODUS_ENVIRONMENT": env.name, "NODUS_ENVIRONMENT_VERSION": env.version, **variables}
        argv = process_argv(
            layout=layout,
            command=arguments,
            limits=self.limits(),
            variables=variables,
            grader_uid=self.settings.grader_uid,
            privileged_spawner=self.settings.privileged_spawner,
            namespaces=namespaces,
        )
        command = SandboxCommand(
            tuple(argv),
            "process",
            "namespaces" if namespaces == "root" else "same-uid",
            network_isolated=namespaces != "none",
            environment_digest=staged.digest,
        )
        return lambda: command

    def limits(self) -> Limits:
        s = self.settings
        return Limits(s.cpu_seconds, s.memory_mb, s.file_size_mb, s.max_processes, s.tmp_mb)

    # --- host facts --------------------------------------------------------------------------------

    def image_digest(self, runtime: str, path: str, image: str) -> str:
        """The image's id (sha256 of its config) from local storage; nothing is pulled."""
        with self._lock:
            if image in self._digests:
                return self._digests[image]
        argv = [path, *runtime_global_flags(runtime), "image", "inspect", "--format", "{{.Id}}", image]
        result = subprocess.run(argv, capture_output=True, text=True, timeout=INSPECT_TIMEOUT_S, check=False)
        if result.returncode != 0:
            raise PermanentError(
                f"grader image {image} is not in {runtime}'s local storage ({result.stderr.strip()[:200]})",
                hint="build it with nodus-build or load it (podman load, skopeo copy); grading never pulls images",
            )
        found = result.stdout.strip()
        digest = found if found.startswith("sha256:") else f"sha256:{found}"
        with self._lock:
            self._digests[image] = digest
        return digest

    def _require_process_tools(self, namespaces: Namespaces) -> None:
        needed = {"root": ["unshare", "prlimit", "setpriv", "mount"], "user": ["unshare", "prlimit", "mount"]}
        missing = [tool for tool in needed.get(namespaces, ["prlimit"]) if self._which(tool) is None]
        if missing:
            raise PrerequisiteError(
                f"process-mode grading needs {', '.join(missing)}",
                hint="install util-linux and mount (Debian: apt-get install util-linux mount)",
            )

    def _user_namespaces_work(self) -> bool:
        if self._which("unshare") is None:
            return False
        probe = ["unshare", "--user", "--map-current-user", "--net", "--pid", "--mount", "--fork", "true"]
        try:
            result = subprocess.run(probe, capture_output=True, timeout=PROBE_TIMEOUT_S, check=False)
        except (OSError, subprocess.TimeoutExpired):
            return False
        return result.returncode == 0


def _docker_engine_configured() -> bool:
    return bool(os.environ.get("DOCKER_HOST")) or Path("/var/run/docker.sock").exists()


def _links_libpython_from_home(python: Path, home: Path) -> bool:
    """True for shared builds (pyenv's): libpython sits in <home>/lib and is found by an absolute RUNPATH,
    which points outside the sandbox's view; LD_LIBRARY_PATH points the loader at the view's copy."""
    return any((home / "lib").glob("libpython3*.so*"))
