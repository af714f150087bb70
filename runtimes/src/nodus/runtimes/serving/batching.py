"""Request batching: one forward pass per step for every request in flight, on a thread of its own.

Who uses it: `transformers_backend.TransformersEngine`, which hands it a `ModelRunner` (the loaded model and its
adapters). How a step goes:
- An idle scheduler that receives a request waits `batch_window` seconds for others (up to `max_batch_size`),
  then prefills them together: one forward pass over their left-padded prompts, with a fresh KV cache.
- While a batch runs, each step feeds every row's last token in one forward pass over the shared KV cache and
  samples the next token per row (`sampling`). Requests that arrive meanwhile are prefilled as a group between two
  steps and joined to the running batch (`kv_cache.PaddedCache.join`), so a new request never waits for the whole
  batch to finish (continuous batching).
- A row leaves the batch when it stops (EOS or a stop token unless `ignore_eos`, a stop string, max_tokens), or at
  the next step after its client went away (`Ticket.cancel`); its produced token count is kept in its record.
- Adapters: requests for different adapters (and the base) share one batch. The runner gives each row its own
  adapter in the same forward pass (PEFT's mixed-adapter batches), so a request never waits for another adapter's
  batch to drain; a batch of one adapter only runs without the per-row routing.

Every forward pass is counted (`stats`): passes, those shared by two or more requests, the largest batch, and per
request the passes it took part in and the requests it shared them with.
"""

from __future__ import annotations

import logging
import threading
import time
from collections import OrderedDict, deque
from dataclasses import dataclass, field
from typing import Any, Literal, Protocol

import torch
from transformers import DynamicCache

from nodus.runtimes.serving.engine import (
    Delta,
    EngineError,
    Finished,
    FinishReason,
    RecordState,
    RequestRecord,
    Ticket,
)
from nodus.runtimes.serving.kv_cache import PaddedCache
from nodus.runtimes.serving.sampling import generator_for, next_tokens
from nodus.runtimes.serving.text_stream import TextStream

log = logging.getLogger("nodus.serving")
STATE_AFTER: dict[FinishReason, RecordState] = {
    "stop": "finished",
    "length": "finished",
    "cancelled": "cancelled",
    "aborted": "aborted",
    "error": "error",
}
SHARED_WITH_CAP = 64
"""How many batch mates a request record lists (enough to show batching, bounded for large batches)."""


class ModelRunner(Protocol):
    """A loaded causal LM as the scheduler drives it."""

    device: torch.device
    pad_token_id: int
    eos_token_ids: frozenset[int]

    def decode(self, token_ids: list[int]) -> str: ...

    def forward(
        self,
        input_ids: torch.Tensor,
        attention_mask: torch.Tensor,
        position_ids: torch.Tensor,
        cache: DynamicCache,
        models: list[str],
    ) -> torch.Tensor:
        """Last-position logits [rows, vocab]; `cache` is extended in place; `models[i]` is row i's served name."""
        ...


@dataclass
class Row:
    ticket: Ticket
    record: RequestRecord
    stream: TextStream
    generator: torch.Generator | None
    next_token: int = -1
    position: int = 0
    """The position id of `next_token` when it is fed."""
    unsent: list[int] = field(default_factory=list)
    done: bool = False


