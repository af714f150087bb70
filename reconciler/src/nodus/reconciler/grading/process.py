"""One running sandboxed command, driven from the caller's thread through non-blocking pipes.

Who uses it: `Grader` (a long-lived `nodus-env grade`) and `GradingService.tasks` (one `nodus-env tasks`).

No threads: whoever waits (`read_lines`, `wait`) does the I/O, with one `poll` over the command's stdin,
stdout and stderr. Queued input goes out in as few `write`s as the pipe allows, and what it does not take
waits in a buffer, so a grader that stops reading never blocks us. Stdout is read in big chunks and split
into lines at once (each bounded in length); stderr is drained whenever we wait, keeping its last few KiB
for error messages (an undrained stderr would stall the grader). Between calls nobody reads: a grader has
nothing left to answer then, and what it writes to stderr meanwhile waits in the pipe for the next call.
One thread drives a process at a time (the grader's worker, or `tasks`), so there is no locking.

The process starts in its own session, so killing it kills its whole process group; a container is also
removed by name, because killing the runtime's client leaves the container running.
"""

from __future__ import annotations

import contextlib
import enum
import os
import select
import signal
import subprocess
import time
from collections import deque

from nodus.errors import PrerequisiteError

from .sandbox import SandboxCommand

STDERR_TAIL_BYTES = 8192
REMOVE_TIMEOUT_S = 30.0
READ_CHUNK_BYTES = 1 << 16
"""A pipe holds 64 KiB by default: one read takes everything a grader wrote since the last one."""
DRAIN_AFTER_EXIT_S = 1.0
"""After an exit, how long to wait for the last words on stdout and stderr (a leftover child may hold them)."""
EXIT_POLL_S = 0.01
"""How often `wait` looks for the exit where the kernel has no pidfd (Linux before 5.3)."""

_IN = select.POLLIN | select.POLLPRI
_OUT = select.POLLOUT


class ReadProblem(enum.Enum):
    """Why `read_lines` (or `read_line`) returned no line."""

    TIMEOUT = "timeout"
    EOF = "eof"
    TOO_LONG = "too long"


