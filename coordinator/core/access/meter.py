"""Counting: per-minute windows, day / month / budget counters in the database.

Per-minute ceilings use a moving window (no double burst at a window edge), kept
in process memory for one coordinator (``LocalWindows``) or in Redis through the
``limits`` library when ``SIS_REDIS_URL`` is set, so that several coordinators
share one window (and in process memory again while Redis does not answer). Both are atomic (one event loop in memory, a Lua script in
Redis), which is what makes "120 allowed of N concurrent" exact.

Day, month and budget counters must survive a restart, so they are rows of
``access_usage``, applied by group commit (``UsageStore``) in transactions
that also re-read the credentials' revocation: a request is either counted
against every ceiling or against none.
"""
from __future__ import annotations

import asyncio
import logging
import math
import time
from collections import deque
from dataclasses import dataclass
from datetime import datetime, timedelta, timezone

from limits import RateLimitItemPerMinute
from limits.aio.storage import RedisStorage, Storage
from limits.aio.strategies import MovingWindowRateLimiter
from sqlalchemy import bindparam, select, tuple_, update
from sqlalchemy.exc import DBAPIError

from coordinator.core.cache import redis_link
from coordinator.core.db import Database
from coordinator.core.db.models import AccessKey, AccessUsage, EmbedToken
from coordinator.core.times import aware
from coordinator.core.access.tally import Tally

log = logging.getLogger("sis.access")


@dataclass(frozen=True)
class Window:
    """The state of one per-minute window after a request was (or was not) let through."""

    allowed: bool
    limit: int
    remaining: int
    reset_s: int          # seconds until the window has room again (or is whole again)

    def headers(self) -> dict[str, str]:
        return {"RateLimit-Limit": str(self.limit), "RateLimit-Remaining": str(self.remaining),
                "RateLimit-Reset": str(self.reset_s)}


class LocalWindows:
    """Exact moving windows in this process's memory: per key, the times of the requests let
    through in the last period. ``limits``' MemoryStorage keeps the same behind an asyncio
    lock, key formatting and an expiry thread, and a hit with its window's state cost 34 us
    there against about 2 here (every keyless request pays one: ``bench/api.py``). One event
    loop runs this, and nothing awaits between reading a window and appending to it, so no
    lock is needed. Keys idle for a whole period are dropped as hits go by."""

    SWEEP_EVERY = 10_000

    def __init__(self, clock=time.monotonic) -> None:  # noqa: ANN001
        self._logs: dict[tuple, deque] = {}
        self._clock = clock
        self._since_sweep = 0

    def hit(self, limit: int, ident: tuple[str, ...], *, count: bool = True, period_s: float = 60.0
            ) -> tuple[bool, int, int]:
        """(allowed, remaining after this request, seconds until the window is whole again)."""
        now = self._clock()
        log_ = self._logs.get(ident)
        if log_ is None:
            log_ = self._logs[ident] = deque()
        edge = now - period_s
        while log_ and log_[0] <= edge:
            log_.popleft()
        allowed = len(log_) < limit
        if allowed and count:
            log_.append(now)
        self._since_sweep += 1
        if self._since_sweep >= self.SWEEP_EVERY:
            self._sweep(edge)
        reset = math.ceil(log_[0] + period_s - now) if log_ else 0
        return allowed, max(0, limit - len(log_)), max(0, reset)

    def _sweep(self, edge: float) -> None:
        self._since_sweep = 0
        for key in [k for k, v in self._logs.items() if not v or v[-1] <= edge]:
            del self._logs[key]


