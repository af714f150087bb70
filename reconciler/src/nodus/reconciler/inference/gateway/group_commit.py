"""The gateway's ledger writes, many to one transaction: one commit (one fsync) for every request waiting.

Who uses it: the gateway's app (`app.py`) for `Ledger.admit`, `settle`, `release` and `abandon`. Why: each of these
is a short write transaction under the store's writer lock, and what it costs is the commit (SQLite's fsync, a
PostgreSQL round trip and WAL flush), not its statements. Alone, a gateway could write only as many requests per
second as the disk can commit. Here one thread takes every write queued meanwhile and runs them one after the other
inside ONE transaction of the writer lock, then commits once; each caller learns its result after the commit.
Nothing about admission changes: the writes still run one at a time, each seeing all before it, under the lock no
other gateway process holds meanwhile, so every limit holds as before. A lone request waits for no one.

A refusal (`InferenceError`) is that request's answer and does not touch the others. Any other failure rolls the
whole batch back, and each of its writes is then run again in a transaction of its own, so one bad write cannot
take its neighbours down with it.
"""

from __future__ import annotations

import asyncio
import logging
import queue
import threading
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from nodus.reconciler.inference.errors import InferenceError
from nodus.reconciler.state.sql import SqlStore

log = logging.getLogger("nodus.gateway")
MAX_BATCH = 128


@dataclass
class _Write:
    action: Callable[[], Any]
    loop: asyncio.AbstractEventLoop
    future: asyncio.Future[Any]
    result: Any = None
    error: BaseException | None = None

    def run(self) -> None:
        try:
            self.result = self.action()
            self.error = None
        except InferenceError as refusal:
            self.error = refusal

    def deliver(self) -> None:
        self.loop.call_soon_threadsafe(self._resolve)

    def _resolve(self) -> None:
        if self.future.done():  # the caller was cancelled; the write happened all the same
            return
        if self.error is not None:
            self.future.set_exception(self.error)
        else:
            self.future.set_result(self.result)


class GroupCommit:
    def __init__(self, store: SqlStore, *, max_batch: int = MAX_BATCH) -> None:
        self.store = store
        self.max_batch = max_batch
        self._queue: queue.SimpleQueue[_Write | None] = queue.SimpleQueue()
        self._thread: threading.Thread | None = None
        self._lock = threading.Lock()
        self.batches = 0
        self.writes = 0

    async def call(self, action: Callable[[], Any]) -> Any:
        """`action()` (a ledger write) in the next batch; its result, or its InferenceError, after the commit."""
        self._start()
        loop = asyncio.get_running_loop()
        write = _Write(action, loop, loop.create_future())
        self._queue.put(write)
        return await write.future

    def _start(self) -> None:
        with self._lock:
            if self._thread is None or not self._thread.is_alive():
                self._thread = threading.Thread(target=self._work, name="nodus-ledger-writes", daemon=True)
                self._thread.start()

    def close(self) -> None:
        """Finish what is queued, then stop the thread."""
        with self._lock:
            thread = self._thread
            self._thread = None
        if thread is not None:
            self._queue.put(None)
            thread.join(timeout=60)

    def _work(self) -> None:
        while True:
            first = self._queue.get()
            if first is None:
                return
            batch = [first]
            stop = False
            while len(batch) < self.max_batch:
                try:
                    item = self._queue.get_nowait()
                except queue.Empty:
                    break
                if item is None:
                    stop = True
                    break
                batch.append(item)
            self._commit(batch)
            if stop:
                return

    def _commit(self, batch: list[_Write]) -> None:
        try:
            with self.store.write_transaction():
                for write in batch:
                    write.run()
        except Exception as error:
            if len(batch) == 1:
                self._fail(batch[0], error)
            else:
                for write in batch:  # rolled back together: each alone, so one failure stays its own
                    self._alone(write)
            return
        self.batches += 1
        self.writes += len(batch)
        for write in batch:
            write.deliver()

    def _alone(self, write: _Write) -> None:
        try:
            with self.store.write_transaction():
                write.run()
        except Exception as error:
            self._fail(write, error)
            return
        write.deliver()

    @staticmethod
    def _fail(write: _Write, error: Exception) -> None:
        log.warning("a ledger write failed: %s", error)
        write.error = error
        write.deliver()
