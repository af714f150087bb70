"""The ledger's rules one by one, on SQLite and PostgreSQL: keys, limits, holds and settlement, Budgets,
idempotency, receipts, and what happens to the requests of a gateway process that is gone.

Money here: $1 per million input tokens and $2 per million output tokens (conftest's RATES), so a request holding
100 input and 50 output tokens holds 200,000 nano-dollars ($0.0002).
"""

from __future__ import annotations

import os
import subprocess
import sys
from dataclasses import replace
from decimal import Decimal
from typing import Any

import pytest

from nodus.errors import ConfigError
from nodus.reconciler.inference.endpoints import Endpoint, StoreDirectory, find_endpoint
from nodus.reconciler.inference.errors import ErrorCode, InferenceError
from nodus.reconciler.inference.ids import REQUEST_ID_RE, new_request_id
from nodus.reconciler.inference.keys import create_key, find_key, list_keys, revoke_key, secret_digest
from nodus.reconciler.inference.ledger import (
    IDEMPOTENCY_TTL_S,
    RECEIPT_TTL_S,
    Admission,
    Admitted,
    Ledger,
    ReceiptState,
    Replay,
    StoredAnswer,
    Usage,
)
from nodus.reconciler.inference.money import Rates
from nodus.reconciler.state.sql import SqlStore

from .conftest import RATES, PutEndpoint, put_budget

TEST_RATES = Rates(RATES.input_usd, RATES.output_usd)
HOLD = 200_000
"""Nano-dollars held by `admission()`'s default request (100 input, 50 output tokens)."""


def endpoint(store: SqlStore, name: str, project: str = "default") -> Endpoint:
    found = find_endpoint(StoreDirectory(store, ttl_s=0), project, name)
    assert found is not None
    return found


def admission(
    target: Endpoint,
    secret: str,
    *,
    input_tokens: int = 100,
    output_tokens: int = 50,
    idempotency_key: str | None = None,
    body: str = "body-1",
    gateway: str = "gw_test",
    rates: Rates | None = TEST_RATES,
) -> Admission:
    return Admission(
        request_id=new_request_id(),
        gateway=gateway,
        key_digest=secret_digest(secret),
        endpoint=target,
        operation="ChatCompletions",
        model="endpoint/" + target.name,
        input_tokens=input_tokens,
        output_tokens=output_tokens,
        rates=rates,
        pricebook_version="test-2026-12",
        idempotency_key=idempotency_key,
        body_sha256=body,
    )


def admitted(ledger: Ledger, request: Admission) -> Admitted:
    result = ledger.admit(request)
    assert isinstance(result, Admitted)
    return result


def refused(ledger: Ledger, request: Admission) -> InferenceError:
    with pytest.raises(InferenceError) as caught:
        ledger.admit(request)
    return caught.value


# ---- keys


def test_a_key_is_stored_as_its_hash_and_its_secret_is_shown_once(store: SqlStore) -> None:
    made = create_key(store, "app", project="default")
    assert made.secret.startswith("nds_") and len(made.secret) > 40
    rows = store.fetch_all("SELECT * FROM inference_keys")
    assert made.secret not in repr(rows) and secret_digest(made.secret) in repr(rows)
    assert find_key(store, made.secret) == made.key and find_key(store, made.secret + "x") is None
    assert [key.name for key in list_keys(store, project="default")] == ["app"]
    assert made.key.to_json()["secretHint"] == "..." + made.secret[-4:]


def test_key_names_scopes_and_revocation(store: SqlStore) -> None:
    create_key(store, "app")
    with pytest.raises(ConfigError, match="already has a key of that name"):
        create_key(store, "app")
    with pytest.raises(ConfigError, match="unknown scope"):
        create_key(store, "other", scopes=["inference:admin"])
    with pytest.raises(ConfigError, match="DNS label"):
        create_key(store, "Bad_Name")
    revoked = revoke_key(store, "app")
    assert revoked.revoked and revoke_key(store, "app").revoked_at == revoked.revoked_at
    again = create_key(store, "app")  # a revoked name may be given to a new key
    assert not again.key.revoked
    with pytest.raises(ConfigError, match="has no key of that name"):
        revoke_key(store, "nobody")


