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
import select
import signal
import socket
import struct
import subprocess
import sys
import time
import traceback
from dataclasses import asdict, dataclass, field
from typing import Any, NoReturn

from nodus.env import evidence, runner_view

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
            "view": "private",  # always: a runner that cannot have its view does not run (RunnerUnavailableError)
            "status": result.status,
            "exitCode": result.exit_code,
            "durationMs": round(result.duration_s * 1000, 3),
        }
    )
    return result


def launch(request: dict[str, Any], limits: Limits, uid: int | None) -> ExecutionResult:
    """Start one runner (as `uid` when given) in its private view, feed it the request, collect its result.

    The runner is forked by hand rather than by `subprocess`: entering the view takes two forks (the second
    child is PID 1 of the runner's own PID namespace) and a failure on the way must come back as a reason,
    not as a runner that ran somewhere weaker."""
    started = time.monotonic()
    python = _runner_python(uid)
    try:
        view = runner_view.runner_view(python)
    except runner_view.ViewUnavailableError as exc:
        raise RunnerUnavailableError(str(exc)) from exc
    stdin_r, stdin_w = os.pipe()
    stdout_r, stdout_w = os.pipe()
    stderr_r, stderr_w = os.pipe()
    result_r, result_w = os.pipe()
    error_r, error_w = os.pipe2(os.O_CLOEXEC)  # says why the view could not be entered; closed by exec
    child_ends = (stdin_r, stdout_w, stderr_w, result_w, error_w)
    try:
        pid = os.fork()
    except OSError as exc:
        for fd in (*child_ends, stdin_w, stdout_r, stderr_r, result_r, error_r):
            os.close(fd)
        return ExecutionResult("killed", errors=[f"could not start the runner: {exc}"], isolation=_isolation(uid))
    if pid == 0:  # pragma: no cover - runs in the child
        _child(view, limits, uid, (stdin_r, stdout_w, stderr_w, result_w), error_w)
    for fd in child_ends:
        os.close(fd)
    proc = _Runner(pid, stdin_w, stdout_r, stderr_r)
    try:
        failure = _read_failure(error_r, started + limits.timeout_s)
        if failure is not None:
            os.close(stdin_w)
            proc.wait()
            raise RunnerUnavailableError(failure)
        return _collect(proc, {**request, "fd": RESULT_FD}, limits, result_r, started, uid)
    finally:
        _kill_everything(proc, uid)
        for fd in (error_r, result_r, stdout_r, stderr_r):
            os.close(fd)
        with contextlib.suppress(OSError):
            os.close(stdin_w)


class RunnerUnavailableError(RuntimeError):
    """The runner could not be started in its private view: the grading is an InfrastructureFailure."""


RESULT_FD = 3


@dataclass
class _Runner:
    """The first child of a runner start (it waits for PID 1 of the runner's namespace and exits as it does)."""

    pid: int
    stdin: int
    stdout: int
    stderr: int
    returncode: int | None = None

    def poll(self) -> int | None:
        if self.returncode is None:
            try:
                pid, status = os.waitpid(self.pid, os.WNOHANG)
            except ChildProcessError:
                return self.returncode
            if pid:
                self.returncode = os.waitstatus_to_exitcode(status)
        return self.returncode

    def wait(self, timeout: float | None = None) -> int:
        deadline = None if timeout is None else time.monotonic() + timeout
        while self.poll() is None:
            if deadline is not None and time.monotonic() > deadline:
                raise subprocess.TimeoutExpired(str(self.pid), timeout or 0)
            if deadline is None:
                with contextlib.suppress(ChildProcessError):
                    _, status = os.waitpid(self.pid, 0)
                    self.returncode = os.waitstatus_to_exitcode(status)
                break
            time.sleep(0.002)
        return self.returncode if self.returncode is not None else -signal.SIGKILL

    def kill(self) -> None:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.kill(self.pid, signal.SIGKILL)


def _read_failure(error_r: int, deadline: float) -> str | None:
    """What the child wrote on the error pipe before it exec'd (nothing: the runner started)."""
    data = bytearray()
    while True:
        remaining = deadline - time.monotonic()
        if remaining <= 0:
            return "the runner's view took longer than the run's time limit to build"
        ready, _, _ = select.select([error_r], [], [], remaining)
        if not ready:
            continue
        chunk = os.read(error_r, 4096)
        if not chunk:
            return data.decode(errors="replace") or None
        data += chunk


def _child(
    view: runner_view.RunnerView, limits: Limits, uid: int | None, fds: tuple[int, int, int, int], error_w: int
) -> NoReturn:  # pragma: no cover - runs in the forked child
    """First child: limits, the runner uid, new namespaces; then fork PID 1, which enters the view and execs."""
    try:
        os.setsid()
        _limit(limits, uid)
        if uid is not None:
            os.setgroups([])
            os.setresgid(uid, uid, uid)
            os.setresuid(uid, uid, uid)
        runner_view.unshare(os.getuid(), os.getgid())
        pid = os.fork()
        if pid == 0:
            runner_view.enter(view)
            stdin_r, stdout_w, stderr_w, result_w = fds
            for fd, number in ((stdin_r, 0), (stdout_w, 1), (stderr_w, 2), (result_w, RESULT_FD)):
                os.dup2(fd, number, inheritable=True)
            os.closerange(RESULT_FD + 1, error_w)
            os.closerange(error_w + 1, 1 << 16)
            os.execve(view.python, [view.python, "-I", "-S", "-c", RUNNER], RUNNER_ENVIRONMENT)
        os.close(error_w)
        os.closerange(0, 1 << 16)
        _, status = os.waitpid(pid, 0)
        _exit_as(status)
    except BaseException as exc:
        with contextlib.suppress(BaseException):
            os.write(error_w, f"the runner's private view could not be built: {exc}".encode())
        os._exit(127)


