"""The bytes of `nodus-env grade`'s protocol: a request line out, a reply line in.

Who uses it: `Grader`, for every line it writes and every reply it reads; the evidence hashes exactly
these bytes (`inputSha256`, `outputSha256`). Both directions are on the hot path of grading, so they skip
the general `json` entry points where a cheaper way gives the same result.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from json.encoder import encode_basestring
from typing import Any

from .models import GradeRequest, MalformedReplyError

# Set up by `JSONDecoder.__init__` (the C scanner where there is one); typeshed does not declare it.
_SCAN: Callable[[str, int], tuple[Any, int]] = json.JSONDecoder().scan_once  # type: ignore[attr-defined]
"""The C scanner under `json.loads`: one JSON value from a position, without the whitespace handling around it."""


def request_line(request: GradeRequest) -> bytes:
    """`json.dumps(request.to_json(), ensure_ascii=False, separators=(",", ":"))`, UTF-8, without newline.

    Built from the strings' JSON forms (the same C function `json.dumps` uses for them): `json.dumps`
    with non-default arguments builds a new encoder per call, which costs several times more.
    """
    task = encode_basestring(request.task_id)
    if request.turns is not None:
        text = '{"taskId":' + task + ',"turns":[' + ",".join(map(encode_basestring, request.turns)) + "]}"
    else:
        assert request.completion is not None  # a GradeRequest has exactly one of them
        text = '{"taskId":' + task + ',"completion":' + encode_basestring(request.completion) + "}"
    return text.encode()


def decode_reply(line: bytes) -> Any:
    """The JSON value of one reply line, as `json.loads(line)` reads it; MalformedReplyError if it is not JSON."""
    try:
        # The usual reply (UTF-8, no whitespace around the value) goes straight to the scanner:
        # `json.loads` on bytes first guesses their encoding, then skips whitespace, which costs more than
        # the parse itself. Anything else takes the general way below, which decides as it always did.
        text = line.decode()
        value, end = _SCAN(text, 0)
        if end == len(text):
            return value
    except (ValueError, StopIteration):  # StopIteration: no JSON value starts at position 0
        pass
    try:
        return json.loads(line)
    except ValueError as exc:
        raise MalformedReplyError(f"not JSON: {line[:80]!r}") from exc
