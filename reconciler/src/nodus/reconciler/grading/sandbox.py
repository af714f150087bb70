"""The command lines that start a grader in a sandbox: pure functions, no side effects.

Who uses it: `nodus.reconciler.grading.launcher` (which detects tools and stages files, then calls these)
and the tests, which check every flag. Two modes:

- container (podman or docker): no network, read-only root, no capabilities but the three the grader's
  privilege drop needs, limits through the runtime. The podman global flags and the two ulimits are the
  only ones that work without a Docker engine on hybrid cgroups (FACTS.md).
- process (no container runtime): `unshare` gives the grader its own network, PID and mount namespaces
  (as root), or a user namespace (otherwise). Inside, a small `sh` script builds a private view: a tmpfs
  over /tmp holding read-only bind mounts of the interpreter, `nodus.env`, site folders and the staged
  environment at fixed paths under /tmp/nodus, so nothing depends on where those live on the host (under
  /root, which uid 10001 cannot enter, or under the host's /tmp, which the view hides). The environment's
  original folders are covered by an empty tmpfs, so only the 0700 staged copy can be read. The script
  stays PID 1 of the namespace, so orphans of completion code are reaped, and it waits for the grader.
  Building the view costs about 10 ms per start (13 ms against 3 ms for a bare `unshare`, measured here);
  copying the interpreter instead would cost 317 MB to 1 GB and 3-10 s for this host's pyenv build.
  The rest of the host's file system stays visible to the grader uid as far as its permissions allow (the
  grader is the Environment's own code); completion code never is: in both modes the grader's spawner runs it
  in the runner's private view (`nodus.env.runner_view`: a root of its own holding only the interpreter and
  its standard library, an empty /tmp, no /proc, its own PID and network namespaces).
"""

from __future__ import annotations

import shlex
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

Isolation = Literal["container", "namespaces", "same-uid"]
Namespaces = Literal["root", "user", "none"]

VIEW_IN_TMP = "nodus"
VIEW = f"/tmp/{VIEW_IN_TMP}"
"""Where the private view puts everything inside a process sandbox (the view becomes the sandbox's /tmp)."""

CONTAINER_TMP = "/tmp"
SAFE_PATH = "/usr/local/bin:/usr/bin:/bin"
GRADER_CAPABILITIES = ("SETUID", "SETGID", "KILL")
CPU_HARD_EXTRA_S = 5
"""RLIMIT_CPU: SIGXCPU at the soft limit, SIGKILL this much later if the grader ignores it."""

# Runs `nodus.env.cli` like `python -m` would, with exactly the given site folders (the interpreter runs with
# -S -P: no site-packages of its own, nothing from the working folder), `nodus.env` first on the path.
BOOTSTRAP = """\
import runpy, site, sys
source, sites = sys.argv[1], sys.argv[2]
for folder in sites.split(':') if sites else []:
    site.addsitedir(folder)
if source:
    sys.path.insert(0, source)
del sys.argv[1:3]
runpy.run_module('nodus.env.cli', run_name='__main__', alter_sys=True)
"""


@dataclass(frozen=True)
class Limits:
    """Resource limits of one grader process (sizes in MiB)."""

    cpu_seconds: int
    memory_mb: int
    file_size_mb: int
    max_processes: int
    tmp_mb: int


@dataclass(frozen=True)
class ContainerName:
    """How to remove a container by force: killing the runtime's client does not stop the container."""

    runtime_path: str
    global_flags: tuple[str, ...]
    name: str

    def remove_argv(self) -> list[str]:
        return [self.runtime_path, *self.global_flags, "rm", "--force", "--time", "0", self.name]


@dataclass(frozen=True)
class SandboxCommand:
    """A grader command ready to start, with what the host records about it in every verdict's evidence."""

    argv: tuple[str, ...]
    mode: Literal["container", "process"]
    isolation: Isolation
    network_isolated: bool
    image: str | None = None
    image_digest: str | None = None
    environment_digest: str | None = None
    container: ContainerName | None = None

    def evidence(self) -> dict[str, Any]:
        out: dict[str, Any] = {
            "mode": self.mode,
            "isolation": self.isolation,
            "networkIsolated": self.network_isolated,
            "image": self.image_digest or self.image,
            "argv": list(self.argv),
        }
        if self.image is not None:
            out["imageRef"] = self.image
        if self.environment_digest is not None:
            out["environmentDigest"] = self.environment_digest
        return out


# --- container mode ------------------------------------------------------------------------------------


def runtime_global_flags(runtime: str) -> tuple[str, ...]:
    """podman needs runc (crun fails on hybrid cgroups) and cgroupfs (no systemd); docker takes neither."""
    return ("--runtime", "runc", "--cgroup-manager", "cgroupfs") if runtime == "podman" else ()


