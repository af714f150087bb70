"""The protocol's bytes: the fast ways give exactly what `json.dumps` and `json.loads` give."""

from __future__ import annotations

import json

import pytest

from nodus.reconciler.grading.models import GradeRequest, MalformedReplyError
from nodus.reconciler.grading.wire import decode_reply, request_line

AWKWARD = ['say "hi"\\n', "tab\tnew\nline\x00\x1f", "ünïcödé ✓ 😀", "", "</script>"]
LONE_SURROGATE = "\ud800"


@pytest.mark.parametrize("text", AWKWARD)
def test_a_request_line_is_the_compact_json_of_the_request(text: str) -> None:
    for request in (GradeRequest(f"t-{text}", text), GradeRequest("t", turns=(text, "second", text))):
        expected = json.dumps(request.to_json(), ensure_ascii=False, separators=(",", ":")).encode()
        assert request_line(request) == expected


def test_a_request_that_utf8_cannot_carry_fails_as_json_dumps_would() -> None:
    with pytest.raises(UnicodeEncodeError):
        json.dumps(GradeRequest("t", LONE_SURROGATE).to_json(), ensure_ascii=False).encode()
    with pytest.raises(UnicodeEncodeError):
        request_line(GradeRequest("t", LONE_SURROGATE))


@pytest.mark.parametrize(
    "line",
    [
        b'{"taskId":"t","verdict":"Correct","reward":1.0,"evidence":{"answer":"\\u00e9"}}',
        b'  {"taskId": "t", "reward": 0.5}\r',
        b'\xef\xbb\xbf{"taskId":"t"}',  # a byte-order mark, which json.loads accepts on bytes
        '{"taskId":"ü"}'.encode("utf-16"),
        b"[1, 2]",
        b"null",
    ],
)
def test_a_reply_decodes_as_json_loads_decodes_it(line: bytes) -> None:
    assert decode_reply(line) == json.loads(line)


@pytest.mark.parametrize("line", [b"this is not json", b'{"taskId":"t"} trailing', b"", b"\xff\xfe\xfd", b'{"a":'])
def test_a_reply_that_is_not_json_is_malformed(line: bytes) -> None:
    with pytest.raises(MalformedReplyError, match="not JSON"):
        decode_reply(line)
