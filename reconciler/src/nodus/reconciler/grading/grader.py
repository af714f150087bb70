"""One long-lived grader process: request lines in, one verdict per line out, in order, whatever happens.

Who uses it: `GraderPool` creates one per slot; `GradingService.grade` drives it from a worker thread,
which also does the process's I/O (`SandboxProcess` has no threads of its own).

The protocol is `nodus-env grade`'s: one JSON line in, one JSON line out, in order. Lines are written
ahead so the grader never waits for us: `START_WINDOW` after a (re)start, then one more for every line
answered (a grader that dies at once blames few lines), up to about `IN_FLIGHT_S` of its work (a slow
grader does not hoard lines other graders could take) and never more than `window`. The I/O goes in
batches: the lines taken while handling a batch of replies go out in one write, before we wait again.
Each line has a deadline measured from when the grader could start it (when the line before it was
answered, or when it was written, if later), plus a start-up allowance for the first line after a
(re)start. A timeout, a crash or a malformed reply ends the process (its whole process group, or its
container): every line it had not answered gets an `InfrastructureFailure` saying what happened, and the
next lines go to a fresh process. Every request taken from the source leaves through exactly one `yield`,
so no verdict is lost or duplicated; a stale process's late output cannot leak either, because each
process has its own pipes.
"""

from __future__ import annotations

import hashlib
import itertools
import time
from collections import deque
from collections.abc import Callable, Generator, Iterable, Iterator
from dataclasses import dataclass
from typing import Any, Generic, TypeVar

from .models import INFRASTRUCTURE_FAILURE, NEXT_ROLES, GradeRequest, MalformedReplyError, Verdict, parse_reply
from .process import ReadProblem, SandboxProcess
from .wire import decode_reply, request_line

K = TypeVar("K")

START_WINDOW = 4
"""Lines in flight to a freshly started process: a crash loop blames at most this many lines per start."""
IN_FLIGHT_S = 0.02
"""About how much of the grader's work to keep in flight: enough that it never waits for us, and no more,
because lines held by one grader wait behind its slow lines (and fail with it) while other graders idle."""
PACE_DECAY = 0.9
"""Weight of the past in the grader's pace (seconds per line), per batch of replies."""


