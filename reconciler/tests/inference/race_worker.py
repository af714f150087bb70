"""One admission attempt as the race tests make it, importable by path from a child process.

Who uses it: test_ledger_races.py, in its threads (imported as a module of the tests) and in the child processes
it starts (loaded from this file's path: a child cannot import a test module by name under importlib mode).
Every attempt holds 100 input and 50 output tokens at $1 and $2 per million: $0.0002.
"""

from __future__ import annotations

from decimal import Decimal

from nodus.reconciler.inference.endpoints import EndpointDirectory, find_endpoint
from nodus.reconciler.inference.errors import InferenceError
from nodus.reconciler.inference.ids import new_request_id
from nodus.reconciler.inference.keys import secret_digest
from nodus.reconciler.inference.ledger import Admission, Ledger
from nodus.reconciler.inference.money import Rates

RATES = Rates(Decimal("1.00"), Decimal("2.00"))


def attempt(ledger: Ledger, directory: EndpointDirectory, secret: str, name: str) -> bool:
    """Whether a request to endpoint `name` was admitted; a refusal other than 402 or 429 fails."""
    target = find_endpoint(directory, "default", name)
    assert target is not None
    request = Admission(
        request_id=new_request_id(),
        gateway="gw_race",
        key_digest=secret_digest(secret),
        endpoint=target,
        operation="ChatCompletions",
        model=f"endpoint/{name}",
        input_tokens=100,
        output_tokens=50,
        rates=RATES,
        pricebook_version="test",
    )
    try:
        ledger.admit(request)
    except InferenceError as error:
        if error.status not in (402, 429):
            raise AssertionError(f"refused with {error.status}: {error.message}") from error
        return False
    return True
