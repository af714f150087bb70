"""Running code from a completion: as another uid, in a fresh interpreter, under hard limits.

Who uses it: environments that execute what the model wrote (the catalog's python-functions) call
`run_function`; `nodus.env.privileges` starts the spawner when the grader was launched as root.

Why it is built this way:
- The runner never shares memory with the grader: it is a fresh `python -I` process, so completion code
  cannot walk the grader's objects to find the answers. The expected outputs never reach it either: it
  returns the values it computed and the grader compares them.
- As root, the grader forks a small *spawner* before it loads the environment and then drops to the
  grader uid. The spawner (which holds no answers) starts each runner as `NODUS_RUNNER_UID`, a uid that
  cannot read the environment's files (they belong to the grader uid, mode 0700), and afterwards kills
  every process of that uid, so a fork bomb or a daemonised child does not outlive its task.
- Limits: CPU seconds, address space, file size, open files and processes (RLIMIT_*), a wall-clock
  timeout, a cap on captured output, an empty working folder and an environment with nothing inherited.
- Without root (development, tests) the runner runs as the same uid with the same limits and the result
  says `isolation: same-uid`; as root without a spawner it runs as `NODUS_RUNNER_UID` (default 10002).
"""

from __future__ import annotations

import contextlib
import json
import os
import resource
import secrets
import select
import shutil
import signal
import socket
import struct
import subprocess
import sys
import tempfile
import time
import traceback
from dataclasses import asdict, dataclass, field
from typing import Any

from nodus.env import evidence

# Not `nobody`: the runner uid's processes are all killed after each run, so it must be nodus's own.
DEFAULT_RUNNER_UID = 10002
MAX_PROCESSES = 32
MAX_OPEN_FILES = 64
FILE_SIZE_LIMIT = 8 * 1024 * 1024

# The program each runner executes (`python -I -c RUNNER`): read the request on stdin, run the source, call
# the function once per argument list, write one JSON document on the result pipe. Tiny and self-contained.
RUNNER = r"""
import json, os, sys
request = json.loads(sys.stdin.read())
results = os.fdopen(request["fd"], "w")
namespace = {"__name__": "__completion__", "__builtins__": __builtins__}
values, errors = [], []
try:
    exec(compile(request["source"], "<completion>", "exec"), namespace)
    function = namespace.get(request["function"])
    if not callable(function):
        raise NameError("the completion does not define a function named " + repr(request["function"]))
except BaseException as exc:
    results.write(json.dumps({"status": "error", "values": [], "errors": [type(exc).__name__ + ": " + str(exc)[:500]]}))
    results.flush()
    os._exit(0)
for args in request["calls"]:
    try:
        value = function(*args)
        json.dumps(value)
        values.append(value)
        errors.append(None)
    except BaseException as exc:
        values.append(None)
        errors.append(type(exc).__name__ + ": " + str(exc)[:500])
results.write(json.dumps({"status": "ok", "values": values, "errors": errors}))
results.flush()
os._exit(0)
"""


@dataclass
class ExecutionResult:
    """What running one completion's code gave; `values[i]` is the result of `calls[i]` (None if it raised)."""

    status: str
    """ok, error (did not load or define the function), timeout, killed (a limit), invalid (bad result)."""
    values: list[Any] = field(default_factory=list)
    errors: list[str | None] = field(default_factory=list)
    stdout: str = ""
    stderr: str = ""
    duration_s: float = 0.0
    exit_code: int | None = None
    isolation: str = "same-uid"
    """uid (another uid, via the spawner or as root), same-uid (development)."""


@dataclass(frozen=True)
class Limits:
    timeout_s: float = 5.0
    memory_mb: int = 256
    output_limit: int = 65536


_spawner: socket.socket | None = None
"""The grader's end of the spawner socket, set by `start_spawner` when the grader was started as root."""


