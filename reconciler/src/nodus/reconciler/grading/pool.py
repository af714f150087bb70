"""The graders of one (environment, job): at most `max_parallel`, each with its own runner uid.

Who uses it: `GradingService` keeps one pool per (environment, job); its grade workers `acquire` a grader,
use it and `release` it; its reaper stops graders idle for too long.

Runner uids come from one allocator per service, so no two live graders share one: RLIMIT_NPROC counts
processes per uid across the whole host, and `nodus-env` kills every process of the runner uid after each
run, which must never reach another grader's runner.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable

from nodus.errors import TemporaryError

from .grader import Grader


class RunnerUids:
    """Hands out the lowest free uid of `[base, base + count)` and takes it back when a grader stops."""

    def __init__(self, base: int, count: int) -> None:
        self.base = base
        self.count = count
        self._taken: set[int] = set()
        self._lock = threading.Lock()

    def take(self) -> int:
        with self._lock:
            for uid in range(self.base, self.base + self.count):
                if uid not in self._taken:
                    self._taken.add(uid)
                    return uid
        raise TemporaryError(f"all {self.count} runner uids from {self.base} are in use by live graders", delay=30)

    def give_back(self, uid: int) -> None:
        with self._lock:
            self._taken.discard(uid)


class GraderPool:
    """Idle and busy graders of one (environment, job); `acquire` waits while `max_parallel` are busy."""

    def __init__(self, make: Callable[[int], Grader], uids: RunnerUids, max_parallel: int) -> None:
        self._make = make
        self._uids = uids
        self.max_parallel = max_parallel
        self._idle: list[Grader] = []
        self._busy: set[Grader] = set()
        self._closed = False
        self._changed = threading.Condition()

    @property
    def size(self) -> int:
        with self._changed:
            return len(self._idle) + len(self._busy)

    def acquire(self) -> Grader:
        """An idle grader (the most recently used: it is warm), a new one, or the first one released."""
        with self._changed:
            while True:
                if self._closed:
                    raise TemporaryError("the graders of this job were closed while grading", delay=1)
                if self._idle:
                    grader = self._idle.pop()
                    break
                if len(self._busy) < self.max_parallel:
                    uid = self._uids.take()
                    try:
                        grader = self._make(uid)
                    except BaseException:
                        self._uids.give_back(uid)
                        raise
                    break
                self._changed.wait()
            self._busy.add(grader)
            return grader

    def release(self, grader: Grader) -> None:
        with self._changed:
            self._busy.discard(grader)
            closed = self._closed
            if not closed:
                self._idle.append(grader)
            self._changed.notify()
        if closed:
            self._stop(grader)

    def reap(self, idle_timeout_s: float) -> int:
        """Stop graders unused for `idle_timeout_s`; return how many were stopped."""
        now = time.monotonic()
        with self._changed:
            stale = [g for g in self._idle if now - g.last_used >= idle_timeout_s]
            self._idle = [g for g in self._idle if g not in stale]
            if stale:
                self._changed.notify_all()
        for grader in stale:
            self._stop(grader)
        return len(stale)

    def close(self) -> None:
        """Stop idle graders now and busy ones when they are released; no new work is accepted."""
        with self._changed:
            self._closed = True
            idle, self._idle = self._idle, []
            self._changed.notify_all()
        for grader in idle:
            self._stop(grader)

    def _stop(self, grader: Grader) -> None:
        try:
            grader.close()
        finally:
            if grader.runner_uid is not None:
                self._uids.give_back(grader.runner_uid)
