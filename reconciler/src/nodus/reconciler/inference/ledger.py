"""The inference ledger: admit a request or refuse it, hold its maximum cost, settle what it used, keep receipts.

Who uses it: the gateway (`admit` before it forwards a request, `settle` / `release` / `abandon` when it knows
how it ended, `receipt` for `GET /v1/requests/{id}`, and its housekeeping: `register_gateway`, `heartbeat`,
`reap`, `prune`, `retire`), and `nodus.reconciler.inference.api` (receipts and reaping for the CLI and the
InferenceEndpoint controller). Its tables are migration 3 of the state store (`state/migrations.py`).

Why it is safe with many gateway processes: `admit` runs in ONE transaction of the state store that holds the
store's writer lock from its first statement (`SqlStore.write_transaction`: SQLite's BEGIN IMMEDIATE, the serial
row lock on PostgreSQL). Inside it, it checks the key, the idempotency key, `maxConcurrent`, `rpm`, `tpm`, the
endpoint's `maxCostUSD` and every project Budget covering the endpoint against what the store holds now, and
writes the request's hold before the lock is let go. So no two admissions interleave, whatever process or host
they come from, and the hold is taken BEFORE the request runs: concurrent requests cannot slip past a cap.

A request's life, as its receipt's `state`:
- `Running`: admitted; its hold (the most it may cost) counts against the cap and the Budgets;
- `Settled`: charged for the tokens it used (input, cached input, output; never more than its hold), the rest
  of the hold released; a stream cut early is charged for the tokens it produced;
- `Released`: ended with no tokens (the model failed, was unreachable, or refused it): no charge;
- `Unknown`: its outcome was never learned (the gateway process holding it died, or stopped first): never
  charged, the hold released.
Released and Unknown free the request's Idempotency-Key. Receipts are kept 30 days (`prune`); what an endpoint
spent stays counted after that (`inference_endpoint_spend`, `inference_daily_spend`).
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from decimal import Decimal
from enum import StrEnum
from typing import Any

from nodus.reconciler.inference import budgets, windows
from nodus.reconciler.inference.endpoints import Endpoint
from nodus.reconciler.inference.errors import ErrorCode, InferenceError, invalid, unavailable
from nodus.reconciler.inference.ids import new_gateway_id
from nodus.reconciler.inference.keys import SCOPE_INVOKE
from nodus.reconciler.inference.money import Rates, usd_text, usd_to_nanos
from nodus.reconciler.inference.processes import host_identity, process_alive, process_start
from nodus.reconciler.state.sql import Row, SqlStore

IDEMPOTENCY_TTL_S = 24 * 3600.0
RECEIPT_TTL_S = 30 * 24 * 3600.0
HEARTBEAT_S = 5.0
"""How often a gateway process writes its heartbeat."""
STALE_AFTER_S = 30.0
"""A gateway silent this long is gone: its Running requests become Unknown (another host's cannot be checked)."""
GATEWAY_ROWS_KEPT_S = 24 * 3600.0
IN_PROGRESS_RETRY_S = 1


class ReceiptState(StrEnum):
    RUNNING = "Running"
    SETTLED = "Settled"
    RELEASED = "Released"
    UNKNOWN = "Unknown"


@dataclass(frozen=True)
class Usage:
    input_tokens: int = 0
    cached_input_tokens: int = 0
    """Part of input_tokens the model server read from its prefix cache (charged at the input rate)."""
    output_tokens: int = 0

    @property
    def total(self) -> int:
        return self.input_tokens + self.output_tokens

    def to_json(self) -> dict[str, int]:
        return {
            "inputTokens": self.input_tokens,
            "cachedInputTokens": self.cached_input_tokens,
            "outputTokens": self.output_tokens,
        }


@dataclass(frozen=True)
class StoredAnswer:
    """What a request answered, kept with its receipt when it carried an Idempotency-Key (replayed as is)."""

    status: int
    media_type: str
    body: str


@dataclass(frozen=True)
class Admission:
    """What the gateway asks the ledger to admit."""

    request_id: str
    gateway: str
    key_digest: str
    """sha256 of the API key's secret (`keys.secret_digest`)."""
    endpoint: Endpoint
    operation: str
    model: str
    """The model the client named (receipts show it)."""
    input_tokens: int
    """The upper bound of the request's input tokens the hold covers."""
    output_tokens: int
    """The most output tokens it may produce (max_tokens, or the context window)."""
    rates: Rates | None
    """None: the model has no price in the table (charged $0; refused where a cap or Budget must count it)."""
    pricebook_version: str
    idempotency_key: str | None = None
    body_sha256: str = ""

    @property
    def tokens(self) -> int:
        return self.input_tokens + self.output_tokens

    def hold_nanos(self) -> int:
        return self.rates.cost_nanos(self.input_tokens, self.output_tokens) if self.rates else 0


@dataclass(frozen=True)
class Admitted:
    request_id: str
    key_name: str
    hold_nanos: int


@dataclass(frozen=True)
class Replay:
    """The stored answer of an earlier request with the same Idempotency-Key and body."""

    request_id: str
    answer: StoredAnswer


@dataclass(frozen=True)
class Receipt:
    id: str
    project: str
    endpoint: str
    key_name: str
    operation: str
    model: str
    state: ReceiptState
    usage: Usage
    amount_nanos: int
    hold_nanos: int
    pricebook_version: str
    admitted_at: float
    finished_at: float | None
    idempotency_key: str | None
    outcome: str

    def to_json(self) -> dict[str, Any]:
        """The receipt as `GET /v1/requests/{id}` and `nodus inference receipt -o json` show it."""
        return {
            "id": self.id,
            "object": "inference.request",
            "operation": self.operation,
            "model": self.model,
            "project": self.project,
            "endpoint": self.endpoint,
            "keyName": self.key_name,
            "state": str(self.state),
            "usage": self.usage.to_json(),
            "amountUSD": usd_text(self.amount_nanos),
            "holdUSD": usd_text(self.hold_nanos),
            "pricebookVersion": self.pricebook_version,
            "createdAt": _iso(self.admitted_at),
            "finishedAt": _iso(self.finished_at) if self.finished_at is not None else None,
            "idempotencyKey": self.idempotency_key,
            "outcome": self.outcome,
        }


@dataclass(frozen=True)
class GatewayProcess:
    id: str
    host: str
    pid: int
    process_start: str
    listen: str
    started_at: float
    heartbeat_at: float
    stopped_at: float | None


def _iso(moment: float) -> str:
    return datetime.fromtimestamp(moment, UTC).isoformat(timespec="milliseconds").replace("+00:00", "Z")


_RECEIPT_COLUMNS = (
    "id, project, endpoint, key_name, operation, model, state, admitted_at, finished_at, input_tokens, "
    "cached_input_tokens, output_tokens, amount_nanos, hold_nanos, pricebook_version, idempotency_key, outcome"
)
_GATEWAY_COLUMNS = "id, host, pid, process_start, listen, started_at, heartbeat_at, stopped_at"


def _receipt(row: Row) -> Receipt:
    return Receipt(
        id=row[0],
        project=row[1],
        endpoint=row[2],
        key_name=row[3],
        operation=row[4],
        model=row[5],
        state=ReceiptState(row[6]),
        admitted_at=float(row[7]),
        finished_at=None if row[8] is None else float(row[8]),
        usage=Usage(int(row[9]), int(row[10]), int(row[11])),
        amount_nanos=int(row[12]),
        hold_nanos=int(row[13]),
        pricebook_version=row[14],
        idempotency_key=row[15],
        outcome=row[16],
    )


def _gateway(row: Row) -> GatewayProcess:
    return GatewayProcess(
        row[0],
        row[1],
        int(row[2]),
        row[3],
        row[4],
        float(row[5]),
        float(row[6]),
        None if row[7] is None else float(row[7]),
    )


def _rate_text(value: Decimal | None) -> str:
    return "" if value is None else str(value)


def _rates(input_text: str, output_text: str) -> Rates | None:
    if not input_text:
        return None
    return Rates(Decimal(input_text), Decimal(output_text))


def key_refusal(project: str, name: str, scopes: Sequence[str], endpoint: Endpoint | None) -> InferenceError | None:
    """Why a live key (of `project`, named `name`, with `scopes`) may not call `endpoint`, or None when it may:
    401 for a key of another project, without the invoke scope, or not among the endpoint's `allowedKeys`
    (`endpoint` None: the scope alone). The gateway asks before it answers anything else (a phase, a limit, a
    body's mistakes); `admit` asks again inside its transaction."""
    if endpoint is not None and project != endpoint.project:
        return InferenceError(
            ErrorCode.UNAUTHORIZED, f"the API key {name} belongs to project {project}, not {endpoint.project}"
        )
    if SCOPE_INVOKE not in scopes:
        return InferenceError(ErrorCode.UNAUTHORIZED, f"the API key {name} lacks the {SCOPE_INVOKE} scope")
    if endpoint is not None and endpoint.allowed_keys and name not in endpoint.allowed_keys:
        return InferenceError(
            ErrorCode.UNAUTHORIZED, f"endpoint {endpoint.name} does not take the API key {name} (allowedKeys)"
        )
    return None


class Ledger:
    """The ledger over one state store (SQLite or PostgreSQL); safe from many threads and processes at once."""

    def __init__(self, store: SqlStore, *, clock: Callable[[], float] = time.time) -> None:
        self.store = store
        self._clock = clock

    # ---- admission

    def admit(self, request: Admission) -> Admitted | Replay:
        """Admit `request` (its hold written, state Running) or return the stored answer it repeats; otherwise
        raise InferenceError with the seeds' code: 401 Unauthorized, 409 IdempotencyKeyReused or
        RequestInProgress, 429 TooManyRequests, 402 BudgetExceeded (503 Unavailable for an unpriced model that
        a cap must count; 400 Invalid for a request bigger than the endpoint's whole tpm)."""
        endpoint = request.endpoint
        store = self.store
        with store.write_transaction():
            now = self._clock()
            key_name = self._check_key(request)
            if request.idempotency_key is not None:
                replay = self._check_idempotency(request, key_name, now)
                if replay is not None:
                    return replay
            spend = self._endpoint_spend(endpoint)
            self._check_limits(request, spend, now)
            self._check_money(request, spend, now)
            self._insert(request, key_name, now)
        return Admitted(request.request_id, key_name, request.hold_nanos())

    def _check_key(self, request: Admission) -> str:
        row = self.store.fetch_one(
            "SELECT project, name, scopes, revoked_at FROM inference_keys WHERE secret_sha256 = ?",
            (request.key_digest,),
        )
        endpoint = request.endpoint
        if row is None:
            raise InferenceError(ErrorCode.UNAUTHORIZED, "invalid API key")
        project, name, scopes, revoked_at = row
        if revoked_at is not None:
            raise InferenceError(ErrorCode.UNAUTHORIZED, f"the API key {name} is revoked")
        refusal = key_refusal(str(project), str(name), str(scopes).split(), endpoint)
        if refusal is not None:
            raise refusal
        return str(name)

    def _check_idempotency(self, request: Admission, key_name: str, now: float) -> Replay | None:
        store = self.store
        where = (request.endpoint.project, key_name, request.idempotency_key)
        row = store.fetch_one(
            "SELECT body_sha256, request_id, created_at FROM inference_idempotency "
            "WHERE project = ? AND key_name = ? AND idempotency_key = ?",
            where,
        )
        if row is None:
            return None
        body_sha256, request_id, created_at = row
        earlier = store.fetch_one(
            "SELECT state, answer_status, answer_type, answer_body FROM inference_requests WHERE id = ?", (request_id,)
        )
        live = float(created_at) > now - IDEMPOTENCY_TTL_S and earlier is not None
        if live and earlier is not None and earlier[0] in (ReceiptState.RUNNING, ReceiptState.SETTLED):
            if body_sha256 != request.body_sha256:
                raise InferenceError(
                    ErrorCode.IDEMPOTENCY_KEY_REUSED,
                    f"Idempotency-Key {request.idempotency_key!r} was used for a different request ({request_id}); "
                    "send a new key",
                )
            if earlier[0] == ReceiptState.RUNNING:
                raise InferenceError(
                    ErrorCode.REQUEST_IN_PROGRESS,
                    f"Idempotency-Key {request.idempotency_key!r}: request {request_id} is still running",
                    retry_after=IN_PROGRESS_RETRY_S,
                )
            if earlier[1] is not None:
                return Replay(str(request_id), StoredAnswer(int(earlier[1]), str(earlier[2]), str(earlier[3])))
        # Expired, or its request ended without an answer to replay (Released, Unknown): the key is free again.
        store.execute(
            "DELETE FROM inference_idempotency WHERE project = ? AND key_name = ? AND idempotency_key = ?", where
        )
        return None

    def _endpoint_spend(self, endpoint: Endpoint) -> tuple[int, int, int]:
        """(settled, held, running) of the endpoint, its row made and its labels brought up to date."""
        store = self.store
        labels = endpoint.labels_json()
        store.execute(
            "INSERT INTO inference_endpoint_spend (project, endpoint, labels, settled_nanos, held_nanos, running) "
            "VALUES (?, ?, ?, 0, 0, 0) ON CONFLICT (project, endpoint) DO NOTHING",
            (endpoint.project, endpoint.name, labels),
        )
        row = store.fetch_one(
            "SELECT settled_nanos, held_nanos, running, labels FROM inference_endpoint_spend "
            "WHERE project = ? AND endpoint = ?",
            (endpoint.project, endpoint.name),
        )
        assert row is not None  # inserted above, under the writer lock
        if row[3] != labels:
            store.execute(
                "UPDATE inference_endpoint_spend SET labels = ? WHERE project = ? AND endpoint = ?",
                (labels, endpoint.project, endpoint.name),
            )
        return int(row[0]), int(row[1]), int(row[2])

    def _check_limits(self, request: Admission, spend: tuple[int, int, int], now: float) -> None:
        endpoint = request.endpoint
        _, _, running = spend
        if endpoint.max_concurrent is not None and running >= endpoint.max_concurrent:
            raise InferenceError(
                ErrorCode.TOO_MANY_REQUESTS,
                f"endpoint {endpoint.name}: maxConcurrent {endpoint.max_concurrent} requests are running",
                retry_after=1,
            )
        if endpoint.rpm is None and endpoint.tpm is None:
            return
        if endpoint.tpm is not None and request.tokens > endpoint.tpm:
            raise invalid(
                f"max_tokens: this request may use up to {request.tokens} tokens, more than endpoint "
                f"{endpoint.name}'s tpm of {endpoint.tpm}; lower max_tokens"
            )
        rows = self.store.fetch_all(
            "SELECT admitted_at, window_tokens FROM inference_requests "
            "WHERE project = ? AND endpoint = ? AND admitted_at > ?",
            (endpoint.project, endpoint.name, now - windows.WINDOW_S),
        )
        entries = sorted((float(row[0]), int(row[1])) for row in rows)
        if endpoint.rpm is not None:
            wait = windows.rpm_retry_after([at for at, _ in entries], endpoint.rpm, now)
            if wait is not None:
                raise InferenceError(
                    ErrorCode.TOO_MANY_REQUESTS,
                    f"endpoint {endpoint.name}: rpm {endpoint.rpm} reached ({len(entries)} requests in the last "
                    f"60 s); retry after {wait} s",
                    retry_after=wait,
                )
        if endpoint.tpm is not None:
            wait = windows.tpm_retry_after(entries, request.tokens, endpoint.tpm, now)
            if wait is not None:
                used = sum(tokens for _, tokens in entries)
                raise InferenceError(
                    ErrorCode.TOO_MANY_REQUESTS,
                    f"endpoint {endpoint.name}: tpm {endpoint.tpm} reached ({used} tokens in the last 60 s, and "
                    f"this request may use up to {request.tokens}); retry after {wait} s",
                    retry_after=wait,
                )

    def _check_money(self, request: Admission, spend: tuple[int, int, int], now: float) -> None:
        endpoint = request.endpoint
        hold = request.hold_nanos()
        rules = [
            rule
            for rule in budgets.budget_rules(self.store.list(budgets.KIND, endpoint.project))
            if rule.covers(endpoint.labels)
        ]
        if request.rates is None and (endpoint.max_cost_usd is not None or rules):
            capped_by = f"maxCostUSD of endpoint {endpoint.name}" if endpoint.max_cost_usd is not None else ""
            capped_by = capped_by or f"Budget {rules[0].name}"
            raise unavailable(
                f"model {endpoint.price_model} has no per-token price in the price table ({request.pricebook_version}"
                f"), so the {capped_by} cannot count it: add inference.{endpoint.price_model} to prices.yaml",
                retry_after=None,
            )
        settled, held, _ = spend
        if endpoint.max_cost_usd is not None:
            cap = usd_to_nanos(endpoint.max_cost_usd)
            if settled + held + hold > cap:
                raise InferenceError(
                    ErrorCode.BUDGET_EXCEEDED,
                    f"endpoint {endpoint.name}: maxCostUSD ${usd_text(cap)} is spent (${usd_text(settled)} charged, "
                    f"${usd_text(held)} held by running requests, and this request holds up to ${usd_text(hold)}); "
                    "raise maxCostUSD or lower max_tokens",
                )
        for rule in rules:
            rule_settled, rule_held = self._budget_spend(endpoint.project, rule, now)
            if rule_settled + rule_held + hold > rule.limit_nanos:
                raise InferenceError(
                    ErrorCode.BUDGET_EXCEEDED,
                    f"Budget {rule.name}: its {rule.period} limit ${usd_text(rule.limit_nanos)} is spent "
                    f"(${usd_text(rule_settled)} charged, ${usd_text(rule_held)} held by running requests, and this "
                    f"request holds up to ${usd_text(hold)}); raise limitUSD or lower max_tokens",
                )

    def _budget_spend(self, project: str, rule: budgets.BudgetRule, now: float) -> tuple[int, int]:
        """(settled in the rule's period, held now) over the project's endpoints the rule covers."""
        store = self.store
        covered: dict[str, int] = {}
        for name, labels, held in store.fetch_all(
            "SELECT endpoint, labels, held_nanos FROM inference_endpoint_spend WHERE project = ?", (project,)
        ):
            if rule.covers(_labels(labels)):
                covered[str(name)] = int(held)
        rows = store.fetch_all(
            "SELECT endpoint, SUM(settled_nanos) FROM inference_daily_spend WHERE project = ? AND day >= ? "
            "GROUP BY endpoint",
            (project, budgets.period_start(rule.period, now)),
        )
        settled = sum(int(total) for name, total in rows if str(name) in covered)
        return settled, sum(covered.values())

    def _insert(self, request: Admission, key_name: str, now: float) -> None:
        store = self.store
        endpoint = request.endpoint
        hold = request.hold_nanos()
        rates = request.rates
        store.execute(
            "INSERT INTO inference_requests (id, project, endpoint, key_name, operation, model, state, gateway, "
            "admitted_at, day, held_input_tokens, held_output_tokens, hold_nanos, window_tokens, "
            "input_usd_per_million, output_usd_per_million, pricebook_version, idempotency_key) "
            "VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
            (
                request.request_id,
                endpoint.project,
                endpoint.name,
                key_name,
                request.operation,
                request.model,
                ReceiptState.RUNNING,
                request.gateway,
                now,
                budgets.utc_day(now),
                request.input_tokens,
                request.output_tokens,
                hold,
                request.tokens,
                _rate_text(rates.input_usd_per_million if rates else None),
                _rate_text(rates.output_usd_per_million if rates else None),
                request.pricebook_version,
                request.idempotency_key,
            ),
        )
        store.execute(
            "UPDATE inference_endpoint_spend SET held_nanos = held_nanos + ?, running = running + 1 "
            "WHERE project = ? AND endpoint = ?",
            (hold, endpoint.project, endpoint.name),
        )
        if request.idempotency_key is not None:
            store.execute(
                "INSERT INTO inference_idempotency (project, key_name, idempotency_key, body_sha256, request_id, "
                "created_at) VALUES (?, ?, ?, ?, ?, ?)",
                (endpoint.project, key_name, request.idempotency_key, request.body_sha256, request.request_id, now),
            )

    # ---- how requests end

    def settle(
        self, request_id: str, usage: Usage, *, answer: StoredAnswer | None = None, outcome: str = ""
    ) -> Receipt | None:
        """Charge a Running request for `usage` (at most its hold) and release the rest; with no tokens at all it
        is Released instead. A request that is no longer Running (reaped as Unknown meanwhile) is left as it is.
        `answer` is kept for Idempotency-Key replays. None when no such request exists."""
        state = ReceiptState.SETTLED if usage.total > 0 else ReceiptState.RELEASED
        return self._finish(request_id, state, usage, outcome, answer)

    def release(self, request_id: str, outcome: str) -> Receipt | None:
        """End a Running request with no charge (it produced nothing: the model failed, refused or was gone)."""
        return self._finish(request_id, ReceiptState.RELEASED, Usage(), outcome, None)

    def abandon(self, request_id: str, outcome: str) -> Receipt | None:
        """End a Running request whose outcome will never be known (Unknown: never charged, hold released)."""
        return self._finish(request_id, ReceiptState.UNKNOWN, Usage(), outcome, None)

    def _finish(
        self, request_id: str, state: ReceiptState, usage: Usage, outcome: str, answer: StoredAnswer | None
    ) -> Receipt | None:
        store = self.store
        with store.write_transaction():
            row = store.fetch_one(
                "SELECT state, project, endpoint, day, hold_nanos, input_usd_per_million, output_usd_per_million, "
                "key_name, idempotency_key FROM inference_requests WHERE id = ?",
                (request_id,),
            )
            if row is None:
                return None
            if row[0] == ReceiptState.RUNNING:
                self._end(request_id, row, state, usage, outcome, answer)
            found = store.fetch_one(f"SELECT {_RECEIPT_COLUMNS} FROM inference_requests WHERE id = ?", (request_id,))
        return _receipt(found) if found else None

    def _end(
        self, request_id: str, row: Row, state: ReceiptState, usage: Usage, outcome: str, answer: StoredAnswer | None
    ) -> None:
        """Inside the writer's transaction: `row` (Running) ends as `state`."""
        store = self.store
        _, project, endpoint, day, hold, input_rate, output_rate, key_name, idempotency_key = row
        rates = _rates(input_rate, output_rate)
        charged = state == ReceiptState.SETTLED
        amount = min(rates.cost_nanos(usage.input_tokens, usage.output_tokens), int(hold)) if charged and rates else 0
        kept = answer if charged and idempotency_key is not None else None
        store.execute(
            "UPDATE inference_requests SET state = ?, finished_at = ?, input_tokens = ?, cached_input_tokens = ?, "
            "output_tokens = ?, amount_nanos = ?, window_tokens = ?, outcome = ?, answer_status = ?, "
            "answer_type = ?, answer_body = ? WHERE id = ?",
            (
                state,
                self._clock(),
                usage.input_tokens if charged else 0,
                usage.cached_input_tokens if charged else 0,
                usage.output_tokens if charged else 0,
                amount,
                usage.total if charged else 0,
                outcome,
                kept.status if kept else None,
                kept.media_type if kept else None,
                kept.body if kept else None,
                request_id,
            ),
        )
        store.execute(
            "UPDATE inference_endpoint_spend SET settled_nanos = settled_nanos + ?, held_nanos = held_nanos - ?, "
            "running = running - 1 WHERE project = ? AND endpoint = ?",
            (amount, int(hold), project, endpoint),
        )
        if amount:
            store.execute(
                "INSERT INTO inference_daily_spend (project, endpoint, day, settled_nanos) VALUES (?, ?, ?, ?) "
                "ON CONFLICT (project, endpoint, day) DO UPDATE "
                "SET settled_nanos = inference_daily_spend.settled_nanos + excluded.settled_nanos",
                (project, endpoint, day, amount),
            )
        if idempotency_key is not None and not charged:
            # A request that ended with no charge frees its key: the retry runs again.
            store.execute(
                "DELETE FROM inference_idempotency WHERE project = ? AND key_name = ? AND idempotency_key = ? "
                "AND request_id = ?",
                (project, key_name, idempotency_key, request_id),
            )

    # ---- reading

    def receipt(self, request_id: str) -> Receipt | None:
        row = self.store.fetch_one(f"SELECT {_RECEIPT_COLUMNS} FROM inference_requests WHERE id = ?", (request_id,))
        return _receipt(row) if row else None

    def spend(self, project: str, endpoint: str) -> tuple[int, int]:
        """(settled, held) nano-dollars of an endpoint, over its whole life."""
        row = self.store.fetch_one(
            "SELECT settled_nanos, held_nanos FROM inference_endpoint_spend WHERE project = ? AND endpoint = ?",
            (project, endpoint),
        )
        return (int(row[0]), int(row[1])) if row else (0, 0)

    # ---- gateway processes

    def register_gateway(self, listen: str, *, pid: int, gateway_id: str | None = None) -> str:
        """Record a gateway process (this host, `pid`): the requests it admits name it."""
        gateway_id = gateway_id or new_gateway_id()
        now = self._clock()
        with self.store.write_transaction():
            self.store.execute(
                f"INSERT INTO inference_gateways ({_GATEWAY_COLUMNS}) VALUES (?, ?, ?, ?, ?, ?, ?, NULL)",
                (gateway_id, host_identity(), pid, process_start(pid), listen, now, now),
            )
        return gateway_id

    def heartbeat(self, gateway_id: str) -> None:
        with self.store.write_transaction():
            self.store.execute(
                "UPDATE inference_gateways SET heartbeat_at = ? WHERE id = ?", (self._clock(), gateway_id)
            )

    def retire(self, gateway_id: str, outcome: str) -> list[str]:
        """A gateway stopping: it is marked stopped, and its requests still Running become Unknown (`outcome`
        says why). Returns their ids."""
        with self.store.write_transaction():
            self.store.execute("UPDATE inference_gateways SET stopped_at = ? WHERE id = ?", (self._clock(), gateway_id))
            return self._abandon_all(gateway_id, outcome)

    def gateways(self) -> list[GatewayProcess]:
        rows = self.store.fetch_all(f"SELECT {_GATEWAY_COLUMNS} FROM inference_gateways")
        return sorted((_gateway(row) for row in rows), key=lambda gateway: gateway.started_at)

    def _abandon_all(self, gateway_id: str, outcome: str) -> list[str]:
        store = self.store
        rows = store.fetch_all(
            "SELECT state, project, endpoint, day, hold_nanos, input_usd_per_million, output_usd_per_million, "
            "key_name, idempotency_key, id FROM inference_requests WHERE gateway = ? AND state = ?",
            (gateway_id, ReceiptState.RUNNING),
        )
        for row in rows:
            self._end(str(row[9]), row[:9], ReceiptState.UNKNOWN, Usage(), outcome, None)
        return sorted(str(row[9]) for row in rows)

    def reap(
        self,
        *,
        stale_after_s: float = STALE_AFTER_S,
        alive: Callable[[str, int, str], bool | None] = process_alive,
    ) -> list[str]:
        """Requests Running in gateway processes that are gone become Unknown: a process of this host that no
        longer runs, one that said it stopped, or any whose heartbeat is older than `stale_after_s`. Returns the
        ids of the requests reaped. Any process may call it (every gateway does, every few seconds)."""
        store = self.store
        holders = {
            str(row[0])
            for row in store.fetch_all(
                "SELECT DISTINCT gateway FROM inference_requests WHERE state = ?", (ReceiptState.RUNNING,)
            )
        }
        if not holders:
            return []
        known = {gateway.id: gateway for gateway in self.gateways()}
        now = self._clock()
        reaped: list[str] = []
        for holder in sorted(holders):
            gateway = known.get(holder)
            reason = self._gone(gateway, now, stale_after_s, alive)
            if reason is None:
                continue
            with store.write_transaction():
                reaped += self._abandon_all(holder, reason)
        return reaped

    @staticmethod
    def _gone(
        gateway: GatewayProcess | None, now: float, stale_after_s: float, alive: Callable[[str, int, str], bool | None]
    ) -> str | None:
        if gateway is None:
            return "its gateway process is not recorded"
        if gateway.stopped_at is not None:
            return f"its gateway {gateway.id} stopped before the request ended"
        if alive(gateway.host, gateway.pid, gateway.process_start) is False:
            return f"its gateway {gateway.id} (pid {gateway.pid}) ended before the request did"
        if gateway.heartbeat_at < now - stale_after_s:
            return f"its gateway {gateway.id} has been silent for {int(now - gateway.heartbeat_at)} s"
        return None

    def prune(self) -> int:
        """Forget receipts older than 30 days, Idempotency-Keys older than 24 hours and gateways long gone (what
        endpoints spent stays counted). Returns the number of receipts dropped."""
        now = self._clock()
        store = self.store
        with store.write_transaction():
            dropped = store.execute(
                "DELETE FROM inference_requests WHERE state <> ? AND admitted_at < ?",
                (ReceiptState.RUNNING, now - RECEIPT_TTL_S),
            ).rowcount
            store.execute("DELETE FROM inference_idempotency WHERE created_at < ?", (now - IDEMPOTENCY_TTL_S,))
            store.execute(
                "DELETE FROM inference_gateways WHERE heartbeat_at < ? AND id NOT IN "
                "(SELECT gateway FROM inference_requests WHERE state = ?)",
                (now - GATEWAY_ROWS_KEPT_S, ReceiptState.RUNNING),
            )
        return int(dropped)


def _labels(text: Any) -> dict[str, str]:
    loaded = json.loads(text) if isinstance(text, str) and text else {}
    return loaded if isinstance(loaded, dict) else {}
