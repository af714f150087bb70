"""The controller's loop: a sync pass every interval until SIGTERM or SIGINT, then a clean stop.

Who calls it: the `nodus controller` command (`nodus.cli.controller`), which logs what `run` reports.

Intervals run start to start (a pass that took 10 s of a 60 s interval is followed 50 s later). The first
SIGTERM or SIGINT ends the loop: at once while it waits, after the pass while one runs (a pass is short; an
apply cut off half-way is safe to repeat, but finishing it is tidier). A second signal during a pass abandons
it (KeyboardInterrupt): the lease is released on the way out, the summary still says Running, and the next
controller applies that revision again (`nodus.reconciler.gitops.sync` says why nothing is lost).

Between passes, a job that waits on a dependency (its controller returned `Requeue`) is reconciled again when
its requeue delay is over, not only at the next pass (which, in sync, would not look at it at all), and not
more often (`nodus.reconciler.waiting.Requeues`).
"""

from __future__ import annotations

import os
import signal
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from types import FrameType

from nodus.reconciler.gitops.sync import Notify, PassReport, Target, sync_pass
from nodus.reconciler.project import Project
from nodus.reconciler.state.records import StateStore
from nodus.reconciler.waiting import Requeues, requeued_keys

STOP_SIGNALS = (signal.SIGTERM, signal.SIGINT)
TICK_S = 0.2
"""How often a waiting loop looks whether it was asked to stop."""


class Stop:
    """What the stop signals asked for: `requested` after the first; a second one during a pass abandons it."""

    def __init__(self) -> None:
        self.requested: str | None = None
        """The name of the first stop signal, once one came."""
        self.busy = False

    def handle(self, signum: int, frame: FrameType | None) -> None:
        name = signal.Signals(signum).name
        if self.requested and self.busy:
            raise KeyboardInterrupt  # abandon the pass; safe, see the module's docstring
        self.requested = name
        if self.busy:
            # os.write, not the log: a handler may run in the middle of a write to the same stream.
            os.write(2, f"{name}: stopping after this sync ({name} again abandons it; nothing is lost)\n".encode())

    def sleep(self, seconds: float) -> None:
        """Wait `seconds`, or less when a stop is requested meanwhile."""
        deadline = time.monotonic() + seconds
        while not self.requested and (left := deadline - time.monotonic()) > 0:
            time.sleep(min(TICK_S, left))

    @contextmanager
    def installed(self) -> Iterator[None]:
        """The handlers, for the `with` block (in the main thread only, where Python runs signal handlers)."""
        previous = {number: signal.signal(number, self.handle) for number in STOP_SIGNALS}
        try:
            yield
        finally:
            for number, handler in previous.items():
                signal.signal(number, handler)


def run(
    target: Target,
    home: Project,
    store: StateStore,
    *,
    interval_s: float,
    once: bool = False,
    notify: Notify,
    reported: Callable[[PassReport], None],
) -> int:
    """Sync every `interval_s` until stopped (or once); the exit status: 0, or 1 when `once` and the pass failed."""
    stop = Stop()
    requeues = Requeues()
    with stop.installed():
        while True:
            started = time.monotonic()
            stop.busy = True
            try:
                report = sync_pass(target, home, store, notify)
            finally:
                stop.busy = False
            reported(report)
            if once:
                return 0 if report.ok else 1
            between_passes(stop, requeues, home, store, interval_s - (time.monotonic() - started), notify)
            if stop.requested:
                notify("stopped", f"{stop.requested}: stopped")
                return 0


def between_passes(
    stop: Stop, requeues: Requeues, home: Project, store: StateStore, seconds: float, notify: Notify
) -> None:
    """Wait `seconds` (less when stopped), waking when a requeued job is due to reconcile it again."""
    deadline = time.monotonic() + seconds
    while not stop.requested:
        for text in requeues.look(home, store, requeued_keys(store), "nodus controller: requeue"):
            notify("resource", text)
        left = deadline - time.monotonic()
        if left <= 0:
            return
        due = requeues.next_due()
        stop.sleep(left if due is None else min(left, max(due, TICK_S)))