def container_argv(
    *,
    runtime: str,
    runtime_path: str,
    image: str,
    command: Sequence[str],
    name: str,
    limits: Limits,
    variables: Mapping[str, str],
    grader_uid: int,
    privileged_spawner: bool,
) -> list[str]:
    """`podman|docker run` for one grader: `command` (e.g. `nodus-env grade`) runs in `image`."""
    argv = [runtime_path, *runtime_global_flags(runtime), "run", "--rm", "-i", "--pull=never", "--name", name]
    argv += ["--network=none", "--read-only", "--log-driver=none"]
    argv += ["--tmpfs", f"{CONTAINER_TMP}:rw,nosuid,nodev,size={limits.tmp_mb}m,mode=1777"]
    # nofile and nproc must be given: the defaults podman copies from the host fail with EPERM here.
    argv += ["--ulimit", "nofile=1024:1024", "--ulimit", "nproc=1000:1000"]
    argv += ["--ulimit", f"cpu={limits.cpu_seconds}:{limits.cpu_seconds + CPU_HARD_EXTRA_S}"]
    argv += ["--ulimit", f"fsize={_mib(limits.file_size_mb)}:{_mib(limits.file_size_mb)}"]
    argv += [f"--memory={limits.memory_mb}m", f"--memory-swap={limits.memory_mb}m"]
    argv += [f"--pids-limit={limits.max_processes}"]
    argv += ["--security-opt", "no-new-privileges", "--cap-drop=ALL"]
    if privileged_spawner:
        argv += [f"--cap-add={cap}" for cap in GRADER_CAPABILITIES]
        argv += ["--user", "0:0"]
    else:
        # `--user UID` alone gives gid 0; name both.
        argv += ["--user", f"{grader_uid}:{grader_uid}"]
    for key, value in sorted(variables.items()):
        argv += ["--env", f"{key}={value}"]
    return [*argv, image, *command]


# --- process mode ----------------------------------------------------------------------------------------


@dataclass(frozen=True)
class ProcessLayout:
    """Host folders a process-mode grader needs; each is bind-mounted read-only under `VIEW`.

    `view_mount` is an empty host folder used as the mount point of the tmpfs while the view is built
    (inside the mount namespace only), before the view is moved over /tmp.
    """

    python: Path
    python_home: Path
    env_source: Path | None
    site_dirs: tuple[Path, ...]
    environment_dirs: tuple[Path, ...]
    view_mount: Path
    python_needs_library_path: bool = False
    """The interpreter links a libpython from `<home>/lib` by an absolute RUNPATH (pyenv's shared builds)."""
    hidden: tuple[Path, ...] = ()
    """Host folders covered by an empty read-only tmpfs inside the sandbox: the environment's original
    folders, which may be world-readable on the host while their staged copy is not."""

    def view_python(self) -> str:
        return f"{VIEW}/python/{self.python.relative_to(self.python_home)}"

    def binds(self) -> list[tuple[Path, str]]:
        """(host folder, its path relative to /tmp inside the sandbox), in mount order."""
        out: list[tuple[Path, str]] = [(self.python_home, f"{VIEW_IN_TMP}/python")]
        if self.env_source is not None:
            out.append((self.env_source, f"{VIEW_IN_TMP}/env-src"))
        out += [(folder, f"{VIEW_IN_TMP}/site/{i}") for i, folder in enumerate(self.site_dirs)]
        out += [(folder, f"{VIEW_IN_TMP}/environment/{i}") for i, folder in enumerate(self.environment_dirs)]
        return out