class SandboxProcess:
    """A started sandbox command; `write`, `read_lines`, `read_line`, `close_stdin`, `kill`, `wait`, `close`."""

    def __init__(self, command: SandboxCommand, *, max_line_bytes: int) -> None:
        self.command = command
        self.max_line_bytes = max_line_bytes
        self.started_at = time.monotonic()
        try:
            self._popen = subprocess.Popen(
                list(command.argv),
                stdin=subprocess.PIPE,
                stdout=subprocess.PIPE,
                stderr=subprocess.PIPE,
                bufsize=0,
                start_new_session=True,
                close_fds=True,
            )
        except FileNotFoundError as exc:
            raise PrerequisiteError(
                f"cannot start the grader sandbox: {command.argv[0]} is not installed",
                hint="install util-linux (unshare, prlimit, setpriv) or podman",
            ) from exc
        stdin, stdout, stderr = self._popen.stdin, self._popen.stdout, self._popen.stderr
        assert stdin is not None
        assert stdout is not None
        assert stderr is not None
        # The file objects own the descriptors (and close them); the I/O goes through the raw descriptors.
        self._pipes = (stdin, stdout, stderr)
        self._stdin: int | None = stdin.fileno()
        self._stdout: int | None = stdout.fileno()
        self._stderr_fd: int | None = stderr.fileno()
        for fd in (self._stdin, self._stdout, self._stderr_fd):
            os.set_blocking(fd, False)
        self._poll = select.poll()
        self._poll.register(self._stdout, _IN)
        self._poll.register(self._stderr_fd, _IN)
        self._outgoing = bytearray()
        self._close_when_sent = False
        self._partial = bytearray()
        self._lines: deque[bytes] = deque()
        self._end: ReadProblem | None = None
        """EOF or TOO_LONG, reported by `read_lines` once the lines before it were read."""
        self._stderr = bytearray()
        self._pidfd = _pidfd(self._popen.pid)

    @property
    def pid(self) -> int:
        return self._popen.pid

    def write(self, data: bytes) -> None:
        """Queue bytes (whole lines, newlines included) for the grader's stdin; never blocks.

        Written at once as far as the pipe takes them; the rest goes out while the caller waits in
        `read_lines` or `wait`. A grader that closed its stdin gets nothing: its EOF on stdout tells why.
        """
        if self._stdin is None or self._close_when_sent:
            return
        if self._outgoing:
            self._outgoing += data
            return
        try:
            sent = os.write(self._stdin, data)
        except BlockingIOError:
            sent = 0
        except OSError:  # EPIPE: the grader is gone
            self._drop_stdin()
            return
        if sent < len(data):
            self._outgoing += data[sent:]
            self._poll.register(self._stdin, _OUT)

    def close_stdin(self) -> None:
        """After the queued input: end of input, which tells `nodus-env` to finish and exit."""
        if self._outgoing:
            self._close_when_sent = True
        else:
            self._drop_stdin()

    def read_lines(self, timeout_s: float, most: int) -> list[bytes] | ReadProblem:
        """The stdout lines read so far, without newlines (at least one and at most `most`), or why there
        is none within `timeout_s`. Lines read before an end of output or an over-long line come first."""
        deadline: float | None = None
        lines = self._lines
        while not lines:
            if self._end is not None:
                return self._end
            now = time.monotonic()
            if deadline is None:
                deadline = now + max(0.0, timeout_s)
            elif now >= deadline:
                return ReadProblem.TIMEOUT
            self._pump(deadline - now)
        if len(lines) <= most:
            taken = list(lines)
            lines.clear()
            return taken
        return [lines.popleft() for _ in range(most)]

    def read_line(self, timeout_s: float) -> bytes | ReadProblem:
        """The next stdout line without its newline, or why there is none within `timeout_s`."""
        lines = self.read_lines(timeout_s, 1)
        return lines if isinstance(lines, ReadProblem) else lines[0]

    def exit_code(self) -> int | None:
        return self._popen.poll()

    def wait(self, timeout_s: float) -> int | None:
        """The exit status (negative: killed by that signal), or None if still running after `timeout_s`.

        While waiting it keeps the pipes moving (a grader blocked on a full stderr would never exit); after
        the exit it catches the last words on stderr (a crash message) and closes the pipes.
        """
        deadline = time.monotonic() + max(0.0, timeout_s)
        code = self._popen.poll()
        if code is None:
            pidfd = self._pidfd
            if pidfd is not None:
                self._poll.register(pidfd, _IN)
            try:
                while code is None:
                    remaining = deadline - time.monotonic()
                    if remaining <= 0:
                        return None
                    self._pump(remaining if pidfd is not None else min(remaining, EXIT_POLL_S))
                    code = self._popen.poll()
            finally:
                if pidfd is not None:
                    self._poll.unregister(pidfd)
        self._drain_after_exit()
        return code

    def stderr_tail(self, limit: int = 600) -> str:
        return self._stderr[-limit:].decode("utf-8", "replace").strip()

    def kill(self) -> int | None:
        """Kill the whole sandbox (container included) and return its exit status."""
        if self.command.container is not None and self._popen.poll() is None:
            # A runtime that cannot remove it in time leaves a container behind; killing the client below
            # still ends our side, and `podman ps --filter name=nodus-grader-` finds what is left.
            with contextlib.suppress(subprocess.TimeoutExpired):
                subprocess.run(
                    self.command.container.remove_argv(),
                    capture_output=True,
                    timeout=REMOVE_TIMEOUT_S,
                    check=False,
                )
        with contextlib.suppress(ProcessLookupError, PermissionError):  # already gone: its group is empty
            os.killpg(self._popen.pid, signal.SIGKILL)
        code = self.wait(REMOVE_TIMEOUT_S)
        self._drop_stdin()
        return code

    def close(self, timeout_s: float = 10.0) -> int | None:
        """End input and wait for a clean exit; kill when it does not come in time."""
        self.close_stdin()
        code = self.wait(timeout_s)
        return code if code is not None else self.kill()

    # --- the pipes -----------------------------------------------------------------------------------

    def _pump(self, timeout_s: float) -> None:
        """Wait up to `timeout_s` for any pipe to be ready, then move what is ready (the pidfd needs nothing)."""
        for fd, _ in self._poll.poll(timeout_s * 1000):
            if fd == self._stdout:
                self._read_stdout()
            elif fd == self._stderr_fd:
                self._read_stderr()
            elif fd == self._stdin:
                self._send()

    def _send(self) -> None:
        assert self._stdin is not None
        try:
            sent = os.write(self._stdin, self._outgoing)
        except BlockingIOError:
            return
        except OSError:  # EPIPE: the grader is gone
            self._drop_stdin()
            return
        del self._outgoing[:sent]  # cheap: a bytearray drops its head without copying the rest
        if not self._outgoing:
            self._poll.unregister(self._stdin)
            if self._close_when_sent:
                self._drop_stdin()

    def _read_stdout(self) -> None:
        assert self._stdout is not None
        chunk = _read_available(self._stdout)
        if chunk is None:
            return
        if not chunk:
            if self._partial:  # a last line without newline, then EOF
                self._lines.append(bytes(self._partial))
            self._stop_stdout(ReadProblem.EOF)
            return
        cut = chunk.rfind(b"\n")
        if cut < 0:
            self._partial += chunk
        else:
            if self._partial:
                self._partial += chunk[:cut]
                complete, self._partial = bytes(self._partial), bytearray(chunk[cut + 1 :])
            else:
                complete, self._partial = chunk[:cut], bytearray(chunk[cut + 1 :])
            lines = complete.split(b"\n")
            if len(complete) > self.max_line_bytes:  # only then can one of them be too long
                for index, line in enumerate(lines):
                    if len(line) > self.max_line_bytes:
                        self._lines.extend(lines[:index])
                        self._stop_stdout(ReadProblem.TOO_LONG)
                        return
            self._lines.extend(lines)
        if len(self._partial) > self.max_line_bytes:
            self._stop_stdout(ReadProblem.TOO_LONG)

    def _stop_stdout(self, why: ReadProblem) -> None:
        """No more reading from stdout: it ended, or broke the line limit (and the grader will be killed)."""
        assert self._stdout is not None
        self._end = why
        self._partial = bytearray()
        self._poll.unregister(self._stdout)
        self._stdout = None

    def _read_stderr(self) -> None:
        assert self._stderr_fd is not None
        chunk = _read_available(self._stderr_fd)
        if chunk is None:
            return
        if not chunk:
            self._poll.unregister(self._stderr_fd)
            self._stderr_fd = None
            return
        self._stderr += chunk
        del self._stderr[:-STDERR_TAIL_BYTES]

    def _drop_stdin(self) -> None:
        """Close our end of stdin (end of input, or the grader is gone) and forget what was still queued."""
        if self._stdin is None:
            return
        if self._outgoing:
            self._poll.unregister(self._stdin)
            self._outgoing.clear()
        self._stdin = None
        with contextlib.suppress(OSError):
            self._pipes[0].close()

    def _drain_after_exit(self) -> None:
        """Read stdout and stderr to their end (bounded: a leftover child may hold them), then close them."""
        deadline = time.monotonic() + DRAIN_AFTER_EXIT_S
        while self._stdout is not None or self._stderr_fd is not None:
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                break
            self._pump(remaining)
        self._drop_stdin()
        if self._stdout is not None:
            self._stop_stdout(ReadProblem.EOF)
        if self._stderr_fd is not None:
            self._poll.unregister(self._stderr_fd)
            self._stderr_fd = None
        for pipe in self._pipes[1:]:
            with contextlib.suppress(OSError):
                pipe.close()
        if self._pidfd is not None:
            os.close(self._pidfd)
            self._pidfd = None


def _pidfd(pid: int) -> int | None:
    """A descriptor that becomes readable when `pid` exits, so `wait` can poll for it with the pipes."""
    try:
        return os.pidfd_open(pid)
    except (AttributeError, OSError):  # an old kernel: `wait` polls for the exit instead
        return None


def _read_available(fd: int) -> bytes | None:
    """What a non-blocking pipe holds now: None when nothing yet, b"" at its end (or when it broke)."""
    try:
        return os.read(fd, READ_CHUNK_BYTES)
    except BlockingIOError:
        return None
    except OSError:
        return b""
