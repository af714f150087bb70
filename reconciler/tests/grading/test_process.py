"""One sandboxed command driven through non-blocking pipes: writes never block, lines come in batches,
stderr is drained while waiting, and an exit is seen even when a leftover child holds the pipes."""

from __future__ import annotations

import sys
import time

from nodus.reconciler.grading.process import ReadProblem, SandboxProcess
from nodus.reconciler.grading.sandbox import SandboxCommand


def _start(*argv: str, max_line_bytes: int = 1 << 20) -> SandboxProcess:
    return SandboxProcess(
        SandboxCommand(argv, "process", "same-uid", network_isolated=False), max_line_bytes=max_line_bytes
    )


def _python(code: str, **kwargs: int) -> SandboxProcess:
    return _start(sys.executable, "-c", code, **kwargs)


def test_a_write_bigger_than_the_pipe_never_blocks_and_arrives_whole() -> None:
    process = _python("import sys, time; time.sleep(0.3); print(len(sys.stdin.buffer.read()))")
    started = time.monotonic()
    process.write(b"x" * (1 << 20))  # 16 times what a pipe holds, to a process that is not reading yet
    process.close_stdin()
    assert time.monotonic() - started < 0.2
    assert process.read_line(10) == str(1 << 20).encode()
    assert process.read_line(10) is ReadProblem.EOF
    assert process.wait(10) == 0


def test_lines_come_in_batches_up_to_the_number_asked_and_the_end_comes_last() -> None:
    process = _python("import sys; sys.stdout.write('a\\nb\\nc'); sys.stdout.flush()")  # no newline after c
    assert process.wait(10) == 0  # all three are read already: wait keeps the pipes moving
    assert process.read_lines(10, 2) == [b"a", b"b"]
    assert process.read_lines(10, 2) == [b"c"]
    assert process.read_lines(10, 2) is ReadProblem.EOF


def test_a_line_over_the_limit_ends_reading_after_the_lines_before_it() -> None:
    process = _python("print('ok'); print('x' * 100); print('never read')", max_line_bytes=10)
    assert process.read_line(10) == b"ok"
    assert process.read_line(10) is ReadProblem.TOO_LONG
    assert process.kill() is not None


def test_nothing_to_read_within_the_timeout_is_a_timeout() -> None:
    process = _start("sleep", "30")
    started = time.monotonic()
    assert process.read_line(0.2) is ReadProblem.TIMEOUT
    assert 0.2 <= time.monotonic() - started < 5
    assert process.kill() == -9


def test_stderr_is_drained_while_waiting_and_its_tail_kept() -> None:
    # 1 MiB on stderr blocks a process whose stderr nobody reads: it could never exit.
    process = _python("import sys; sys.stderr.write('x' * (1 << 20) + 'last words'); sys.exit(3)")
    assert process.wait(10) == 3
    assert process.stderr_tail(20).endswith("last words")


def test_an_exit_is_seen_although_a_leftover_child_holds_the_pipes() -> None:
    process = _start("sh", "-c", "sleep 30 & echo started")
    started = time.monotonic()
    assert process.wait(20) == 0
    assert time.monotonic() - started < 10  # not the 30 s of the child that still holds stdout and stderr
    assert process.read_line(1) == b"started"
    process.kill()  # its process group: the leftover sleep