def run_function(
    source: str,
    function: str,
    calls: list[list[Any]],
    *,
    timeout_s: float = 5.0,
    memory_mb: int = 256,
    output_limit: int = 65536,
) -> ExecutionResult:
    """Define `function` from `source` in a sandboxed runner and call it once per argument list."""
    request = {"source": source, "function": function, "calls": calls}
    limits = Limits(timeout_s, memory_mb, output_limit)
    if _spawner is not None:
        result = _ask_spawner(_spawner, request, limits)
    else:
        uid = int(os.environ.get("NODUS_RUNNER_UID", DEFAULT_RUNNER_UID)) if os.geteuid() == 0 else None
        result = launch(request, limits, uid)
    # The verdict's evidence says how the code ran: isolation, status, exit code, time.
    evidence.note(
        execution={
            "isolation": result.isolation,
            "status": result.status,
            "exitCode": result.exit_code,
            "durationMs": round(result.duration_s * 1000, 3),
        }
    )
    return result


def launch(request: dict[str, Any], limits: Limits, uid: int | None) -> ExecutionResult:
    """Start one runner (as `uid` when given), feed it the request, collect its result within the limits."""
    # The working folder is made, entered and removed by the runner's own uid: the spawner keeps only the
    # SETUID, SETGID and KILL capabilities, so it can neither chown a folder nor enter one it does not own.
    workdir = os.path.join(tempfile.gettempdir(), f"nodus-run-{secrets.token_hex(8)}")
    result_r, result_w = os.pipe()
    started = time.monotonic()
    python = _runner_python(uid)
    try:
        proc = subprocess.Popen(
            [python, "-I", "-S", "-c", RUNNER],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            env={"PATH": "/usr/bin:/bin", "LANG": "C.UTF-8", "HOME": workdir, "TMPDIR": workdir},
            pass_fds=(result_w,),
            close_fds=True,
            preexec_fn=_child_setup(limits, uid, workdir),
        )
    except (OSError, subprocess.SubprocessError) as exc:
        os.close(result_r)
        os.close(result_w)
        _remove_workdir(workdir, uid)
        return ExecutionResult("killed", errors=[f"could not start the runner: {exc}"], isolation=_isolation(uid))
    os.close(result_w)
    try:
        return _collect(proc, {**request, "fd": result_w}, limits, result_r, started, uid)
    finally:
        _kill_everything(proc, uid)
        os.close(result_r)
        _remove_workdir(workdir, uid)


def _remove_workdir(workdir: str, uid: int | None) -> None:
    """Remove the runner's folder as the uid that owns it (a short-lived child when that is another uid)."""
    if uid is None or uid == os.geteuid():
        shutil.rmtree(workdir, ignore_errors=True)
        return
    child = os.fork()
    if child == 0:
        try:
            os.setresgid(uid, uid, uid)
            os.setresuid(uid, uid, uid)
            shutil.rmtree(workdir, ignore_errors=True)
        finally:
            os._exit(0)
    os.waitpid(child, 0)


def _runner_python(uid: int | None) -> str:
    """The interpreter for runners: NODUS_RUNNER_PYTHON, else one another uid can execute.

    The runner needs only the standard library. Our own interpreter may sit where another uid cannot
    reach it (under /root), so a runner with its own uid prefers the system's python3.
    """
    chosen = os.environ.get("NODUS_RUNNER_PYTHON")
    if chosen:
        return chosen
    if uid is not None:
        for candidate in ("/usr/bin/python3", "/usr/local/bin/python3"):
            if os.access(candidate, os.X_OK):
                return candidate
    return sys.executable


def _isolation(uid: int | None) -> str:
    return "uid" if uid is not None else "same-uid"


def _child_setup(limits: Limits, uid: int | None, workdir: str) -> Any:
    cpu = max(1, int(limits.timeout_s) + 1)
    memory = limits.memory_mb * 1024 * 1024

    def setup() -> None:  # runs in the child between fork and exec
        os.setsid()
        _lower(resource.RLIMIT_CPU, cpu)
        _lower(resource.RLIMIT_AS, memory)
        _lower(resource.RLIMIT_FSIZE, FILE_SIZE_LIMIT)
        _lower(resource.RLIMIT_NOFILE, MAX_OPEN_FILES)
        _lower(resource.RLIMIT_CORE, 0)
        if uid is not None:
            # RLIMIT_NPROC binds only non-root uids, so it is set for the runner uid, never for root.
            _lower(resource.RLIMIT_NPROC, MAX_PROCESSES)
            os.setgroups([])
            os.setresgid(uid, uid, uid)
            os.setresuid(uid, uid, uid)
        elif os.geteuid() != 0:
            _lower(resource.RLIMIT_NPROC, MAX_PROCESSES + _own_processes())
        os.mkdir(workdir, 0o700)
        os.chdir(workdir)

    return setup


