"""Counts that no ceiling can refuse, written after the answer.

A direct-family keyed request (``/earth/...`` with a key) is counted per key per day and
month, but those counters have no ceiling (the contract gives the direct family only its
per-minute window, checked before this). Counting it can refuse nothing, so waiting for
the count to be written bought nothing; yet it was a keyed read's largest cost: its share
of a group-commit write transaction (on SQLite ``BEGIN IMMEDIATE``, an upsert, a locking
read and an update for every handful of requests), about 360 us of CPU a request beside
184 us for the whole keyless request (``bench/api.py``). What such a request still waits
for is its key's revocation (``revocation.py``).

``Tally`` adds the request's counts in memory and writes them in one upsert statement
within ``FLUSH_S`` seconds, when this process reads a counter (so ``/earth/usage``
includes the request that asks), and when the process stops (SIGTERM, SIGINT).

What a crash loses, stated plainly: a coordinator killed without its shutdown (SIGKILL,
power loss) loses the uncapped counts of at most its last ``FLUSH_S`` seconds (and, while
the database refuses writes, of the whole outage: a failed write is kept in memory and
tried again; a write whose COMMIT was cut off without an answer is tried again too, so
it may count twice). Those counts have no ceiling, so the loss lets nobody past a limit;
``/earth/usage`` reads that much low, and another process's counts appear there up to
``FLUSH_S`` late. Requests with a ceiling (day, month, embed loads, embed budget) are never
tallied: ``UsageStore.consume`` decides them in its transaction, before the answer.
"""
from __future__ import annotations

import asyncio
import logging
from collections import Counter as Bag

from coordinator.core.db import Database
from coordinator.core.db.models import AccessUsage

log = logging.getLogger("sis.access")

_USAGE = AccessUsage.__table__


class Tally:
    """Counts without a ceiling, added in memory and written by one upsert statement
    (``count = count + n``) at most every ``FLUSH_S`` seconds. Additions commute, so
    several processes' tallies need no locking between them and none with the group
    commit's counters. See the module's docstring for what a crash loses."""

    FLUSH_S = 1.0

    def __init__(self, db: Database) -> None:
        self.db = db
        if db.is_sqlite:
            from sqlalchemy.dialects.sqlite import insert
        else:
            from sqlalchemy.dialects.postgresql import insert
        ins = insert(_USAGE)
        self._upsert = ins.on_conflict_do_update(index_elements=[_USAGE.c.subject, _USAGE.c.period],
                                                 set_={"count": _USAGE.c.count + ins.excluded["count"]})
        self._pending: Bag[tuple[str, str]] = Bag()
        self._lock = asyncio.Lock()        # one write at a time, so a failed one is put back in order
        self._timer: asyncio.Task | None = None
        self.writes = 0                    # transactions run, for tests and operators

    def add(self, pairs: list[tuple[str, str]]) -> None:
        """One more on each (subject, period); written within ``FLUSH_S`` seconds."""
        self._pending.update(pairs)
        if self._timer is None or self._timer.done():
            self._timer = asyncio.create_task(self._later())

    @property
    def pending(self) -> int:
        return sum(self._pending.values())

    async def _later(self) -> None:
        await asyncio.sleep(self.FLUSH_S)
        try:
            await self.flush()
        except Exception as exc:    # kept in memory; the next addition, read or stop tries again
            log.warning("uncapped usage counts not written, kept for the next try: %s", exc)

    async def flush(self) -> None:
        """Write what is pending. On failure it is kept (merged with what came since) and
        the error raised. Shielded: a caller cancelled mid-write (the timer at stop) must not
        leave a committed write looking failed, which would count it twice."""
        await asyncio.shield(self._flush())

    async def _flush(self) -> None:
        async with self._lock:
            if not self._pending:
                return
            batch, self._pending = self._pending, Bag()
            rows = [{"subject": s, "period": p, "count": n} for (s, p), n in sorted(batch.items())]
            try:
                async with self.db.write_core() as conn:   # sorted rows: one lock order everywhere
                    await conn.execute(self._upsert, rows)
            except BaseException:
                self._pending.update(batch)
                raise
            finally:
                self.writes += 1

    async def close(self) -> None:
        """Write what is pending before the process stops; say what is lost if that fails."""
        if self._timer is not None and not self._timer.done():
            self._timer.cancel()
            await asyncio.gather(self._timer, return_exceptions=True)
        try:
            await self.flush()
        except Exception as exc:
            log.error("%d uncapped usage counts could not be written at stop and are lost: %s", self.pending, exc)
