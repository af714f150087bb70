"""What the gateway reads from a request before anything else: the body (at most 1 MiB), the API key, the
Idempotency-Key, and the body as JSON checked for repeated keys.

Who uses it: the gateway's routes (`app.py`). A repeated key in a JSON object is refused: the gateway and the
model server must read the same `max_tokens`, or a hold could be taken for fewer tokens than the model is asked
for. Exactly repeated keys are 400 Invalid; keys repeated in another letter case are 400 Unsupported (the seeds'
error table: "a key repeated in another letter case").
"""

from __future__ import annotations

import json
import re
from typing import Any

from starlette.requests import Request

from nodus.reconciler.inference.errors import ErrorCode, InferenceError, invalid, unsupported

MAX_BODY_BYTES = 1024 * 1024
IDEMPOTENCY_KEY_RE = re.compile(r"^[\x21-\x7e]{1,255}$")


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


def parse_json(raw: bytes) -> dict[str, Any]:
    """The body as a JSON object; 400 Invalid when it is not one."""
    if not raw.strip():
        raise invalid("the request body is empty: send a JSON object")
    try:
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