class Scheduler:
    def __init__(
        self, runner: ModelRunner, *, max_batch_size: int = 32, batch_window: float = 0.01, keep_records: int = 1024
    ) -> None:
        if max_batch_size < 1:
            raise ValueError("max_batch_size must be at least 1")
        self.runner = runner
        self.max_batch_size = max_batch_size
        self.batch_window = batch_window
        self.keep_records = keep_records
        self._cond = threading.Condition()
        self._pending: deque[Ticket] = deque()
        self._closing = False
        self._rows: list[Row] = []
        self._batch: PaddedCache | None = None
        self._stats_lock = threading.Lock()
        self._records: OrderedDict[str, RequestRecord] = OrderedDict()
        self._counters = {
            "forward_passes": 0,
            "prefill_passes": 0,
            "decode_passes": 0,
            "shared_forward_passes": 0,
            "largest_batch": 0,
            "prompt_tokens": 0,
            "generated_tokens": 0,
        }
        self._thread = threading.Thread(target=self._run, name="nodus-serving-scheduler", daemon=True)
        self._thread.start()

    # --- called from the server's thread -------------------------------------------------------------------

    def submit(self, ticket: Ticket) -> None:
        request = ticket.request
        with self._cond:
            if self._closing:
                raise EngineError("unavailable", "the model server is shutting down")
            with self._stats_lock:
                known = self._records.get(request.request_id)
                if known is not None and known.state in ("waiting", "running"):
                    raise EngineError("invalid", f"request id {request.request_id!r} is already in flight")
                self._records[request.request_id] = RequestRecord(
                    request_id=request.request_id, model=request.model, prompt_tokens=len(request.prompt_ids)
                )
                self._records.move_to_end(request.request_id)
                self._counters["prompt_tokens"] += len(request.prompt_ids)
                self._forget_old()
            self._pending.append(ticket)
            self._cond.notify()

    def shutdown(self) -> None:
        with self._cond:
            self._closing = True
            self._cond.notify()

    def close(self, timeout: float = 30.0) -> None:
        self.shutdown()
        self._thread.join(timeout)

    def stats(self) -> dict[str, Any]:
        with self._stats_lock:
            states: dict[str, int] = {}
            for record in self._records.values():
                states[record.state] = states.get(record.state, 0) + 1
            return {
                **self._counters,
                "max_batch_size": self.max_batch_size,
                "batch_window_ms": round(self.batch_window * 1000, 3),
                "running": states.get("running", 0),
                "waiting": states.get("waiting", 0),
                "requests": states,
            }

    def record(self, request_id: str) -> dict[str, Any] | None:
        with self._stats_lock:
            record = self._records.get(request_id)
            return None if record is None else record.as_json()

    # --- the scheduler thread -------------------------------------------------------------------------------

    def _run(self) -> None:
        try:
            while True:
                admitted = self._admit()
                if admitted is None:
                    return
                if admitted:
                    self._prefill(admitted)
                try:
                    if self._rows:
                        self._step()
                except Exception as error:  # a model failure fails the requests in flight, not the server
                    log.exception("model server: a forward pass failed")
                    self._fail_all(f"the model failed: {error.__class__.__name__}: {error}")
        finally:
            self._abort_all()

    def _admit(self) -> list[Ticket] | None:
        """The requests to prefill now (possibly none), or None once shutting down."""
        with self._cond:
            while not self._rows and not self._pending and not self._closing:
                self._cond.wait()
            if not self._rows and self._pending and self.batch_window > 0:
                # An idle engine waits a moment for company, so requests sent together are prefilled together.
                deadline = time.monotonic() + self.batch_window
                while len(self._pending) < self.max_batch_size and not self._closing:
                    left = deadline - time.monotonic()
                    if left <= 0:
                        break
                    self._cond.wait(left)
            if self._closing:
                return None
            taken: list[Ticket] = []
            while self._pending and len(self._rows) + len(taken) < self.max_batch_size:
                taken.append(self._pending.popleft())
        admitted = []
        for ticket in taken:
            if ticket.cancelled:
                self._finish_ticket(ticket, "cancelled", None)
            else:
                admitted.append(ticket)
        return admitted

    def _prefill(self, tickets: list[Ticket]) -> None:
        rows = [self._new_row(ticket) for ticket in tickets]
        prompts = [list(ticket.request.prompt_ids) for ticket in tickets]
        length = max(len(prompt) for prompt in prompts)
        device = self.runner.device
        input_ids = torch.tensor(
            [[self.runner.pad_token_id] * (length - len(p)) + p for p in prompts], dtype=torch.long, device=device
        )
        mask = torch.tensor([[0] * (length - len(p)) + [1] * len(p) for p in prompts], dtype=torch.long, device=device)
        positions = (mask.cumsum(dim=1) - 1).clamp(min=0)
        cache = DynamicCache()
        try:
            logits = self.runner.forward(input_ids, mask, positions, cache, [t.request.model for t in tickets])
        except Exception as error:  # fails these requests only: the running batch has its own cache
            log.exception("model server: a prefill failed")
            for row in rows:
                row.done = True
                self._finish(row, "error", f"the model failed: {error.__class__.__name__}: {error}")
            return
        self._count_pass(rows, prefill=True)
        for row, prompt in zip(rows, prompts, strict=True):
            row.position = len(prompt)
        self._accept(rows, logits)
        survivors = [index for index, row in enumerate(rows) if not row.done]
        if not survivors:
            return
        joined = PaddedCache(cache, mask)
        joined.keep(survivors)
        if self._batch is None:
            self._batch = joined
        else:
            self._batch.join(joined)
        self._rows += [rows[index] for index in survivors]

    def _step(self) -> None:
        self._drop_cancelled()
        if not self._rows or self._batch is None:
            return
        device = self.runner.device
        input_ids = torch.tensor([[row.next_token] for row in self._rows], dtype=torch.long, device=device)
        positions = torch.tensor([[row.position] for row in self._rows], dtype=torch.long, device=device)
        mask = self._batch.extend_mask()
        logits = self.runner.forward(
            input_ids, mask, positions, self._batch.cache, [row.ticket.request.model for row in self._rows]
        )
        self._count_pass(self._rows, prefill=False)
        for row in self._rows:
            row.position += 1
        self._accept(self._rows, logits)
        self._keep([index for index, row in enumerate(self._rows) if not row.done])

    def _accept(self, rows: list[Row], logits: torch.Tensor) -> None:
        """Sample one token per row and move each request on: a Delta, or its Finished."""
        params = [row.ticket.request.sampling for row in rows]
        tokens = next_tokens(logits, params, [row.generator for row in rows])
        with self._stats_lock:
            self._counters["generated_tokens"] += len(rows)
            for row in rows:
                row.record.completion_tokens += 1
        for row, token in zip(rows, tokens, strict=True):
            sampling = row.ticket.request.sampling
            text = row.stream.push(token)
            row.unsent.append(token)
            if token in self.runner.eos_token_ids and not sampling.ignore_eos:
                reason: FinishReason | None = "stop"
            elif row.stream.stopped:
                reason = "stop"
            elif row.record.completion_tokens >= sampling.max_tokens:
                reason = "length"
            else:
                reason = None
            if reason is not None:
                row.done = True
                self._finish(row, reason, None, unsent_text=text)
                continue
            row.next_token = token
            if text:
                row.ticket.publish(Delta(text, tuple(row.unsent), row.record.completion_tokens))
                row.unsent = []

    def _drop_cancelled(self) -> None:
        gone = [row for row in self._rows if row.ticket.cancelled]
        for row in gone:
            row.done = True
            self._finish(row, "cancelled", None)
        if gone:
            self._keep([index for index, row in enumerate(self._rows) if not row.done])

    def _keep(self, indices: list[int]) -> None:
        self._rows = [self._rows[index] for index in indices]
        if not self._rows:
            self._batch = None
        elif self._batch is not None:
            self._batch.keep(indices)

    def _count_pass(self, rows: list[Row], *, prefill: bool) -> None:
        with self._stats_lock:
            counters = self._counters
            counters["forward_passes"] += 1
            counters["prefill_passes" if prefill else "decode_passes"] += 1
            counters["largest_batch"] = max(counters["largest_batch"], len(rows))
            if len(rows) > 1:
                counters["shared_forward_passes"] += 1
            ids = [row.record.request_id for row in rows]
            for row in rows:
                row.record.forward_passes += 1
                row.record.state = "running"
                shared = row.record.shared_with
                if len(rows) > 1 and len(shared) < SHARED_WITH_CAP:
                    shared.update(other for other in ids[: SHARED_WITH_CAP + 1] if other != row.record.request_id)

    def _new_row(self, ticket: Ticket) -> Row:
        with self._stats_lock:
            record = self._records.get(ticket.request.request_id)
            if record is None:  # forgotten already (more than keep_records requests since): keep counting
                record = RequestRecord(ticket.request.request_id, ticket.request.model, len(ticket.request.prompt_ids))
        sampling = ticket.request.sampling
        return Row(
            ticket=ticket,
            record=record,
            stream=TextStream(self.runner.decode, sampling.stop),
            generator=generator_for(sampling, self.runner.device),
        )

    def _finish(self, row: Row, reason: FinishReason, error: str | None, *, unsent_text: str = "") -> None:
        """Publish the request's Finished; `unsent_text` is what its last token added and no Delta carried."""
        completed = reason in ("stop", "length")
        with self._stats_lock:
            row.record.state = STATE_AFTER[reason]
            row.record.finish_reason = reason
        row.ticket.publish(
            Finished(
                reason=reason,
                text=row.stream.text,
                token_ids=tuple(row.stream.token_ids),
                completion_tokens=row.record.completion_tokens,
                tail=unsent_text + row.stream.rest() if completed else "",
                error=error,
            )
        )

    def _finish_ticket(self, ticket: Ticket, reason: Literal["cancelled", "aborted"], error: str | None) -> None:
        """Finish a request that never reached the batch."""
        with self._stats_lock:
            record = self._records.get(ticket.request.request_id)
            if record is not None:
                record.state = reason
                record.finish_reason = reason
        ticket.publish(Finished(reason=reason, text="", token_ids=(), completion_tokens=0, error=error))

    def _fail_all(self, message: str) -> None:
        for row in self._rows:
            if not row.done:
                row.done = True
                self._finish(row, "error", message)
        self._rows, self._batch = [], None

    def _abort_all(self) -> None:
        """At shutdown: every request in flight or waiting ends as `aborted` (its stream is cut)."""
        for row in self._rows:
            if not row.done:
                row.done = True
                self._finish(row, "aborted", "the model server is shutting down")
        self._rows, self._batch = [], None
        with self._cond:
            self._closing = True
            pending, self._pending = list(self._pending), deque()
        for ticket in pending:
            self._finish_ticket(ticket, "aborted", "the model server is shutting down")

    def _forget_old(self) -> None:
        """Drop the oldest finished records beyond `keep_records` (called with the stats lock held)."""
        excess = len(self._records) - self.keep_records
        if excess <= 0:
            return
        for request_id in [rid for rid, r in self._records.items() if r.state not in ("waiting", "running")][:excess]:
            del self._records[request_id]
