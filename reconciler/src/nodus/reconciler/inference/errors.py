"""The errors a client of the inference gateway gets: the seeds' codes, their HTTP statuses, OpenAI's shape.

Who uses it: the ledger (`ledger.py`) refuses a request with one of these (401, 402, 409, 429); the gateway's
routes raise them for what they check themselves (400, 404, 413, 503) and turn every one into a response with
`error.payload()`. The code goes in both `type` and `code`, as the seeds' error table says.
"""

from __future__ import annotations

from enum import StrEnum
from typing import Any


class ErrorCode(StrEnum):
    """The seeds' error codes (Inference guide, "Errors"), plus NotFound for a model or receipt nobody has."""

    UNSUPPORTED = "Unsupported"
    INVALID = "Invalid"
    UNAUTHORIZED = "Unauthorized"
    NOT_FOUND = "NotFound"
    BUDGET_EXCEEDED = "BudgetExceeded"
    REQUEST_IN_PROGRESS = "RequestInProgress"
    IDEMPOTENCY_KEY_REUSED = "IdempotencyKeyReused"
    REQUEST_ENTITY_TOO_LARGE = "RequestEntityTooLarge"
    TOO_MANY_REQUESTS = "TooManyRequests"
    UNAVAILABLE = "Unavailable"


STATUS: dict[ErrorCode, int] = {
    ErrorCode.UNSUPPORTED: 400,
    ErrorCode.INVALID: 400,
    ErrorCode.UNAUTHORIZED: 401,
    ErrorCode.BUDGET_EXCEEDED: 402,
    ErrorCode.NOT_FOUND: 404,
    ErrorCode.REQUEST_IN_PROGRESS: 409,
    ErrorCode.IDEMPOTENCY_KEY_REUSED: 409,
    ErrorCode.REQUEST_ENTITY_TOO_LARGE: 413,
    ErrorCode.TOO_MANY_REQUESTS: 429,
    ErrorCode.UNAVAILABLE: 503,
}


class InferenceError(Exception):
    """A request refused or failed, with the seeds' code, a one-line message naming the field or limit first, and
    `retry_after` (seconds) where waiting helps (429, 409 RequestInProgress, 503)."""

    def __init__(
        self, code: ErrorCode, message: str, *, status: int | None = None, retry_after: int | None = None
    ) -> None:
        super().__init__(message)
        self.code = code
        self.message = message
        self.status = status if status is not None else STATUS[code]
        self.retry_after = retry_after

    def payload(self) -> dict[str, Any]:
        return {"error": {"message": self.message, "type": str(self.code), "code": str(self.code), "param": None}}

    def headers(self) -> dict[str, str]:
        return {"Retry-After": str(self.retry_after)} if self.retry_after is not None else {}


def invalid(message: str) -> InferenceError:
    return InferenceError(ErrorCode.INVALID, message)


def unsupported(message: str) -> InferenceError:
    return InferenceError(ErrorCode.UNSUPPORTED, message)


def unavailable(message: str, *, status: int = 503, retry_after: int | None = 1) -> InferenceError:
    return InferenceError(ErrorCode.UNAVAILABLE, message, status=status, retry_after=retry_after)
