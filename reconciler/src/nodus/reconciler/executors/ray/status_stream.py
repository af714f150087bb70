"""The node session's marker lines in a Ray job's log: written on the node, parsed on the controller's host.

Who uses it: `node_session` writes them (`marker`, `escape`) to its stdout, which is the Ray job's log; `RayExecutor`
reads that log back through the Jobs API and splits it (`parse`) into what the user's trainer wrote and what the
session reported, so that the controller follows a job through Ray's job logs alone (no shared filesystem).

A marker is one whole line `::nodus-KIND::{json}`:

    status   the job's status.json as the session has it now, without its events (on each change)
    event    one record of the job's events log, in order
    grading  one record of its gradings log, in order
    outputs  the output manifest of a generation that succeeded (`path -> {sha256, size}`, and `skipped`)
    final    the status the session ended with; nothing is written after it

A trainer line that starts like a marker is written with one more leading backslash (`escape`), and `parse`
removes it again, so a trainer can neither forge a status nor lose a line. The log is read while it is written:
a last line without its newline is left for the next read (it may be half a marker).
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Final

MARK: Final = "::nodus-"
KINDS: Final = frozenset({"status", "event", "grading", "outputs", "final"})
_MARKER: Final = re.compile(r"::nodus-(?P<kind>[a-z]+)::(?P<body>\{.*\})")
_ESCAPED: Final = re.compile(r"\\+::nodus-")


def marker(kind: str, record: Mapping[str, Any]) -> str:
    """One marker line (with its newline)."""
    if kind not in KINDS:
        raise ValueError(f"not a marker kind: {kind}")
    return f"{MARK}{kind}::{json.dumps(record, separators=(',', ':'), ensure_ascii=True)}\n"


def escape(line: str) -> str:
    """A trainer's line as the session writes it: one more backslash before one that looks like a marker."""
    if line.startswith(MARK) or _ESCAPED.match(line):
        return "\\" + line
    return line


@dataclass
class Stream:
    """A Ray job's log, split: the trainer's text (markers taken out, escapes undone), the latest status, every
    event and grading in order, the output manifest and the final status, if written yet."""

    trainer: str = ""
    status: dict[str, Any] | None = None
    events: list[dict[str, Any]] = field(default_factory=list)
    gradings: list[dict[str, Any]] = field(default_factory=list)
    outputs: dict[str, Any] | None = None
    final: dict[str, Any] | None = None
    pending: str = ""
    """A last line without its newline, not parsed yet."""


def parse(text: str, *, complete: bool = False) -> Stream:
    """Split a job's log. `complete`: the log is whole (its job ended), so a last line without a newline is the
    trainer's (a torn marker stays out: the session died writing it)."""
    stream = Stream()
    lines = text.split("\n")
    last = lines.pop()  # "" when the text ends with a newline
    trainer: list[str] = []
    for line in lines:
        _take(stream, line, trainer)
    if last:
        if complete and not last.startswith(MARK):
            trainer.append(unescape(last))
        elif not complete:
            stream.pending = last
    stream.trainer = "".join(f"{line}\n" for line in trainer)
    if complete and last and not last.startswith(MARK):
        stream.trainer = stream.trainer[:-1]  # it had no newline
    return stream


def read_marker(line: str) -> tuple[str, dict[str, Any]] | None:
    """(kind, record) of a marker line (without its newline); None for a trainer's line. A torn marker (its
    session died writing it) is read as a marker of no record: `("", {})`."""
    found = _MARKER.fullmatch(line)
    if found is None or found["kind"] not in KINDS:
        return None
    try:
        record = json.loads(found["body"])
    except ValueError:
        return "", {}  # a marker the session wrote cannot be malformed but when torn and followed on: drop it
    return (found["kind"], record) if isinstance(record, dict) else ("", {})


def _take(stream: Stream, line: str, trainer: list[str]) -> None:
    found = read_marker(line)
    if found is None:
        trainer.append(unescape(line))
        return
    kind, record = found
    if not kind:
        return
    if kind == "status":
        stream.status = record
    elif kind == "event":
        stream.events.append(record)
    elif kind == "grading":
        stream.gradings.append(record)
    elif kind == "outputs":
        stream.outputs = record
    else:
        stream.final = record
        stream.status = record


def unescape(line: str) -> str:
    """A trainer's line as it wrote it (`escape` undone)."""
    return line[1:] if _ESCAPED.match(line) else line