class RateLimiter:
    """Per-minute moving windows, identified by text parts (``"ip", "1.2.3.4"``).

    With ``SIS_REDIS_URL`` set the windows live in Redis, shared by every coordinator.
    When Redis does not answer, each process falls back to its own windows
    (``LocalWindows``) and logs a warning once: a client then gets up to the limit from
    each process instead of from all together, which is neither "no limits" nor "refuse
    everyone". Redis is tried again ``RETRY_S`` seconds after it failed; when it answers,
    the shared windows resume (with what they counted before the outage) and that is
    logged too. Requests counted locally during the outage are not carried over."""

    RETRY_S = 5.0
    TIMEOUT_S = 0.5       # a Redis that accepts but does not answer must not hold a request longer

    def __init__(self, redis_url: str = "", prefix: str = "sis", *, enforce: bool = True,
                 clock=time.monotonic) -> None:  # noqa: ANN001
        self.shared = bool(redis_url)
        self.enforce = enforce
        self.local = LocalWindows()
        self.fallbacks = 0            # outages seen, for operators and tests
        self._clock = clock
        self._down_until = -math.inf  # while the clock is short of it, Redis is not asked
        self.down_since: float | None = None   # time.time() of this outage's first failure
        self._pool = None
        if redis_url:
            from redis.asyncio import BlockingConnectionPool

            # A blocking pool: a burst of concurrent requests waits for a connection
            # instead of failing with "too many connections".
            self._pool = BlockingConnectionPool.from_url(redis_url, max_connections=32, timeout=10,
                                                         **redis_link(self.TIMEOUT_S))
            uri = "async+" + redis_url if not redis_url.startswith("async+") else redis_url
            self.storage: Storage = RedisStorage(uri, implementation="redispy", key_prefix=f"{prefix}:rl",
                                                 connection_pool=self._pool)
            self.strategy = MovingWindowRateLimiter(self.storage)

    @property
    def degraded(self) -> bool:
        """Shared storage configured but not answering: windows are this process's own."""
        return self.shared and self._down_until != -math.inf

    async def state(self) -> str:
        """For ``/healthz``: ``not configured``, ``ok``, or ``unreachable`` (limits counted per
        process). During an outage Redis is asked again first (when its retry is due), so that a
        process no request reaches says when it answers again."""
        if not self.shared:
            return "not configured"
        if self.degraded:
            await self.peek(1, "healthz")
        return "unreachable" if self.degraded else "ok"

    async def hit(self, per_minute: int, *ident: str) -> Window:
        if self.shared and self._clock() >= self._down_until:
            item = RateLimitItemPerMinute(per_minute)
            try:
                allowed = await self.strategy.hit(item, *ident)
                return await self._window(item, allowed, ident)
            except Exception as exc:
                self._fell_back(exc)
        return self._local(per_minute, ident, count=True)

    async def peek(self, per_minute: int, *ident: str) -> Window:
        """The window's state without counting a request."""
        if self.shared and self._clock() >= self._down_until:
            item = RateLimitItemPerMinute(per_minute)
            try:
                allowed = await self.strategy.test(item, *ident)
                return await self._window(item, allowed, ident)
            except Exception as exc:
                self._fell_back(exc)
        return self._local(per_minute, ident, count=False)

    def _local(self, per_minute: int, ident: tuple[str, ...], *, count: bool) -> Window:
        allowed, remaining, reset = self.local.hit(per_minute, ident, count=count)
        return Window(allowed or not self.enforce, per_minute, remaining, reset if remaining < per_minute else 0)

    def _fell_back(self, exc: Exception) -> None:
        if not self.degraded:
            self.fallbacks += 1
            self.down_since = time.time()
            log.warning("rate-limit storage (Redis) unreachable: %s; per-minute limits are counted per "
                        "process until it answers again (tried every %.0f s)", exc or type(exc).__name__,
                        self.RETRY_S)
        self._down_until = self._clock() + self.RETRY_S

    async def _window(self, item: RateLimitItemPerMinute, allowed: bool, ident: tuple[str, ...]) -> Window:
        stats = await self.strategy.get_window_stats(item, *ident)
        if self.degraded:
            self._down_until, self.down_since = -math.inf, None
            log.warning("rate-limit storage (Redis) answers again: per-minute limits are shared again")
        reset = max(0, math.ceil(stats.reset_time - time.time()))
        return Window(allowed or not self.enforce, item.amount, max(0, stats.remaining), reset if stats.remaining < item.amount else 0)

    async def close(self) -> None:
        if self._pool is not None:
            await self._pool.aclose()


