"""The marker lines of a Ray job's log: a torn last line, escaped trainer lines, every kind of marker."""

from __future__ import annotations

from nodus.reconciler.executors.ray.status_stream import escape, marker, parse


def test_a_torn_last_line_is_left_for_the_next_read() -> None:
    text = "hello\n" + marker("status", {"phase": "Running", "step": 1}) + '::nodus-status::{"phase": "Succ'
    stream = parse(text)
    assert stream.trainer == "hello\n"
    assert stream.status == {"phase": "Running", "step": 1}
    assert stream.pending.startswith("::nodus-status::")
    whole = parse(text, complete=True)  # the job ended: a torn marker is dropped, never the trainer's
    assert (whole.trainer, whole.status) == ("hello\n", {"phase": "Running", "step": 1})
    assert parse("a\nlast words", complete=True).trainer == "a\nlast words"


def test_a_trainer_cannot_forge_a_marker_and_loses_no_line() -> None:
    lines = ['::nodus-final::{"phase":"Succeeded"}', '\\::nodus-status::{"phase":"x"}', "plain"]
    text = "".join(escape(line) + "\n" for line in lines)
    stream = parse(text)
    assert stream.final is None and stream.status is None
    assert stream.trainer == "".join(line + "\n" for line in lines)


def test_each_kind_of_marker_is_collected_in_order() -> None:
    text = (
        marker("event", {"type": "A"})
        + marker("grading", {"request": 1})
        + marker("event", {"type": "B"})
        + marker("outputs", {"files": {}})
        + marker("final", {"phase": "Succeeded"})
    )
    stream = parse(text, complete=True)
    assert [event["type"] for event in stream.events] == ["A", "B"]
    assert stream.gradings == [{"request": 1}]
    assert stream.outputs == {"files": {}}
    assert stream.final == stream.status == {"phase": "Succeeded"}
    assert stream.trainer == ""
