"""The controller's loop: once, every interval, and stopped by SIGTERM/SIGINT (after the pass, or abandoning it)."""

from __future__ import annotations

import os
import signal
import threading
import time
from typing import Any

import pytest

from nodus.reconciler.gitops import loop
from nodus.reconciler.gitops.sync import FAILED, IN_SYNC, PassReport
from nodus.reconciler.project import Project


class Passes:
    """A stand-in for `sync_pass` that counts its calls and can do something in the middle of one."""

    def __init__(self, outcome: str = IN_SYNC, during: Any = None) -> None:
        self.count, self.outcome, self.during = 0, outcome, during

    def __call__(self, *args: Any) -> PassReport:
        self.count += 1
        if self.during is not None:
            self.during(self.count)
        return PassReport(self.outcome, None, "why" if self.outcome == FAILED else "")


def run(monkeypatch: pytest.MonkeyPatch, home: Project, passes: Passes, **options: Any) -> tuple[int, list[str]]:
    monkeypatch.setattr(loop, "sync_pass", passes)
    told: list[str] = []
    store = home.open_state()  # between passes the loop looks for requeued jobs in it
    try:
        code = loop.run(
            None,  # type: ignore[arg-type]
            home,
            store,
            notify=lambda event, text: told.append(text),
            reported=lambda report: told.append(report.outcome),
            **options,
        )
    finally:
        store.close()
    return code, told


def test_once_exits_with_the_outcome(monkeypatch: pytest.MonkeyPatch, home: Project) -> None:
    assert run(monkeypatch, home, Passes(), interval_s=60, once=True) == (0, [IN_SYNC])
    assert run(monkeypatch, home, Passes(FAILED), interval_s=60, once=True) == (1, [FAILED])


def test_passes_every_interval_until_sigterm_which_ends_the_wait_at_once(
    monkeypatch: pytest.MonkeyPatch, home: Project
) -> None:
    def stop_after_the_third(count: int) -> None:
        if count == 3:
            threading.Timer(0.3, os.kill, (os.getpid(), signal.SIGTERM)).start()

    passes = Passes(during=stop_after_the_third)
    before = signal.getsignal(signal.SIGTERM)
    started = time.monotonic()
    code, told = run(monkeypatch, home, passes, interval_s=1)
    assert code == 0 and passes.count == 3 and told[-1] == "SIGTERM: stopped"
    assert 2 <= time.monotonic() - started < 5  # two intervals, then the wait cut short
    assert signal.getsignal(signal.SIGTERM) == before  # the handlers are the loop's only while it runs


def test_a_signal_during_a_pass_lets_it_finish_and_a_second_abandons_it(
    monkeypatch: pytest.MonkeyPatch, home: Project, capfd: pytest.CaptureFixture[str]
) -> None:
    def one_signal(count: int) -> None:
        os.kill(os.getpid(), signal.SIGINT)
        time.sleep(0.05)  # the handler runs here; the pass goes on

    passes = Passes(during=one_signal)
    assert run(monkeypatch, home, passes, interval_s=60) == (0, [IN_SYNC, "SIGINT: stopped"])
    assert "SIGINT: stopping after this sync" in capfd.readouterr().err

    def two_signals(count: int) -> None:
        os.kill(os.getpid(), signal.SIGTERM)
        time.sleep(0.05)
        os.kill(os.getpid(), signal.SIGTERM)
        time.sleep(5)  # never reached: the second signal abandons the pass

    with pytest.raises(KeyboardInterrupt):
        run(monkeypatch, home, Passes(during=two_signals), interval_s=60)
