"""Where a job session's reports go: the seam between the session and the place that keeps a job's records.

Who uses it: `JobSession` and its parts write through a `SessionSink`; the local supervisor implements it with
the job folder's files (`executors/local/supervisor.py`: status.json, logs/events.jsonl, logs/gradings.jsonl,
logs/attempt.log, logs/attempt-wire.jsonl, its own stderr); `MemorySink` keeps everything in lists, for the
session's tests and for any host that ships records elsewhere. A sink stores what it is given as given: the
session decides what the records say.
"""

from __future__ import annotations

import copy
import threading
from collections.abc import Mapping, Sequence
from typing import Any, Protocol

from .attempt_api import AttemptTranscript


class SessionSink(AttemptTranscript, Protocol):
    """What a session reports. Calls may come from several threads (the attempt API serves each connection in
    its own); each call is one whole record."""

    def write_status(self, status: Mapping[str, Any], *, durable: bool) -> None:
        """The whole status document, replacing the last one (`durable`: on disk before this returns)."""

    def append_event(self, record: Mapping[str, Any]) -> None:
        """One event (`at`, `type`, details), after every earlier one."""

    def append_gradings(self, records: Sequence[Mapping[str, Any]]) -> None:
        """The verdict records of one gradings request, numbered by `request`, in order."""

    def note(self, line: str) -> None:
        """One line worth a human's attention that is no record (a dropped task field, an ignored key)."""


class MemorySink:
    """A `SessionSink` that keeps everything in memory: the last status, and every event, verdict record,
    access line, wire record and note in order."""

    def __init__(self) -> None:
        self.status: dict[str, Any] = {}
        self.durable_writes = 0
        self.events: list[dict[str, Any]] = []
        self.gradings: list[dict[str, Any]] = []
        self.requests: list[str] = []
        self.wire: list[dict[str, Any]] = []
        self.notes: list[str] = []
        self._lock = threading.Lock()

    def write_status(self, status: Mapping[str, Any], *, durable: bool) -> None:
        with self._lock:
            self.status = copy.deepcopy(dict(status))
            self.durable_writes += durable

    def append_event(self, record: Mapping[str, Any]) -> None:
        with self._lock:
            self.events.append(copy.deepcopy(dict(record)))

    def append_gradings(self, records: Sequence[Mapping[str, Any]]) -> None:
        with self._lock:
            self.gradings.extend(copy.deepcopy(dict(r)) for r in records)

    def attempt_request(self, line: str) -> None:
        with self._lock:
            self.requests.append(line)

    def attempt_wire(self, record: Mapping[str, Any]) -> None:
        with self._lock:
            self.wire.append(copy.deepcopy(dict(record)))

    def note(self, line: str) -> None:
        with self._lock:
            self.notes.append(line)

    def event_types(self) -> list[str]:
        with self._lock:
            return [str(event["type"]) for event in self.events]
