"""Counting: per-minute windows through the ``limits`` library, day / month /
budget counters in the database.

Per-minute ceilings use a moving window (no double burst at a window edge),
kept in process memory for one coordinator or in Redis when ``SIS_REDIS_URL``
is set, so that several coordinators share one window. The moving window of
``limits`` is atomic in both (a lock in memory, a Lua script in Redis), which
is what makes "120 allowed of N concurrent" exact.

Day, month and budget counters must survive a restart, so they are rows of
``access_usage`` incremented by one conditional upsert each, in one
transaction that also re-reads the credential's revocation: a request is
either counted against every ceiling or against none.
"""
from __future__ import annotations

import logging
import math
import time
from dataclasses import dataclass
from datetime import datetime, timedelta, timezone

from limits import RateLimitItemPerMinute
from limits.aio.storage import MemoryStorage, RedisStorage, Storage
from limits.aio.strategies import MovingWindowRateLimiter
from sqlalchemy import select

from ..db import Database
from ..errors import Unavailable
from ..db.models import AccessKey, AccessUsage, EmbedToken
from .credentials import aware

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


class RateLimiter:
    """Per-minute moving windows, identified by text parts (``"ip", "1.2.3.4"``)."""

    def __init__(self, redis_url: str = "", prefix: str = "sis", *, enforce: bool = True) -> None:
        self.shared = bool(redis_url)
        self.enforce = enforce
        self._pool = None
        if redis_url:
            from redis.asyncio import BlockingConnectionPool

            # A blocking pool: a burst of concurrent requests waits for a connection
            # instead of failing with "too many connections".
            self._pool = BlockingConnectionPool.from_url(redis_url, max_connections=32, timeout=10)
            uri = "async+" + redis_url if not redis_url.startswith("async+") else redis_url
            self.storage: Storage = RedisStorage(uri, implementation="redispy", key_prefix=f"{prefix}:rl",
                                                 connection_pool=self._pool)
        else:
            self.storage = MemoryStorage()
        self.strategy = MovingWindowRateLimiter(self.storage)

    async def hit(self, per_minute: int, *ident: str) -> Window:
        item = RateLimitItemPerMinute(per_minute)
        try:
            allowed = await self.strategy.hit(item, *ident)
            return await self._window(item, allowed, ident)
        except Exception as exc:
            raise self._unreachable(exc) from exc

    async def peek(self, per_minute: int, *ident: str) -> Window:
        """The window's state without counting a request."""
        item = RateLimitItemPerMinute(per_minute)
        try:
            allowed = await self.strategy.test(item, *ident)
            return await self._window(item, allowed, ident)
        except Exception as exc:
            raise self._unreachable(exc) from exc

    def _unreachable(self, exc: Exception) -> Exception:
        """Shared storage that does not answer fails closed: nobody is let through uncounted."""
        if not self.shared:
            return exc
        log.warning("rate-limit storage unreachable: %s", exc)
        return Unavailable("the rate-limit storage did not answer; retry shortly",
                           {"retryAfterS": 5}, headers={"Retry-After": "5"})

    async def _window(self, item: RateLimitItemPerMinute, allowed: bool, ident: tuple[str, ...]) -> Window:
        stats = await self.strategy.get_window_stats(item, *ident)
        reset = max(0, math.ceil(stats.reset_time - time.time()))
        return Window(allowed or not self.enforce, item.amount, max(0, stats.remaining), reset if stats.remaining < item.amount else 0)

    async def close(self) -> None:
        timer = getattr(self.storage, "timer", None)
        if timer is not None and not timer.done():
            timer.cancel()
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


class _Exhausted(Exception):
    def __init__(self, counter: Counter) -> None:
        self.counter = counter


class UsageStore:
    def __init__(self, db: Database) -> None:
        self.db = db
        if db.is_sqlite:
            from sqlalchemy.dialects.sqlite import insert
        else:
            from sqlalchemy.dialects.postgresql import insert
        self._insert = insert

    async def consume(self, counters: list[Counter], *, key_id: str | None = None,
                      embed_id: str | None = None, at: datetime | None = None) -> Metered:
        """Add one to every counter, or to none: the first counter at its ceiling refuses the
        request and rolls the others back. The key (and embed token) are re-read in the same
        transaction, so a revocation committed before it is seen by it."""
        at = at or datetime.now(timezone.utc)
        try:
            async with self.db.write() as s:
                if key_id is not None:
                    revoked = (await s.execute(select(AccessKey.revoked_at).where(AccessKey.id == key_id))).first()
                    if revoked is None or revoked[0] is not None:
                        return Metered(refused="revoked")
                if embed_id is not None:
                    row = (await s.execute(select(EmbedToken.revoked_at, EmbedToken.expires_at)
                                           .where(EmbedToken.id == embed_id))).first()
                    if row is None or row[0] is not None:
                        return Metered(refused="revoked")
                    if aware(row[1]) <= at:
                        return Metered(refused="expired")
                counts = {}
                for c in counters:
                    ins = self._insert(AccessUsage).values(subject=c.subject, period=c.period, count=1)
                    upd = ins.on_conflict_do_update(
                        index_elements=[AccessUsage.subject, AccessUsage.period],
                        set_={"count": AccessUsage.count + 1},
                        where=(AccessUsage.count < c.limit) if c.limit is not None else None,
                    ).returning(AccessUsage.count)
                    got = (await s.execute(upd)).scalar_one_or_none()
                    if got is None:
                        raise _Exhausted(c)
                    counts[(c.subject, c.period)] = int(got)
                return Metered(counts=counts)
        except _Exhausted as exc:
            return Metered(exhausted=exc.counter)

    async def read(self, pairs: list[tuple[str, str]]) -> dict[tuple[str, str], int]:
        if not pairs:
            return {}
        subjects = {s for s, _ in pairs}
        async with self.db.read() as s:
            rows = (await s.execute(select(AccessUsage.subject, AccessUsage.period, AccessUsage.count)
                                    .where(AccessUsage.subject.in_(subjects)))).all()
        have = {(r[0], r[1]): int(r[2]) for r in rows}
        return {p: have.get(p, 0) for p in pairs}
