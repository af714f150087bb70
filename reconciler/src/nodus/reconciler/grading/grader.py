"""One long-lived grader process: request lines in, one verdict per line out, in order, whatever happens.

Who uses it: `GraderPool` creates one per slot; `GradingService.grade` drives it from a worker thread.

The protocol is `nodus-env grade`'s: one JSON line in, one JSON line out, in order. Up to `window` lines
are written ahead so the grader never waits for us. Each line has a deadline measured from when the
grader could start it (when the line before it was answered, or when it was written, if later), plus a
start-up allowance for the first line after a (re)start. A timeout, a crash or a malformed reply ends
the process (its whole process group, or its container): every line it had not answered gets an
`InfrastructureFailure` saying what happened, and the next lines go to a fresh process. Every request
taken from the source leaves through exactly one `yield`, so no verdict is lost or duplicated; a stale
process's late output cannot leak either, because each process has its own line queue.
"""

from __future__ import annotations

import hashlib
import json
import time
from collections import deque
from collections.abc import Callable, Generator, Iterable
from dataclasses import dataclass
from typing import Any, Generic, TypeVar

from .models import INFRASTRUCTURE_FAILURE, GradeRequest, MalformedReplyError, Verdict, parse_reply
from .process import ReadProblem, SandboxProcess

K = TypeVar("K")


@dataclass
class _Line(Generic[K]):
    """A request written to the grader and not answered yet."""

    key: K
    request: GradeRequest
    input_sha256: str
    written_at: float
    first_of_process: bool
    could_start_at: float | None = None


@dataclass(frozen=True)
class _Failure:
    """Why a grader process was ended, its exit status, and the hash of the bad reply (if one was read)."""

    cause: str
    exit_code: int | None
    output_sha256: str | None


@dataclass(frozen=True)
class GraderTimings:
    task_timeout_s: float
    kill_grace_s: float
    start_timeout_s: float


