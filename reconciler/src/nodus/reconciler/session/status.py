"""A job's status document while its session runs: one writer, every write the whole document.

Who uses it: `JobSession` (progress reports, the platform's summary, cost, the end of the session) and whoever
drives the session (the local supervisor: pids, heartbeats, the trainer's start). It holds the document in
memory under a lock and hands each new version to the sink (status.json for the local supervisor); events go
both into the document (the last `STATUS_EVENTS`) and to the sink's event log (all of them).
"""

from __future__ import annotations

import threading
import time
from collections.abc import Mapping
from typing import Any, Final

from .sink import SessionSink
from .summary import PLATFORM_SUMMARY_KEYS

STATUS_EVENTS: Final = 100
"""Events kept in the status document; all of them go to the sink's event log."""


class JobStatus:
    """The status document, which this session alone writes while it runs; every write replaces the whole."""

    def __init__(self, sink: SessionSink, initial: Mapping[str, Any]) -> None:
        self.sink = sink
        self._status = dict(initial)
        self._lock = threading.Lock()

    def get(self, key: str, default: Any = None) -> Any:
        with self._lock:
            return self._status.get(key, default)

    def update(self, *, durable: bool = False, **fields: Any) -> None:
        with self._lock:
            self._status.update(fields)
            self.sink.write_status(self._status, durable=durable)

    def event(
        self,
        kind: str,
        details: Mapping[str, Any] | None = None,
        *,
        update: Mapping[str, Any] | None = None,
        durable: bool = False,
    ) -> None:
        """An event in the document (the last ones) and the event log (all), written with the `update`."""
        record = {"at": time.time(), "type": kind, **(details or {})}
        with self._lock:
            self._status.update(update or {})
            self._status["events"] = [*self._status.get("events", []), record][-STATUS_EVENTS:]
            self.sink.write_status(self._status, durable=durable)
            self.sink.append_event(record)

    def progress(self, report: Mapping[str, Any]) -> None:
        """A checked report from the trainer: stage, step and totals replace, metrics and summary merge."""
        record = {"at": time.time(), "type": "Progress", **report}
        with self._lock:
            for key in ("stage", "step", "totalSteps", "message"):
                if key in report:
                    self._status[key] = report[key]
            for key in ("metrics", "summary"):
                if key in report:
                    self._status[key] = {**self._status.get(key, {}), **report[key]}
            self._status["events"] = [*self._status.get("events", []), record][-STATUS_EVENTS:]
            self.sink.write_status(self._status, durable=False)
            self.sink.append_event(record)

    def platform_summary(self, summary: Mapping[str, Any], diagnostics: Mapping[str, Any]) -> None:
        """The platform's summary keys replace their old values; the trainer's other summary keys stay."""
        with self._lock:
            trainer = {k: v for k, v in self._status.get("summary", {}).items() if k not in PLATFORM_SUMMARY_KEYS}
            self._status["summary"] = {**summary, **trainer}
            if diagnostics:
                self._status["diagnostics"] = dict(diagnostics)
            self.sink.write_status(self._status, durable=False)