def test_the_key_is_checked_inside_the_admission(ledger: Ledger, store: SqlStore, put_endpoint: PutEndpoint) -> None:
    put_endpoint("ep", allowedKeys=["app"])
    put_endpoint("mine", project="other")
    app = create_key(store, "app").secret
    intruder = create_key(store, "intruder").secret
    elsewhere = create_key(store, "app", project="other").secret
    target = endpoint(store, "ep")
    assert refused(ledger, admission(target, "nds_wrong")).message == "invalid API key"
    error = refused(ledger, admission(target, intruder))
    assert error.code == ErrorCode.UNAUTHORIZED and error.status == 401 and "allowedKeys" in error.message
    assert "belongs to project other" in refused(ledger, admission(target, elsewhere)).message
    store.execute("UPDATE inference_keys SET scopes = 'inference:read' WHERE name = 'intruder'")
    assert "lacks the inference:invoke scope" in refused(ledger, admission(target, intruder)).message
    admitted(ledger, admission(target, app))
    revoke_key(store, "app")
    assert refused(ledger, admission(target, app)).message == "the API key app is revoked"


# ---- holds and settlement


def test_admit_holds_the_maximum_and_settle_charges_what_was_used(
    ledger: Ledger, store: SqlStore, put_endpoint: PutEndpoint, secret: str
) -> None:
    put_endpoint("ep", maxCostUSD="1.00")
    request = admission(endpoint(store, "ep"), secret)
    assert REQUEST_ID_RE.match(request.request_id)
    result = admitted(ledger, request)
    assert result.hold_nanos == HOLD and result.key_name == "app"
    running = ledger.receipt(request.request_id)
    assert running is not None and running.state == ReceiptState.RUNNING and running.amount_nanos == 0
    assert ledger.spend("default", "ep") == (0, HOLD)
    receipt = ledger.settle(request.request_id, Usage(input_tokens=40, cached_input_tokens=8, output_tokens=10))
    assert receipt is not None and receipt.state == ReceiptState.SETTLED
    assert receipt.amount_nanos == 40 * 1000 + 10 * 2000 and receipt.hold_nanos == HOLD
    assert ledger.spend("default", "ep") == (60_000, 0)
    shown = receipt.to_json()
    assert shown["amountUSD"] == "0.00006" and shown["holdUSD"] == "0.0002"
    assert shown["usage"] == {"inputTokens": 40, "cachedInputTokens": 8, "outputTokens": 10}
    assert shown["pricebookVersion"] == "test-2026-12" and shown["state"] == "Settled"
    assert shown["operation"] == "ChatCompletions" and shown["keyName"] == "app" and shown["endpoint"] == "ep"
    # Settling twice changes nothing; nor does releasing a settled request.
    assert ledger.settle(request.request_id, Usage(1000, 0, 1000)) == receipt
    assert ledger.release(request.request_id, "late") == receipt


def test_a_charge_never_passes_its_hold_and_no_tokens_is_released(
    ledger: Ledger, store: SqlStore, put_endpoint: PutEndpoint, secret: str
) -> None:
    put_endpoint("ep")
    over = admission(endpoint(store, "ep"), secret)
    admitted(ledger, over)
    receipt = ledger.settle(over.request_id, Usage(input_tokens=5000, output_tokens=50))
    assert receipt is not None and receipt.amount_nanos == HOLD and receipt.usage.input_tokens == 5000
    empty = admission(endpoint(store, "ep"), secret)
    admitted(ledger, empty)
    receipt = ledger.settle(empty.request_id, Usage())
    assert receipt is not None and receipt.state == ReceiptState.RELEASED and receipt.amount_nanos == 0
    failed = admission(endpoint(store, "ep"), secret)
    admitted(ledger, failed)
    receipt = ledger.release(failed.request_id, "upstream 503: overloaded")
    assert receipt is not None and receipt.state == ReceiptState.RELEASED and receipt.outcome.startswith("upstream")
    assert ledger.spend("default", "ep") == (HOLD, 0)
    assert ledger.settle("ireq_00000000000000000000000000", Usage(1, 0, 1)) is None


def test_the_cap_counts_settled_and_held_and_raising_it_lets_requests_through(
    ledger: Ledger, store: SqlStore, put_endpoint: PutEndpoint, secret: str
) -> None:
    put_endpoint("ep", maxCostUSD="0.0005")  # room for two holds of $0.0002, not three
    first = admission(endpoint(store, "ep"), secret)
    admitted(ledger, first)
    admitted(ledger, admission(endpoint(store, "ep"), secret))
    error = refused(ledger, admission(endpoint(store, "ep"), secret))
    assert error.code == ErrorCode.BUDGET_EXCEEDED and error.status == 402
    assert "maxCostUSD $0.0005 is spent" in error.message and "$0.0004 held" in error.message
    ledger.settle(first.request_id, Usage(input_tokens=10, output_tokens=5))  # charged $0.00002, the rest released
    admitted(ledger, admission(endpoint(store, "ep"), secret))
    refused(ledger, admission(endpoint(store, "ep"), secret))
    put_endpoint("ep", maxCostUSD="0.001")
    admitted(ledger, admission(endpoint(store, "ep"), secret))