class Grader:
    """A grader process for one (environment, job) slot that restarts itself when it fails."""

    def __init__(
        self,
        start: Callable[[], SandboxProcess],
        *,
        timings: GraderTimings,
        window: int,
        crash_loop_limit: int,
        runner_uid: int | None = None,
    ) -> None:
        self._start = start
        self.timings = timings
        self.window = window
        self.crash_loop_limit = crash_loop_limit
        self.runner_uid = runner_uid
        self.last_used = time.monotonic()
        self.starts = 0
        self.crash_looping = False
        """Set when the last `grade` stopped early: the grader failed `crash_loop_limit` times in a row."""
        self._process: SandboxProcess | None = None
        self._process_evidence: dict[str, Any] = {}
        self._any_written = False

    @property
    def process(self) -> SandboxProcess | None:
        return self._process

    def grade(self, requests: Iterable[tuple[K, GradeRequest]]) -> Generator[tuple[K, Verdict], None, None]:
        """Grade what `requests` gives (pulled lazily, so several graders can share one source).

        Yields `(key, verdict)` once per request taken, in the order taken. Stops taking requests when
        the grader failed `crash_loop_limit` times in a row without answering a line (`crash_looping`).
        """
        source = iter(requests)
        pending: deque[_Line[K]] = deque()
        failures_in_a_row = 0
        exhausted = False
        self.crash_looping = False
        try:
            while True:
                while not exhausted and len(pending) < self.window and not self.crash_looping:
                    item = next(source, None)
                    if item is None:
                        exhausted = True
                        break
                    pending.append(self._write(*item, fresh_batch=not pending))
                if not pending:
                    return
                head = pending[0]
                if head.could_start_at is None:
                    head.could_start_at = max(head.written_at, time.monotonic())
                answered = self._read_reply(head)
                self.last_used = time.monotonic()
                if isinstance(answered, Verdict):
                    pending.popleft()
                    failures_in_a_row = 0
                    yield head.key, answered
                    continue
                failures_in_a_row += 1
                self.crash_looping = failures_in_a_row >= self.crash_loop_limit
                yield from self._fail_all(pending, answered)
        finally:
            if pending:  # the consumer stopped early: the stream's state is unknown, start afresh next time
                self._stop(kill=True)

    def close(self) -> None:
        """Stop the process (end of input, then a kill if it does not exit in time)."""
        self._stop(kill=False)

    # --- one step ----------------------------------------------------------------------------------

    def _write(self, key: K, request: GradeRequest, *, fresh_batch: bool) -> _Line[K]:
        process = self._process
        if fresh_batch and (process is None or process.exit_code() is not None):
            # Nothing is in flight and it is not running (or died while idle): start one before this
            # line is written, so the line is not blamed for a death it did not cause.
            if process is not None:
                process.kill()
            process = self._launch()
        assert process is not None  # with lines in flight the process is the one they were written to
        first = not self._any_written
        self._any_written = True
        data = json.dumps(request.to_json(), ensure_ascii=False, separators=(",", ":")).encode()
        process.write_line(data)
        return _Line(key, request, hashlib.sha256(data).hexdigest(), time.monotonic(), first)

    def _read_reply(self, head: _Line[K]) -> Verdict | _Failure:
        """The head line's verdict, or why the process must end (the process is ended then)."""
        process = self._process
        assert process is not None
        assert head.could_start_at is not None
        limit = self.timings.task_timeout_s + self.timings.kill_grace_s
        if head.first_of_process:
            limit += self.timings.start_timeout_s
        reply = process.read_line(head.could_start_at + limit - time.monotonic())
        task = head.request.task_id
        if reply is ReadProblem.TIMEOUT:
            return self._end(f"no reply to task {task} within {limit:g}s", kill=True)
        if reply is ReadProblem.TOO_LONG:
            return self._end(f"reply to task {task} longer than {process.max_line_bytes} bytes", kill=True)
        if isinstance(reply, ReadProblem):  # end of output: it exited, or is about to
            return self._end("the grader exited before answering", kill=False)
        output_sha256 = hashlib.sha256(reply).hexdigest()
        try:
            decoded = _decode(reply)
            verdict, reward, sandbox = parse_reply(decoded, head.request)
        except MalformedReplyError as exc:
            return self._end(f"malformed reply to task {task} ({exc})", kill=True, output_sha256=output_sha256)
        multi_turn = head.request.turns is not None
        evidence = {
            "process": self._process_evidence,
            "exitCode": None,
            "durationMs": _ms(time.monotonic() - head.could_start_at),
            "inputSha256": head.input_sha256,
            "outputSha256": output_sha256,
            "sandbox": sandbox,
        }
        return Verdict(
            task,
            verdict,
            reward,
            evidence,
            next=decoded.get("next") if multi_turn else None,
            done=bool(decoded.get("done", True)) if multi_turn else None,
        )

    def _end(self, cause: str, *, kill: bool, output_sha256: str | None = None) -> _Failure:
        """Stop the process now and describe why, with its exit status (and its last words on stderr)."""
        process, self._process = self._process, None
        assert process is not None
        if kill:
            code = process.kill()
        else:
            code = process.wait(self.timings.kill_grace_s)
            if code is None:  # closed its stdout but lives on: it cannot answer any more
                code = process.kill()
            cause = cause.replace("exited", f"exited with status {code}")
        stderr = process.stderr_tail()
        if stderr:
            cause += f" (stderr: {stderr})"
        return _Failure(cause, code, output_sha256)

    def _fail_all(self, pending: deque[_Line[K]], failure: _Failure) -> list[tuple[K, Verdict]]:
        """Every line the ended process had not answered gets an InfrastructureFailure that says why."""
        out: list[tuple[K, Verdict]] = []
        now = time.monotonic()
        for index, line in enumerate(pending):
            if index == 0:
                message = f"{failure.cause}; the grader was stopped and is restarted for the next lines"
            else:
                message = f"not graded: the grader was stopped before this line ({failure.cause})"
            evidence = {
                "process": self._process_evidence,
                "exitCode": failure.exit_code,
                "durationMs": _ms(now - line.could_start_at) if line.could_start_at is not None else 0.0,
                "inputSha256": line.input_sha256,
                "outputSha256": failure.output_sha256 if index == 0 else None,
                "sandbox": None,
                "message": message,
            }
            out.append((line.key, Verdict(line.request.task_id, INFRASTRUCTURE_FAILURE, None, evidence)))
        pending.clear()
        return out

    def _launch(self) -> SandboxProcess:
        process = self._start()
        self.starts += 1
        self._process = process
        self._process_evidence = {**process.command.evidence(), "start": self.starts}
        self._any_written = False
        return process

    def _stop(self, *, kill: bool) -> None:
        process, self._process = self._process, None
        if process is None:
            return
        if kill:
            process.kill()
        else:
            process.close()


def _decode(reply: bytes) -> Any:
    try:
        return json.loads(reply)
    except ValueError as exc:
        raise MalformedReplyError(f"not JSON: {reply[:80]!r}") from exc


def _ms(seconds: float) -> float:
    return round(seconds * 1000, 3)