# ---- persisted counters ------------------------------------------------------

def day_period(t: datetime) -> str:
    return "d:" + t.strftime("%Y-%m-%d")


def month_period(t: datetime) -> str:
    return "m:" + t.strftime("%Y-%m")


LIFE = "life"


def seconds_until_period_end(period: str, t: datetime) -> int | None:
    """Seconds until a day or month counter starts afresh (UTC); None for a lifetime counter."""
    if period.startswith("d:"):
        end = datetime(t.year, t.month, t.day, tzinfo=timezone.utc) + timedelta(days=1)
    elif period.startswith("m:"):
        end = datetime(t.year + (t.month == 12), t.month % 12 + 1, 1, tzinfo=timezone.utc)
    else:
        return None
    return max(1, math.ceil((end - t).total_seconds()))


@dataclass(frozen=True)
class Counter:
    """One persisted counter a request adds to; ``limit`` None counts without a ceiling."""

    subject: str
    period: str
    limit: int | None
    name: str           # what the ceiling is called in an error: perDay, perMonth, embedBudget...


@dataclass(frozen=True)
class Metered:
    """The outcome of one metering transaction."""

    refused: str | None = None            # "revoked", "expired" or None
    exhausted: Counter | None = None      # the first counter whose ceiling was reached
    counts: dict[tuple[str, str], int] | None = None


@dataclass
class _Pending:
    counters: list[Counter]
    key_id: str | None
    embed_id: str | None
    at: datetime
    future: "asyncio.Future[Metered]"