def process_argv(
    *,
    layout: ProcessLayout,
    command: Sequence[str],
    limits: Limits,
    variables: Mapping[str, str],
    grader_uid: int,
    privileged_spawner: bool,
    namespaces: Namespaces,
) -> list[str]:
    """The grader command for process mode.

    `namespaces`: "root" (we are root: net+pid+mount namespaces, private view, dropped uid), "user"
    (not root but user namespaces work: net+pid namespaces inside a user namespace that maps only our own
    uid, so the grader keeps our uid and reads host paths; mount(8) refuses to build a view for a
    non-root uid) or "none" (neither: a plain process with rlimits on the host network).
    `variables` are the NODUS_* variables; the environment path is set here from the layout.
    """
    in_view = namespaces == "root"
    environment_dirs = (
        [f"{VIEW}/environment/{i}" for i in range(len(layout.environment_dirs))]
        if in_view
        else [str(p) for p in layout.environment_dirs]
    )
    env = {
        "PATH": SAFE_PATH,
        "LANG": "C.UTF-8",
        "HOME": "/tmp",
        "TMPDIR": "/tmp",
        **variables,
        "NODUS_ENVIRONMENT_PATH": ":".join(environment_dirs),
    }
    if namespaces == "root" and privileged_spawner:
        env["NODUS_GRADER_UID"] = str(grader_uid)
    else:
        env.pop("NODUS_GRADER_UID", None)  # nothing to drop: the grader already runs as its final uid
    if in_view:
        python = layout.view_python()
        source = f"{VIEW}/env-src" if layout.env_source is not None else ""
        sites = ":".join(f"{VIEW}/site/{i}" for i in range(len(layout.site_dirs)))
        library = f"{VIEW}/python/lib"
    else:
        python = str(layout.python)
        source = str(layout.env_source) if layout.env_source is not None else ""
        sites = ":".join(str(p) for p in layout.site_dirs)
        library = str(layout.python_home / "lib")
    if layout.python_needs_library_path:
        env["LD_LIBRARY_PATH"] = library
    grader = [
        *_prlimit(limits),
        *_privileges(namespaces, privileged_spawner, grader_uid),
        "env",
        "-i",
        *(f"{key}={value}" for key, value in sorted(env.items())),
        python,
        "-S",
        "-P",
        "-B",
        "-c",
        BOOTSTRAP,
        source,
        sites,
        *command,
    ]
    if namespaces == "none":
        return grader
    unshare = ["unshare", "--user", "--map-current-user"] if namespaces == "user" else ["unshare"]
    unshare += ["--net", "--pid", "--mount", "--fork", "--kill-child", "--mount-proc", "--", "/bin/sh", "-c"]
    script = view_script(layout, limits) if in_view else []
    return [*unshare, "\n".join([*script, *_as_pid_one(grader)])]


def view_script(layout: ProcessLayout, limits: Limits) -> list[str]:
    """`sh` lines that build the private view: a tmpfs over /tmp with read-only binds under /tmp/nodus."""
    view = shlex.quote(str(layout.view_mount))
    tmpfs = f"mount -t tmpfs -o nosuid,nodev,size={limits.tmp_mb}m,mode=1777 nodus"
    lines = ["set -e", f"{tmpfs} {view}"]
    binds = layout.binds()
    inside = [f"{view}/{shlex.quote(relative)}" for _, relative in binds]
    lines.append("mkdir -p " + " ".join(inside))
    for (source, _), target in zip(binds, inside, strict=True):
        lines.append(f"mount --bind -o ro {shlex.quote(str(source))} {target}")
    lines.append(f"mount --move {view} /tmp")
    for folder in layout.hidden:  # one under the host's /tmp is already out of sight
        quoted = shlex.quote(str(folder))
        lines.append(f"if [ -d {quoted} ]; then mount -t tmpfs -o ro,size=4k,mode=0755 nodus {quoted}; fi")
    # The other world-writable places of the host get private, empty copies as well.
    lines.append(f"for d in /var/tmp /dev/shm; do if [ -d $d ]; then {tmpfs} $d; fi; done")
    lines.append("cd /tmp")
    return lines


def _as_pid_one(grader: Sequence[str]) -> list[str]:
    """`sh` stays PID 1 of the namespace (it reaps orphans, which a Python grader as PID 1 would not) and
    exits with the grader's status. A background job's stdin is /dev/null unless redirected from another
    descriptor, so ours waits on fd 3."""
    return ["exec 3<&0", shlex.join(grader) + " <&3 3<&- &", "wait $!"]


def _prlimit(limits: Limits) -> list[str]:
    cpu = f"{limits.cpu_seconds}:{limits.cpu_seconds + CPU_HARD_EXTRA_S}"
    return [
        "prlimit",
        f"--cpu={cpu}",
        f"--as={_mib(limits.memory_mb)}",
        f"--fsize={_mib(limits.file_size_mb)}",
        f"--nproc={limits.max_processes}",
        "--core=0",
        "--nofile=1024",
        "--",
    ]


def _privileges(namespaces: Namespaces, privileged_spawner: bool, grader_uid: int) -> list[str]:
    if namespaces != "root":
        return []  # the grader keeps our uid (isolation "same-uid")
    base = ["setpriv", "--clear-groups", "--inh-caps=-all", "--no-new-privs"]
    if privileged_spawner:
        # Still uid 0, but after exec only these capabilities remain: no DAC override, so the staged
        # environment (uid 10001, mode 0700) stays unreadable until nodus-env drops to the grader uid.
        caps = ",".join(f"+{cap.lower()}" for cap in GRADER_CAPABILITIES)
        return [*base, f"--bounding-set=-all,{caps}", "--"]
    return [*base, f"--reuid={grader_uid}", f"--regid={grader_uid}", "--bounding-set=-all", "--"]


def _mib(value: int) -> int:
    return value * 1024 * 1024
