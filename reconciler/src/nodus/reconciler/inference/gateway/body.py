"""What the gateway reads from a request before anything else: the body (at most 1 MiB), the API key, the
Idempotency-Key, and the body as JSON checked for repeated keys.

Who uses it: the gateway's routes (`app.py`). A repeated key in a JSON object is refused: the gateway and the
model server must read the same `max_tokens`, or a hold could be taken for fewer tokens than the model is asked
for. Exactly repeated keys are 400 Invalid; keys repeated in another letter case are 400 Unsupported (the seeds'
error table: "a key repeated in another letter case"). Arrays and objects nested deeper than `MAX_JSON_DEPTH` are
400 Invalid, found before the JSON is parsed (`nested_deeper_than`): json's parser recurses once per level, and a
body of a million `[` would end in a RecursionError.
"""

from __future__ import annotations

import json
import re
from typing import Any

from starlette.requests import Request

from nodus.reconciler.inference.errors import ErrorCode, InferenceError, invalid, unsupported

MAX_BODY_BYTES = 1024 * 1024
MAX_JSON_DEPTH = 64
"""How deeply a body's arrays and objects may nest (the body itself is level 1): a chat with content parts and a
tool whose JSON schema nests 20 objects deep stays far under it."""
IDEMPOTENCY_KEY_RE = re.compile(r"^[\x21-\x7e]{1,255}$")
_NOT_STRUCTURE = bytes(set(range(256)) - set(b'[]{}"\\'))
"""Every byte but brackets, the quote and the backslash: deleted before the brackets are counted."""
_PARENTHESES = bytes.maketrans(b"[]{}", b"()()")


def too_large(limit: int) -> InferenceError:
    return InferenceError(
        ErrorCode.REQUEST_ENTITY_TOO_LARGE, f"the request body is over {limit // 1024} KiB ({limit} bytes)"
    )


async def read_body(request: Request, limit: int = MAX_BODY_BYTES) -> bytes:
    """The raw body; 413 as soon as it (or its Content-Length) passes `limit`."""
    declared = request.headers.get("content-length")
    if declared is not None and declared.isdigit() and int(declared) > limit:
        raise too_large(limit)
    chunks: list[bytes] = []
    size = 0
    async for chunk in request.stream():
        size += len(chunk)
        if size > limit:
            raise too_large(limit)
        chunks.append(chunk)
    return b"".join(chunks)


def _object(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    seen: dict[str, str] = {}
    for key, _ in pairs:
        folded = key.casefold()
        if folded in seen:
            if seen[folded] == key:
                raise invalid(f"{key}: the key is repeated in one JSON object")
            raise unsupported(f"{key}: the key is repeated in another letter case ({seen[folded]})")
        seen[folded] = key
    return dict(pairs)


def nested_deeper_than(data: bytes, limit: int) -> bool:
    """Whether JSON text (UTF-8) nests arrays and objects more than `limit` deep (brackets inside strings are
    text), without recursion and with bytes operations only (C loops, no Python loop per byte). Text that is not
    JSON may be found deeper than json would go before it gives up, never shallower.

    A body with at most `limit` opening brackets is let through after one pass of `bytes.translate` (the common
    case). Otherwise escaped backslashes, then escaped quotes, are dropped (in valid JSON a backslash is only ever in
    a string, and these are the only escapes that change where one ends), every byte but brackets and quotes
    deleted, then every `""` (an empty string, or the end of one and the start of the next: the brackets left
    outside strings are the same), what is between quotes dropped, and the brackets left are read as parentheses,
    of which every innermost pair `()` is removed, once per pass: a pass takes one level off every nesting, so
    balanced text is as deep as the passes that empty it. What is left when a pass removes nothing is `)))(((`,
    unmatched brackets of text that is not JSON: it is no deeper than its opening ones plus the passes made.
    UTF-8 never has these bytes inside another character."""
    structure = data.translate(None, _NOT_STRUCTURE)
    if structure.count(b"[") + structure.count(b"{") <= limit:
        return False
    if b"\\" in structure:
        structure = data.replace(b"\\\\", b"").replace(b'\\"', b"").translate(None, _NOT_STRUCTURE)
        structure = structure.replace(b"\\", b"")
    structure = structure.replace(b'""', b"")
    brackets = b"".join(structure.split(b'"')[::2]).translate(_PARENTHESES)
    if brackets.count(b"(") <= limit:
        return False
    passes = 0
    while brackets:
        reduced = brackets.replace(b"()", b"")
        if len(reduced) == len(brackets):
            break
        passes += 1
        if passes > limit:
            return True
        brackets = reduced
    return brackets.count(b"(") + passes > limit


def parse_json(raw: bytes) -> dict[str, Any]:
    """The body as a JSON object; 400 Invalid when it is not one, or nests deeper than `MAX_JSON_DEPTH`."""
    if not raw.strip():
        raise invalid("the request body is empty: send a JSON object")
    try:
        encoding = json.detect_encoding(raw)  # as json.loads reads bytes; UTF-16 and 32 are read as UTF-8 here
        utf8 = (
            raw
            if encoding.startswith("utf-8")
            else raw.decode(encoding, "surrogatepass").encode("utf-8", "surrogatepass")
        )
        if nested_deeper_than(utf8, MAX_JSON_DEPTH):
            raise invalid(f"the request body nests arrays and objects deeper than {MAX_JSON_DEPTH} levels")
        document = json.loads(raw, object_pairs_hook=_object)
    except (ValueError, UnicodeDecodeError) as error:  # the hook's InferenceError passes through
        raise invalid(f"the request body is not JSON ({error})") from None
    if not isinstance(document, dict):
        raise invalid("the request body must be a JSON object")
    return document


def api_key(request: Request) -> str:
    """The secret from `Authorization: Bearer KEY` (OpenAI's clients) or `x-api-key: KEY` (Anthropic's)."""
    authorization = request.headers.get("authorization", "")
    scheme, _, secret = authorization.partition(" ")
    if scheme.lower() == "bearer" and secret.strip():
        return secret.strip()
    alternative = request.headers.get("x-api-key", "").strip()
    if alternative:
        return alternative
    raise InferenceError(ErrorCode.UNAUTHORIZED, "missing API key: send Authorization: Bearer KEY")


def idempotency_key(request: Request) -> str | None:
    values = request.headers.getlist("idempotency-key")
    if not values:
        return None
    if len(values) > 1:
        raise invalid("Idempotency-Key: send the header once")
    if not IDEMPOTENCY_KEY_RE.match(values[0]):
        raise invalid("Idempotency-Key: 1 to 255 printable ASCII characters")
    return values[0]