class UsageStore:
    """Persisted counters with group commit.

    Requests are queued and applied by one drainer per process, a batch per
    transaction: the batch's keys and tokens are re-read for revocation, its
    counters are created if missing and locked (``FOR UPDATE`` on PostgreSQL;
    SQLite's ``BEGIN IMMEDIATE`` already excludes other writers), then each
    request is decided in arrival order against the locked counts and the new
    counts are written once. A handful of statements per batch instead of per
    request, and no two writers of one process contend for SQLite's lock.
    """

    MAX_BATCH = 512

    def __init__(self, db: Database) -> None:
        self.db = db
        if db.is_sqlite:
            from sqlalchemy.dialects.sqlite import insert
        else:
            from sqlalchemy.dialects.postgresql import insert
        self._insert = insert
        self._queue: list[_Pending] = []
        self._drainer: asyncio.Task | None = None
        self.batches = 0          # transactions run, for tests and operators
        self.tally = Tally(db)    # counters without a ceiling: written in the background

    async def consume(self, counters: list[Counter], *, key_id: str | None = None,
                      embed_id: str | None = None, at: datetime | None = None) -> Metered:
        """Add one to every counter, or to none: the first counter at its ceiling refuses the
        request. The key (and embed token) are re-read in the same transaction, so a revocation
        committed before it is seen by it."""
        fut: asyncio.Future[Metered] = asyncio.get_running_loop().create_future()
        self._queue.append(_Pending(counters, key_id, embed_id, at or datetime.now(timezone.utc), fut))
        if self._drainer is None or self._drainer.done():
            self._drainer = asyncio.create_task(self._drain())
        return await asyncio.shield(fut)

    async def close(self) -> None:
        if self._drainer is not None:
            await asyncio.gather(self._drainer, return_exceptions=True)
        await self.tally.close()

    async def _drain(self) -> None:
        while self._queue:
            batch, self._queue = self._queue[:self.MAX_BATCH], self._queue[self.MAX_BATCH:]
            try:
                try:
                    results = await self._apply(batch)
                except DBAPIError as exc:  # a deadlock or serialization failure is worth one more try
                    log.warning("metering batch of %d failed, retried once: %s", len(batch), exc.orig)
                    results = await self._apply(batch)
            except Exception as exc:  # every request of the batch fails alike; the next batch is tried afresh
                for p in batch:
                    if not p.future.done():
                        p.future.set_exception(exc)
                continue
            finally:
                self.batches += 1
            for p, r in zip(batch, results):
                if not p.future.done():
                    p.future.set_result(r)

    async def _apply(self, batch: list[_Pending]) -> list[Metered]:
        key_ids = {p.key_id for p in batch if p.key_id is not None}
        embed_ids = {p.embed_id for p in batch if p.embed_id is not None}
        pairs = sorted({(c.subject, c.period) for p in batch for c in p.counters})
        async with self.db.write() as s:
            keys = {}
            if key_ids:
                keys = dict((await s.execute(select(AccessKey.id, AccessKey.revoked_at)
                                             .where(AccessKey.id.in_(key_ids)))).all())
            tokens = {}
            if embed_ids:
                tokens = {r[0]: (r[1], r[2]) for r in (await s.execute(
                    select(EmbedToken.id, EmbedToken.revoked_at, EmbedToken.expires_at)
                    .where(EmbedToken.id.in_(embed_ids)))).all()}
            counts: dict[tuple[str, str], int] = {}
            if pairs:
                await s.execute(self._insert(AccessUsage).values(
                    [{"subject": a, "period": b, "count": 0} for a, b in pairs]).on_conflict_do_nothing())
                # ``subject IN`` beside the pairs: SQLite plans a row-value IN list as a scan of the
                # whole table (75 ms a batch at 700,000 rows), and by the subjects as index searches.
                q = select(AccessUsage.subject, AccessUsage.period, AccessUsage.count).where(
                    AccessUsage.subject.in_(sorted({a for a, _ in pairs})),
                    tuple_(AccessUsage.subject, AccessUsage.period).in_(pairs)).order_by(
                    AccessUsage.subject, AccessUsage.period)   # one lock order everywhere: no deadlock
                if not self.db.is_sqlite:
                    q = q.with_for_update()
                counts = {(r[0], r[1]): int(r[2]) for r in (await s.execute(q)).all()}
            start = dict(counts)
            results = []
            for p in batch:
                results.append(self._decide(p, keys, tokens, counts))
            changed = [{"s": k[0], "p": k[1], "c": v} for k, v in counts.items() if v != start[k]]
            if changed:
                t = AccessUsage.__table__
                conn = await s.connection()   # Core executemany: one statement, many rows
                await conn.execute(update(t).where(t.c.subject == bindparam("s"), t.c.period == bindparam("p"))
                                   .values(count=bindparam("c")), changed)
        return results

    @staticmethod
    def _decide(p: _Pending, keys: dict, tokens: dict, counts: dict[tuple[str, str], int]) -> Metered:
        if p.key_id is not None and (p.key_id not in keys or keys[p.key_id] is not None):
            return Metered(refused="revoked")
        if p.embed_id is not None:
            tok = tokens.get(p.embed_id)
            if tok is None or tok[0] is not None:
                return Metered(refused="revoked")
            if aware(tok[1]) <= p.at:
                return Metered(refused="expired")
        for c in p.counters:
            if c.limit is not None and counts[(c.subject, c.period)] + 1 > c.limit:
                return Metered(exhausted=c)
        out = {}
        for c in p.counters:
            counts[(c.subject, c.period)] += 1
            out[(c.subject, c.period)] = counts[(c.subject, c.period)]
        return Metered(counts=out)

    async def read(self, pairs: list[tuple[str, str]]) -> dict[tuple[str, str], int]:
        if not pairs:
            return {}
        await self.tally.flush()      # this process's uncapped counts, this request's included
        subjects = {s for s, _ in pairs}
        async with self.db.read() as s:
            rows = (await s.execute(select(AccessUsage.subject, AccessUsage.period, AccessUsage.count)
                                    .where(AccessUsage.subject.in_(subjects)))).all()
        have = {(r[0], r[1]): int(r[2]) for r in rows}
        return {p: have.get(p, 0) for p in pairs}
