"""One running sandboxed command, with lines in and out that never block the caller.

Who uses it: `Grader` (a long-lived `nodus-env grade`) and `GradingService.tasks` (one `nodus-env tasks`).

Three small threads per process keep the caller free: a writer (a grader that stops reading must not
block us on a full pipe), a reader that turns stdout into lines (bounded in length), and a drain for
stderr that keeps its last few KiB for error messages (an undrained stderr would stall the grader).
The process starts in its own session, so killing it kills its whole process group; a container is also
removed by name, because killing the runtime's client leaves the container running.
"""

from __future__ import annotations

import contextlib
import enum
import os
import queue
import signal
import subprocess
import threading
import time

from nodus.errors import PrerequisiteError

from .sandbox import SandboxCommand

STDERR_TAIL_BYTES = 8192
REMOVE_TIMEOUT_S = 30.0


class ReadProblem(enum.Enum):
    """Why `read_line` returned no line."""

    TIMEOUT = "timeout"
    EOF = "eof"
    TOO_LONG = "too long"


class SandboxProcess:
    """A started sandbox command; `read_line`, `write_line`, `close_stdin`, `kill`, `wait`."""

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
                start_new_session=True,
                close_fds=True,
            )
        except FileNotFoundError as exc:
            raise PrerequisiteError(
                f"cannot start the grader sandbox: {command.argv[0]} is not installed",
                hint="install util-linux (unshare, prlimit, setpriv) or podman",
            ) from exc
        self._lines: queue.Queue[bytes | ReadProblem] = queue.Queue()
        self._outgoing: queue.Queue[bytes | None] = queue.Queue()
        self._stderr = bytearray()
        self._stderr_lock = threading.Lock()
        self._threads = [
            threading.Thread(target=self._read_stdout, name="grader-stdout", daemon=True),
            threading.Thread(target=self._drain_stderr, name="grader-stderr", daemon=True),
            threading.Thread(target=self._write_stdin, name="grader-stdin", daemon=True),
        ]
        for thread in self._threads:
            thread.start()

    @property
    def pid(self) -> int:
        return self._popen.pid

    def write_line(self, line: bytes) -> None:
        """Queue one line (newline added) for the grader's stdin; never blocks."""
        self._outgoing.put(line + b"\n")

    def close_stdin(self) -> None:
        """After the queued lines: end of input, which tells `nodus-env` to finish and exit."""
        self._outgoing.put(None)

    def read_line(self, timeout_s: float) -> bytes | ReadProblem:
        """The next stdout line without its newline, or why there is none within `timeout_s`."""
        try:
            return self._lines.get(timeout=max(0.0, timeout_s))
        except queue.Empty:
            return ReadProblem.TIMEOUT

    def exit_code(self) -> int | None:
        return self._popen.poll()

    def wait(self, timeout_s: float) -> int | None:
        """The exit status (negative: killed by that signal), or None if still running after `timeout_s`."""
        try:
            code = self._popen.wait(timeout=timeout_s)
        except subprocess.TimeoutExpired:
            return None
        # Let the drain catch the last words on stderr (a crash message) before anyone reads the tail.
        self._threads[1].join(timeout=1.0)
        return code

    def stderr_tail(self, limit: int = 600) -> str:
        with self._stderr_lock:
            text = self._stderr[-limit:].decode("utf-8", "replace")
        return text.strip()

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
        self._outgoing.put(None)  # let the writer thread finish
        return code

    def close(self, timeout_s: float = 10.0) -> int | None:
        """End input and wait for a clean exit; kill when it does not come in time."""
        self.close_stdin()
        code = self.wait(timeout_s)
        return code if code is not None else self.kill()

    # --- threads -------------------------------------------------------------------------------------

    def _read_stdout(self) -> None:
        stdout = self._popen.stdout
        assert stdout is not None
        while True:
            line = stdout.readline(self.max_line_bytes + 1)
            if not line:
                self._lines.put(ReadProblem.EOF)
                return
            if not line.endswith(b"\n"):
                if len(line) > self.max_line_bytes:
                    self._lines.put(ReadProblem.TOO_LONG)
                    return
                self._lines.put(line)  # a last line without newline, then EOF
                continue
            self._lines.put(line[:-1])

    def _drain_stderr(self) -> None:
        stderr = self._popen.stderr
        assert stderr is not None
        for chunk in iter(lambda: os.read(stderr.fileno(), 4096), b""):
            with self._stderr_lock:
                self._stderr += chunk
                del self._stderr[:-STDERR_TAIL_BYTES]

    def _write_stdin(self) -> None:
        stdin = self._popen.stdin
        assert stdin is not None
        broken = False
        while True:
            data = self._outgoing.get()
            if data is None:
                break
            if broken:
                continue  # the grader is gone: its reader sees EOF, which is where the failure is handled
            try:
                stdin.write(data)
                stdin.flush()
            except (BrokenPipeError, OSError, ValueError):
                broken = True
        with contextlib.suppress(BrokenPipeError, OSError):
            stdin.close()