def test_an_unpriced_model_is_free_unless_a_cap_must_count_it(
    ledger: Ledger, store: SqlStore, put_endpoint: PutEndpoint, secret: str
) -> None:
    put_endpoint("free")
    put_endpoint("capped", maxCostUSD="5.00")
    request = admission(endpoint(store, "free"), secret, rates=None)
    assert admitted(ledger, request).hold_nanos == 0
    receipt = ledger.settle(request.request_id, Usage(10, 0, 10))
    assert receipt is not None and receipt.amount_nanos == 0 and receipt.state == ReceiptState.SETTLED
    error = refused(ledger, admission(endpoint(store, "capped"), secret, rates=None))
    assert error.code == ErrorCode.UNAVAILABLE and "no per-token price" in error.message


# ---- limits


def test_max_concurrent_counts_running_requests(
    ledger: Ledger, store: SqlStore, put_endpoint: PutEndpoint, secret: str
) -> None:
    put_endpoint("ep", maxConcurrent=2)
    first = admission(endpoint(store, "ep"), secret)
    admitted(ledger, first)
    admitted(ledger, admission(endpoint(store, "ep"), secret))
    error = refused(ledger, admission(endpoint(store, "ep"), secret))
    assert error.code == ErrorCode.TOO_MANY_REQUESTS and error.status == 429 and error.retry_after == 1
    ledger.settle(first.request_id, Usage(1, 0, 1))
    admitted(ledger, admission(endpoint(store, "ep"), secret))


def test_rpm_is_a_sliding_window_and_retry_after_says_when(
    ledger: Ledger, store: SqlStore, put_endpoint: PutEndpoint, secret: str, clock: Any
) -> None:
    put_endpoint("ep", rpm=3)
    for _ in range(3):
        admitted(ledger, admission(endpoint(store, "ep"), secret))
        clock.advance(10)
    error = refused(ledger, admission(endpoint(store, "ep"), secret))
    assert error.code == ErrorCode.TOO_MANY_REQUESTS and error.retry_after == 30  # the first leaves at t=60
    assert "rpm 3 reached" in error.message and error.headers() == {"Retry-After": "30"}
    clock.advance(30.5)
    admitted(ledger, admission(endpoint(store, "ep"), secret))
    assert refused(ledger, admission(endpoint(store, "ep"), secret)).retry_after == 10


def test_tpm_counts_holds_then_the_tokens_used(
    ledger: Ledger, store: SqlStore, put_endpoint: PutEndpoint, secret: str, clock: Any
) -> None:
    put_endpoint("ep", tpm=400)
    first = admission(endpoint(store, "ep"), secret)  # 150 tokens held
    admitted(ledger, first)
    clock.advance(5)
    admitted(ledger, admission(endpoint(store, "ep"), secret))
    error = refused(ledger, admission(endpoint(store, "ep"), secret))
    assert error.code == ErrorCode.TOO_MANY_REQUESTS and "tpm 400 reached (300 tokens" in error.message
    assert error.retry_after == 55
    ledger.settle(first.request_id, Usage(input_tokens=20, output_tokens=10))  # the window now counts 30
    admitted(ledger, admission(endpoint(store, "ep"), secret))
    too_big = refused(ledger, admission(endpoint(store, "ep"), secret, output_tokens=1000))
    assert too_big.code == ErrorCode.INVALID and "more than endpoint ep's tpm of 400" in too_big.message


def test_limits_are_per_endpoint(ledger: Ledger, store: SqlStore, put_endpoint: PutEndpoint, secret: str) -> None:
    put_endpoint("a", rpm=1)
    put_endpoint("b", rpm=1)
    admitted(ledger, admission(endpoint(store, "a"), secret))
    admitted(ledger, admission(endpoint(store, "b"), secret))
    refused(ledger, admission(endpoint(store, "a"), secret))


# ---- budgets


