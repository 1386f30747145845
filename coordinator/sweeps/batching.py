"""Group commit: concurrent requests of one kind served by one transaction.

Thirty-two nodes asking for leases at once would otherwise cost thirty-two transactions,
each with its own BEGIN, statements and COMMIT (and, on SQLite, each waiting its turn for
the one writer). A ``Batcher`` puts requests in a queue; a flusher takes everything that
has arrived and hands it to one batch function, which serves the whole batch in one
transaction with a few set-based statements, then answers each waiter on its own:

- no added latency when idle: the first request starts a flusher at once, and a batch of
  one is just the request; while a batch is being written, the requests arriving in the
  meantime gather for the next one, so batches grow only with concurrency;
- per-request answers: the batch function returns one outcome per request, a value or an
  exception; a request refused (not found, conflict) fails only its own waiter;
- a batch that fails as a whole (a database error that ``retrying`` could not cure) is
  run again one request at a time, so a request that cannot be written fails only itself;
- ``key``: two requests with the same key (the same lease, say) never share a batch: the
  later one waits for the next, and sees what the earlier one wrote;
- one batch in flight at a time: batches grow with concurrency instead (the longer one
  takes, the more requests the next holds). Letting several overlap on PostgreSQL only
  split them smaller, for more statements and CPU per job in ``bench/queue.py``.
  Batches of several coordinator processes, each with queues of its own, are kept apart
  by the database as single transactions are (``FOR UPDATE SKIP LOCKED``,
  ``BEGIN IMMEDIATE``).

The same serves reads that many requests make at once (a node's token on the routes
whose batches do not look it up themselves: ``nodes.registry.nodes_by_token``).
"""
from __future__ import annotations

import asyncio
import logging
from collections import deque
from typing import Any, Awaitable, Callable, Generic, Hashable, TypeVar

log = logging.getLogger("sis.sweeps.batching")

T = TypeVar("T")
R = TypeVar("R")
Outcome = Any   # a value for the waiter, or an Exception instance raised to it


class Batcher(Generic[T, R]):
    def __init__(self, run: Callable[[list[T]], Awaitable[list[Outcome]]], *, max_batch: int = 64,
                 key: Callable[[T], Hashable | None] | None = None, name: str = "") -> None:
        self.run = run
        self.max_batch = max_batch
        self.key = key
        self.name = name
        self._queue: deque[tuple[T, asyncio.Future]] = deque()
        self._flusher: asyncio.Task | None = None   # held here: the loop keeps only weak references to tasks
        # Counters for tests and benches: how many batches ran and how many requests they held.
        self.batches = 0
        self.requests = 0
        self.largest = 0

    async def __call__(self, item: T) -> R:
        fut = asyncio.get_running_loop().create_future()
        self._queue.append((item, fut))
        self._start_flusher()
        return await fut

    def _start_flusher(self) -> None:
        if self._flusher is None:
            self._flusher = asyncio.get_running_loop().create_task(self._flush())
            self._flusher.add_done_callback(self._flusher_done)

    def _flusher_done(self, task: asyncio.Task) -> None:
        self._flusher = None
        if self._queue and not task.cancelled():     # arrived as the flusher stopped
            self._start_flusher()

    def _take(self) -> list[tuple[T, asyncio.Future]]:
        """The next batch: up to ``max_batch`` waiting requests in arrival order, leaving
        behind any whose key is already in the batch (and requests whose waiter gave up)."""
        batch: list[tuple[T, asyncio.Future]] = []
        later: list[tuple[T, asyncio.Future]] = []
        keys: set = set()
        while self._queue and len(batch) < self.max_batch:
            item, fut = self._queue.popleft()
            if fut.done():                 # cancelled while waiting: nothing to do for it
                continue
            k = self.key(item) if self.key else None
            if k is not None and k in keys:
                later.append((item, fut))
                continue
            if k is not None:
                keys.add(k)
            batch.append((item, fut))
        self._queue.extendleft(reversed(later))
        return batch

    async def _flush(self) -> None:
        while self._queue:
            batch = self._take()
            if batch:
                await self._serve(batch)

    async def _serve(self, batch: list[tuple[T, asyncio.Future]]) -> None:
        self.batches += 1
        self.requests += len(batch)
        self.largest = max(self.largest, len(batch))
        try:
            try:
                outcomes = await self.run([item for item, _ in batch])
            except Exception as exc:
                if len(batch) == 1:
                    outcomes = [exc]
                else:
                    log.warning("%s: a batch of %d failed (%s); serving its requests one by one",
                                self.name, len(batch), exc)
                    outcomes = []
                    for item, _ in batch:
                        try:
                            outcomes += await self.run([item])
                        except Exception as one:
                            outcomes.append(one)
            for (_, fut), outcome in zip(batch, outcomes, strict=True):
                if fut.done():
                    continue
                if isinstance(outcome, BaseException):
                    fut.set_exception(outcome)
                else:
                    fut.set_result(outcome)
        finally:
            # Cancelled (the loop is shutting down) or a bug: no waiter is left hanging.
            for _, fut in batch:
                if not fut.done():
                    fut.set_exception(RuntimeError(f"{self.name}: the batch was not served"))