RUNNER_ENVIRONMENT = {"PATH": "/usr/bin:/bin", "LANG": "C.UTF-8", "HOME": "/tmp", "TMPDIR": "/tmp"}
"""The runner's whole environment: nothing of the grader's (its variables may name the answers' places)."""


def _exit_as(status: int) -> NoReturn:  # pragma: no cover - runs in the forked child
    """End with PID 1's status: the same exit code, or death by the same signal (the host names the signal)."""
    if os.WIFSIGNALED(status):
        number = os.WTERMSIG(status)
        resource.setrlimit(resource.RLIMIT_CORE, (0, 0))
        signal.signal(number, signal.SIG_DFL)
        os.kill(os.getpid(), number)
    os._exit(os.WEXITSTATUS(status) if os.WIFEXITED(status) else 1)


def _runner_python(uid: int | None) -> str:
    """The interpreter for runners: NODUS_RUNNER_PYTHON, else the system's python3, else our own.

    The runner needs only the standard library, and its view binds exactly that interpreter's."""
    chosen = os.environ.get("NODUS_RUNNER_PYTHON")
    if chosen:
        return chosen
    for candidate in ("/usr/bin/python3", "/usr/local/bin/python3"):
        if os.access(candidate, os.X_OK):
            return candidate
    return getattr(sys, "_base_executable", None) or sys.executable


def _isolation(uid: int | None) -> str:
    return "uid" if uid is not None else "same-uid"


def _limit(limits: Limits, uid: int | None) -> None:
    """The runner's resource limits, set before the uid changes (RLIMIT_NPROC binds only non-root uids)."""
    cpu = max(1, int(limits.timeout_s) + 1)
    _lower(resource.RLIMIT_CPU, cpu)
    _lower(resource.RLIMIT_AS, limits.memory_mb * 1024 * 1024)
    _lower(resource.RLIMIT_FSIZE, FILE_SIZE_LIMIT)
    _lower(resource.RLIMIT_NOFILE, MAX_OPEN_FILES)
    _lower(resource.RLIMIT_CORE, 0)
    if uid is not None:
        _lower(resource.RLIMIT_NPROC, MAX_PROCESSES)
    elif os.geteuid() != 0:
        _lower(resource.RLIMIT_NPROC, MAX_PROCESSES + _own_processes())


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
    proc: _Runner, request: dict[str, Any], limits: Limits, result_r: int, started: float, uid: int | None
) -> ExecutionResult:
    _write_all(proc.stdin, json.dumps(request).encode(), started + limits.timeout_s)
    os.close(proc.stdin)
    buffers: dict[int, bytearray] = {proc.stdout: bytearray(), proc.stderr: bytearray(), result_r: bytearray()}
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
    out = buffers[proc.stdout][: limits.output_limit].decode(errors="replace")
    err = buffers[proc.stderr][: limits.output_limit].decode(errors="replace")
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


def _write_all(fd: int, data: bytes, deadline: float) -> None:
    """Feed the runner its request; a runner that stops reading (or died) only loses it."""
    view = memoryview(data)
    while view and time.monotonic() < deadline:
        _, ready, _ = select.select([], [fd], [], max(0.0, deadline - time.monotonic()))
        if not ready:
            continue
        try:
            view = view[os.write(fd, view[:65536]) :]
        except (BrokenPipeError, BlockingIOError):
            return


def _signal_reason(exit_code: int | None) -> str | None:
    if exit_code is not None and exit_code < 0:
        name = signal.Signals(-exit_code).name
        hint = {"SIGXCPU": " (CPU time limit)", "SIGKILL": " (killed)", "SIGSEGV": " (crashed)"}.get(name, "")
        return f"the runner died of {name}{hint}"
    return None


def _kill_everything(proc: _Runner, uid: int | None) -> None:
    """Kill the runner's process group, and as another uid every process of that uid (fork bombs, daemons).

    Killing the first child kills PID 1 of the runner's namespace (its parent-death signal), and with it
    every process in that namespace."""
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
            _send(conn, asdict(launch(request, limits, runner_uid)))
        except RunnerUnavailableError as exc:
            _send(conn, {"unavailable": str(exc)})
        except Exception as exc:  # say why on stderr (the grader's log) and answer, rather than vanish
            traceback.print_exc(file=sys.stderr)
            _send(conn, {"unavailable": f"the spawner failed: {type(exc).__name__}: {exc}"})


def _ask_spawner(conn: socket.socket, request: dict[str, Any], limits: Limits) -> ExecutionResult:
    _send(conn, {**request, "limits": asdict(limits)})
    reply = _receive(conn)
    if reply is None:
        raise RunnerUnavailableError("the spawner that starts runners is gone")
    if "unavailable" in reply:
        raise RunnerUnavailableError(str(reply["unavailable"]))
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