def test_budgets_cover_endpoints_by_kind_and_selector(
    ledger: Ledger, store: SqlStore, put_endpoint: PutEndpoint, secret: str
) -> None:
    put_endpoint("support", labels={"team": "support"})
    put_endpoint("search", labels={"team": "search"})
    put_budget(store, "support-daily", "0.0003", period="Daily", selector={"team": "support"})
    put_budget(store, "training-only", "0.000001", kinds=["TrainingJob"])
    admitted(ledger, admission(endpoint(store, "support"), secret))
    error = refused(ledger, admission(endpoint(store, "support"), secret))
    assert error.code == ErrorCode.BUDGET_EXCEEDED and "Budget support-daily: its Daily limit $0.0003" in error.message
    for _ in range(3):  # neither Budget covers it
        admitted(ledger, admission(endpoint(store, "search"), secret))


@pytest.mark.parametrize(
    ("period", "admits_tomorrow", "admits_next_month"),
    [("Daily", True, True), ("Monthly", False, True), ("Total", False, False)],
)
def test_budget_periods_are_utc_days_and_months(
    ledger: Ledger,
    store: SqlStore,
    put_endpoint: PutEndpoint,
    secret: str,
    clock: Any,
    period: str,
    admits_tomorrow: bool,
    admits_next_month: bool,
) -> None:
    clock.now = 1_780_000_000.0  # 2026-05-28 20:26:40 UTC
    put_endpoint("ep")
    put_budget(store, "cap", "0.0003", period=period)
    first = admission(endpoint(store, "ep"), secret)
    admitted(ledger, first)
    ledger.settle(first.request_id, Usage(input_tokens=100, output_tokens=50))  # $0.0002 spent today
    refused(ledger, admission(endpoint(store, "ep"), secret))
    clock.now += 86_400  # 2026-05-29
    assert _admits(ledger, admission(endpoint(store, "ep"), secret)) == admits_tomorrow
    clock.now += 4 * 86_400  # 2026-06-02
    assert _admits(ledger, admission(endpoint(store, "ep"), secret)) == admits_next_month


def _admits(ledger: Ledger, request: Admission) -> bool:
    """Whether it is admitted (then released, so it holds nothing afterwards)."""
    try:
        ledger.admit(request)
    except InferenceError:
        return False
    ledger.release(request.request_id, "test")
    return True


# ---- idempotency


def test_an_idempotency_key_replays_the_answer_without_a_second_charge(
    ledger: Ledger, store: SqlStore, put_endpoint: PutEndpoint, secret: str
) -> None:
    put_endpoint("ep")
    first = admission(endpoint(store, "ep"), secret, idempotency_key="k1")
    admitted(ledger, first)
    in_progress = refused(ledger, admission(endpoint(store, "ep"), secret, idempotency_key="k1"))
    assert in_progress.code == ErrorCode.REQUEST_IN_PROGRESS and in_progress.status == 409
    assert in_progress.retry_after == 1
    reused = refused(ledger, admission(endpoint(store, "ep"), secret, idempotency_key="k1", body="body-2"))
    assert reused.code == ErrorCode.IDEMPOTENCY_KEY_REUSED and reused.status == 409
    answer = StoredAnswer(200, "application/json", '{"id":"chatcmpl-1"}')
    ledger.settle(first.request_id, Usage(10, 0, 5), answer=answer)
    replay = ledger.admit(admission(endpoint(store, "ep"), secret, idempotency_key="k1"))
    assert replay == Replay(first.request_id, answer)
    assert ledger.spend("default", "ep") == (20_000, 0)
    assert refused(ledger, admission(endpoint(store, "ep"), secret, idempotency_key="k1", body="other")).code == (
        ErrorCode.IDEMPOTENCY_KEY_REUSED
    )
    # Another API key of the project has keys of its own.
    other = create_key(store, "other").secret
    admitted(ledger, admission(endpoint(store, "ep"), other, idempotency_key="k1"))


def test_a_released_request_frees_its_key_and_keys_expire_after_a_day(
    ledger: Ledger, store: SqlStore, put_endpoint: PutEndpoint, secret: str, clock: Any
) -> None:
    put_endpoint("ep")
    failed = admission(endpoint(store, "ep"), secret, idempotency_key="k1")
    admitted(ledger, failed)
    ledger.release(failed.request_id, "upstream failed")
    retry = admission(endpoint(store, "ep"), secret, idempotency_key="k1", body="changed")
    admitted(ledger, retry)
    ledger.settle(retry.request_id, Usage(1, 0, 1), answer=StoredAnswer(200, "application/json", "{}"))
    assert isinstance(
        ledger.admit(admission(endpoint(store, "ep"), secret, idempotency_key="k1", body="changed")), Replay
    )
    clock.advance(IDEMPOTENCY_TTL_S + 1)
    admitted(ledger, admission(endpoint(store, "ep"), secret, idempotency_key="k1", body="new"))