def _lower(limit: int, value: int) -> None:
    """Set both limits to `value`, or to the hard limit already in force when that is lower.

    A process that is not root may lower its hard limit but never raise it: in a container started with
    `--ulimit nproc=1000:1000` asking for more (or for unlimited) fails, and with it the runner's start.
    """
    _, hard = resource.getrlimit(limit)
    bound = value if hard == resource.RLIM_INFINITY else min(value, hard)
    resource.setrlimit(limit, (bound, bound))


def _own_processes() -> int:
    """Processes this uid already runs (RLIMIT_NPROC counts them all, so the runner's room comes on top)."""
    uid = os.getuid()
    count = 0
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                if os.stat(f"/proc/{entry}").st_uid == uid:
                    count += 1
            except OSError:
                continue
    return count


def _collect(
    proc: subprocess.Popen[bytes],
    request: dict[str, Any],
    limits: Limits,
    result_r: int,
    started: float,
    uid: int | None,
) -> ExecutionResult:
    assert proc.stdin is not None
    assert proc.stdout is not None
    assert proc.stderr is not None
    try:
        proc.stdin.write(json.dumps(request).encode())
        proc.stdin.close()
    except BrokenPipeError:
        pass
    buffers: dict[int, bytearray] = {
        proc.stdout.fileno(): bytearray(),
        proc.stderr.fileno(): bytearray(),
        result_r: bytearray(),
    }
    open_fds = set(buffers)
    deadline = started + limits.timeout_s
    status: str | None = None
    while open_fds:
        remaining = deadline - time.monotonic()
        if remaining <= 0:
            status = "timeout"
            break
        ready, _, _ = select.select(list(open_fds), [], [], remaining)
        for fd in ready:
            chunk = os.read(fd, 65536)
            if not chunk:
                open_fds.discard(fd)
                continue
            buffers[fd] += chunk
            if (fd != result_r and len(buffers[fd]) > limits.output_limit) or (
                fd == result_r and len(buffers[fd]) > 16 * limits.output_limit
            ):
                status = "killed"
        if status:
            break
    if status:
        _kill_everything(proc, uid)
    exit_code = proc.wait()
    out = buffers[proc.stdout.fileno()][: limits.output_limit].decode(errors="replace")
    err = buffers[proc.stderr.fileno()][: limits.output_limit].decode(errors="replace")
    isolation = _isolation(uid)
    duration = time.monotonic() - started

    def finish(status: str, values: list[Any], errors: list[str | None]) -> ExecutionResult:
        return ExecutionResult(status, values, errors, out, err, duration, exit_code, isolation)

    if status == "timeout":
        return finish("timeout", [], [f"ran longer than {limits.timeout_s:g}s"])
    if status == "killed":
        return finish("killed", [], [f"wrote more than {limits.output_limit} bytes"])
    try:
        result = json.loads(bytes(buffers[result_r]))
        return finish(str(result["status"]), list(result["values"]), list(result["errors"]))
    except (ValueError, KeyError, TypeError):
        return finish("killed", [], [_signal_reason(exit_code) or "the runner gave no result"])


def _signal_reason(exit_code: int | None) -> str | None:
    if exit_code is not None and exit_code < 0:
        name = signal.Signals(-exit_code).name
        hint = {"SIGXCPU": " (CPU time limit)", "SIGKILL": " (killed)", "SIGSEGV": " (crashed)"}.get(name, "")
        return f"the runner died of {name}{hint}"
    return None