@dataclass(slots=True)
class _Line(Generic[K]):
    """A request taken for the grader (written, or about to be in the next write) and not answered yet."""

    key: K
    request: GradeRequest
    input_sha256: str
    written_at: float | None
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
        self._limit = min(window, START_WINDOW)
        """How many lines the current process may have in flight now."""
        self._cap = window
        """What `_limit` may grow to at the grader's pace."""
        self._pace = _Pace()

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
        """Taken and not answered, in order: the lines the process fails with if it ends now."""
        unsent: list[tuple[_Line[K], bytes]] = []
        """The last of `pending`, not written yet: they go out in one write before we wait for a reply."""
        failures_in_a_row = 0
        exhausted = False
        self.crash_looping = False
        try:
            while True:
                if not exhausted and not self.crash_looping:
                    exhausted = self._take(source, pending, unsent)
                if not pending:
                    return
                self._send(unsent)
                replies = self._read(pending)
                failure = replies if isinstance(replies, _Failure) else None
                answered = 0
                for reply in replies if isinstance(replies, list) else ():
                    verdict = self._verdict(pending[0], reply)
                    if isinstance(verdict, _Failure):
                        failure = verdict
                        break
                    answered += 1
                    failures_in_a_row = 0
                    self._limit = min(self._limit + 1, self._cap)  # after a start: doubles every round trip
                    yield pending.popleft().key, verdict  # taken off `pending` as it leaves, for an early stop
                if failure is not None and answered and not exhausted and not self.crash_looping:
                    # The lines these answers made room for count as in flight, as if each had been written when
                    # the answer before it came: what a failure takes down does not depend on how the replies
                    # happened to be batched.
                    exhausted = self._take(source, pending, unsent)
                if answered:
                    self._paced(answered)
                self.last_used = time.monotonic()
                if failure is not None:
                    failures_in_a_row += 1
                    self.crash_looping = failures_in_a_row >= self.crash_loop_limit
                    unsent.clear()
                    yield from self._fail_all(pending, failure)
        finally:
            if pending:  # the consumer stopped early: the stream's state is unknown, start afresh next time
                self._stop(kill=True)

    def close(self) -> None:
        """Stop the process (end of input, then a kill if it does not exit in time)."""
        self._stop(kill=False)

    # --- one step ----------------------------------------------------------------------------------

    def _take(
        self,
        source: Iterator[tuple[K, GradeRequest]],
        pending: deque[_Line[K]],
        unsent: list[tuple[_Line[K], bytes]],
    ) -> bool:
        """Take lines from `source` up to the window, to be sent; True when `source` ran out."""
        room = self._limit - len(pending)
        if room <= 0:
            return False
        if pending:
            taken = list(itertools.islice(source, room))
        else:
            item = next(source, None)
            if item is None:
                return True
            process = self._process
            if process is None or process.exit_code() is not None:
                # Nothing is in flight and it is not running (or died while idle): start one before these
                # lines are written, so they are not blamed for a death they did not cause.
                if process is not None:
                    process.kill()
                self._launch()
                room = self._limit
            self._pace.resume()  # it had nothing to do until now
            taken = [item, *itertools.islice(source, room - 1)]
        first = not self._any_written
        self._any_written = True
        for key, request in taken:
            data = request_line(request)
            line = _Line(key, request, hashlib.sha256(data).hexdigest(), None, first)
            first = False
            pending.append(line)
            unsent.append((line, data))
        return len(taken) < room

    def _send(self, unsent: list[tuple[_Line[K], bytes]]) -> None:
        """Write the lines taken since the last write, in one write."""
        if not unsent:
            return
        process = self._process
        assert process is not None  # with lines in flight the process is the one they were taken for
        process.write(b"\n".join([data for _, data in unsent]) + b"\n")
        now = time.monotonic()
        for line, _ in unsent:
            line.written_at = now
        unsent.clear()

    def _read(self, pending: deque[_Line[K]]) -> list[bytes] | _Failure:
        """The replies read so far (waiting for the first within the head line's deadline), or why the
        process had to end (it is ended then)."""
        process = self._process
        assert process is not None
        head = pending[0]
        limit = self.timings.task_timeout_s + self.timings.kill_grace_s
        if head.first_of_process:
            limit += self.timings.start_timeout_s
        could_start_at = self._could_start(head)
        replies = process.read_lines(could_start_at + limit - time.monotonic(), len(pending))
        if replies is ReadProblem.TIMEOUT:
            return self._end(f"no reply to task {head.request.task_id} within {limit:g}s", kill=True)
        if replies is ReadProblem.TOO_LONG:
            return self._end(
                f"reply to task {head.request.task_id} longer than {process.max_line_bytes} bytes", kill=True
            )
        if isinstance(replies, ReadProblem):  # end of output: it exited, or is about to
            return self._end("the grader exited before answering", kill=False)
        return replies

    def _verdict(self, line: _Line[K], reply: bytes) -> Verdict | _Failure:
        """The verdict in `reply` to `line`, or why the process had to end (it is ended then)."""
        could_start_at = line.could_start_at
        if could_start_at is None:  # the usual case: it could start when the line before it was just answered
            could_start_at = self._could_start(line)
        request = line.request
        output_sha256 = hashlib.sha256(reply).hexdigest()
        try:
            decoded = decode_reply(reply)
            verdict, reward, sandbox = parse_reply(decoded, request)
        except MalformedReplyError as exc:
            why = f"malformed reply to task {request.task_id} ({exc})"
            return self._end(why, kill=True, output_sha256=output_sha256)
        evidence = {
            "process": self._process_evidence,
            "exitCode": None,
            "durationMs": _ms(time.monotonic() - could_start_at),
            "inputSha256": line.input_sha256,
            "outputSha256": output_sha256,
            "sandbox": sandbox,
        }
        if request.turns is None:
            return Verdict(request.task_id, verdict, reward, evidence)
        next_turn, done = decoded.get("next"), bool(decoded.get("done", True))
        role = decoded.get("nextRole")
        if role is not None and role not in NEXT_ROLES:
            why = f"malformed reply to task {request.task_id} (nextRole {role!r} is not one of {', '.join(NEXT_ROLES)})"
            return self._end(why, kill=True, output_sha256=output_sha256)
        next_role = None if role in (None, "user") else str(role)
        return Verdict(request.task_id, verdict, reward, evidence, next=next_turn, done=done, next_role=next_role)

    @staticmethod
    def _could_start(line: _Line[K]) -> float:
        """When the grader could start `line`: once it was written and the line before it was answered
        (that is now, the first time we look at it, because we look at it right after that answer)."""
        if line.could_start_at is None:
            now = time.monotonic()
            line.could_start_at = now if line.written_at is None else max(line.written_at, now)
        return line.could_start_at

    def _paced(self, answered: int) -> None:
        """After a batch of `answered` replies: no more in flight than about IN_FLIGHT_S of work at the
        grader's pace (at least START_WINDOW), nor more than `window`."""
        seconds_per_line = self._pace.answered(answered)
        enough = int(IN_FLIGHT_S / seconds_per_line) if seconds_per_line > 0 else self.window
        self._cap = min(self.window, max(START_WINDOW, enough))
        self._limit = min(self._limit, self._cap)

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
        self._limit = min(self.window, START_WINDOW)
        self._cap = self.window
        self._pace = _Pace()
        return process

    def _stop(self, *, kill: bool) -> None:
        process, self._process = self._process, None
        if process is None:
            return
        if kill:
            process.kill()
        else:
            process.close()


class _Pace:
    """How fast a grader answers while it has work: seconds per line, recent batches weighing most."""

    def __init__(self) -> None:
        self._since = time.monotonic()
        self._seconds = 0.0
        self._lines = 0.0

    def resume(self) -> None:
        """It gets work after having none: count its time from now."""
        self._since = time.monotonic()

    def answered(self, lines: int) -> float:
        """`lines` more were answered since the last call (or `resume`); the pace now."""
        now = time.monotonic()
        self._seconds = self._seconds * PACE_DECAY + (now - self._since)
        self._lines = self._lines * PACE_DECAY + lines
        self._since = now
        return self._seconds / self._lines


def _ms(seconds: float) -> float:
    return round(seconds * 1000, 3)