# ---- gateways that are gone, and pruning


def test_requests_of_a_dead_gateway_become_unknown_and_are_never_charged(
    ledger: Ledger, store: SqlStore, put_endpoint: PutEndpoint, secret: str
) -> None:
    put_endpoint("ep", maxCostUSD="1.00")
    child = subprocess.Popen([sys.executable, "-c", "pass"])
    child.wait()
    dead = ledger.register_gateway("unix:/dead.sock", pid=child.pid)
    live = ledger.register_gateway("unix:/live.sock", pid=os.getpid())
    lost = admission(endpoint(store, "ep"), secret, gateway=dead, idempotency_key="k")
    kept = admission(endpoint(store, "ep"), secret, gateway=live)
    admitted(ledger, lost)
    admitted(ledger, kept)
    assert ledger.reap() == [lost.request_id]
    receipt = ledger.receipt(lost.request_id)
    assert receipt is not None and receipt.state == ReceiptState.UNKNOWN and receipt.amount_nanos == 0
    assert "ended before the request did" in receipt.outcome
    assert ledger.spend("default", "ep") == (0, HOLD)  # only the live gateway's request holds
    # Unknown frees the Idempotency-Key, and a late settle from the lost gateway charges nothing.
    admitted(ledger, admission(endpoint(store, "ep"), secret, idempotency_key="k", gateway=live))
    after = ledger.settle(lost.request_id, Usage(10, 0, 10))
    assert after is not None and after.state == ReceiptState.UNKNOWN and after.amount_nanos == 0
    assert ledger.reap() == []


def test_a_silent_gateway_of_another_host_is_reaped_after_its_heartbeat_goes_stale(
    ledger: Ledger, store: SqlStore, put_endpoint: PutEndpoint, secret: str, clock: Any
) -> None:
    put_endpoint("ep")
    elsewhere = ledger.register_gateway("http://10.0.0.9:8000", pid=1)
    store.execute("UPDATE inference_gateways SET host = 'another-host' WHERE id = ?", (elsewhere,))
    request = admission(endpoint(store, "ep"), secret, gateway=elsewhere)
    admitted(ledger, request)
    clock.advance(20)
    assert ledger.reap(stale_after_s=30) == []
    ledger.heartbeat(elsewhere)
    clock.advance(25)
    assert ledger.reap(stale_after_s=30) == []
    clock.advance(10)
    assert ledger.reap(stale_after_s=30) == [request.request_id]
    receipt = ledger.receipt(request.request_id)
    assert receipt is not None and "silent for 35 s" in receipt.outcome


def test_a_gateway_that_retires_leaves_nothing_running(
    ledger: Ledger, store: SqlStore, put_endpoint: PutEndpoint, secret: str
) -> None:
    put_endpoint("ep")
    gateway = ledger.register_gateway("unix:/g.sock", pid=os.getpid())
    request = admission(endpoint(store, "ep"), secret, gateway=gateway)
    admitted(ledger, request)
    assert ledger.retire(gateway, "the gateway stopped before the request ended") == [request.request_id]
    assert ledger.spend("default", "ep") == (0, 0)
    assert [g.stopped_at is not None for g in ledger.gateways()] == [True]


def test_receipts_are_kept_30_days_and_spend_stays_counted(
    ledger: Ledger, store: SqlStore, put_endpoint: PutEndpoint, secret: str, clock: Any
) -> None:
    put_endpoint("ep", maxCostUSD="0.0003")
    request = admission(endpoint(store, "ep"), secret)
    admitted(ledger, request)
    ledger.settle(request.request_id, Usage(100, 0, 50))
    clock.advance(RECEIPT_TTL_S - 1)
    assert ledger.prune() == 0 and ledger.receipt(request.request_id) is not None
    clock.advance(2)
    assert ledger.prune() == 1 and ledger.receipt(request.request_id) is None
    assert ledger.spend("default", "ep") == (HOLD, 0)
    refused(ledger, admission(endpoint(store, "ep"), secret))


def test_an_endpoint_snapshot_is_what_the_ledger_enforces(
    ledger: Ledger, store: SqlStore, put_endpoint: PutEndpoint, secret: str
) -> None:
    put_endpoint("ep")
    target = replace(endpoint(store, "ep"), max_cost_usd=Decimal("0.0001"))
    assert refused(ledger, admission(target, secret)).code == ErrorCode.BUDGET_EXCEEDED