def _kill_everything(proc: subprocess.Popen[bytes], uid: int | None) -> None:
    """Kill the runner's process group, and as another uid every process of that uid (fork bombs, daemons)."""
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(proc.pid, signal.SIGKILL)
    try:
        proc.wait(timeout=5)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()
    if uid is None or uid == 0:
        return
    # A fork bomb keeps forking while it is killed: sweep with kill(-1) as that uid until /proc shows none of
    # its processes alive. kill(-1)'s own result cannot tell (it succeeds whenever any process exists), and
    # zombies stay listed, so reap between sweeps (as subreaper we inherit the runner's orphans).
    for _ in range(500):
        _reap_orphans()
        if not _alive(uid):
            return
        _sweep(uid)
        time.sleep(0.002)


def _alive(uid: int) -> bool:
    """Whether a live (not zombie) process of `uid` is visible in /proc."""
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/status", encoding="ascii", errors="replace") as status:
                fields = dict(line.split(":", 1) for line in status if ":" in line)
        except OSError:
            continue
        if int(fields.get("Uid", "-1").split()[0]) == uid and not fields.get("State", "").strip().startswith("Z"):
            return True
    return False


def _sweep(uid: int) -> None:
    """kill(-1) as `uid` from a short-lived child: every process of that uid, never the caller."""
    killer = os.fork()
    if killer == 0:
        try:
            os.setresuid(uid, uid, uid)
            os.kill(-1, signal.SIGKILL)
        finally:
            os._exit(0)
    os.waitpid(killer, 0)


def _reap_orphans() -> None:
    """Collect runner descendants that were re-parented to us (we are their subreaper), so no zombie
    keeps counting against the runner uid's process limit."""
    while True:
        try:
            pid, _ = os.waitpid(-1, os.WNOHANG)
        except ChildProcessError:
            return
        if pid == 0:
            return


def _become_subreaper() -> None:
    """Orphans of runners re-parent to this process instead of to init (PR_SET_CHILD_SUBREAPER)."""
    try:
        import ctypes

        ctypes.CDLL(None, use_errno=True).prctl(36, 1, 0, 0, 0)
    except (OSError, AttributeError):
        pass


# --- the spawner: forked by the grader while it is still root, before it loads the environment ----------


def start_spawner(runner_uid: int) -> int:
    """Fork the spawner (it keeps root's right to switch uids); return its pid. The grader keeps a socket."""
    global _spawner
    parent_end, child_end = socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)
    pid = os.fork()
    if pid == 0:
        parent_end.close()
        try:
            _serve(child_end, runner_uid)
        finally:
            os._exit(0)
    child_end.close()
    _spawner = parent_end
    return pid


def _serve(conn: socket.socket, runner_uid: int) -> None:
    _become_subreaper()
    while True:
        request = _receive(conn)
        if request is None:  # the grader went away
            return
        limits = Limits(**request.pop("limits"))
        try:
            result = launch(request, limits, runner_uid)
        except Exception as exc:  # say why on stderr (the grader's log) and answer, rather than vanish
            traceback.print_exc(file=sys.stderr)
            result = ExecutionResult("killed", errors=[f"the spawner failed: {type(exc).__name__}: {exc}"])
        _send(conn, asdict(result))


def _ask_spawner(conn: socket.socket, request: dict[str, Any], limits: Limits) -> ExecutionResult:
    _send(conn, {**request, "limits": asdict(limits)})
    reply = _receive(conn)
    if reply is None:
        return ExecutionResult("killed", errors=["the spawner is gone"], isolation="uid")
    return ExecutionResult(**reply)


def _send(conn: socket.socket, message: dict[str, Any]) -> None:
    data = json.dumps(message).encode()
    conn.sendall(struct.pack("!I", len(data)) + data)


def _receive(conn: socket.socket) -> dict[str, Any] | None:
    header = _read_exactly(conn, 4)
    if header is None:
        return None
    body = _read_exactly(conn, struct.unpack("!I", header)[0])
    return None if body is None else dict(json.loads(body))


def _read_exactly(conn: socket.socket, size: int) -> bytes | None:
    data = bytearray()
    while len(data) < size:
        chunk = conn.recv(size - len(data))
        if not chunk:
            return None
        data += chunk
    return bytes(data)
