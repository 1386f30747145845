"""The answer cache behind every tool that declares a cache TTL (DESIGN.md §11).

Keyed by tool, family and normalised parameters, it keeps healthy answers for the
declared TTL and runs each cold computation once however many requests want it
(single flight). The computation runs as a task of its own, so a request that stops
waiting (its cold bound passed, its client went away, or its tool answers 202 at
once) does not stop it: the result lands in the cache for the next request. A
degraded answer is never stored; the last outcome of a computation that ended
degraded or in error is handed over to the requests that were waiting for it, and
once to the next request of an ``accepted`` tool (so a client polling the URL sees
the outcome instead of a new 202), then forgotten.

``AnswerCache`` is one coordinator's, in process. ``RedisAnswerCache`` is shared by
several coordinators through Redis (``SIS_REDIS_URL``): entries, the single-flight
lock and the hand-over live there, so two processes computing the same key run
one computation between them.
"""
from __future__ import annotations

import asyncio
import dataclasses
import logging
import os
import time
from collections import OrderedDict
from dataclasses import dataclass
from typing import Any, Awaitable, Callable, Union

import orjson

from coordinator.core.errors import ServiceError
from coordinator.core.honesty import Answer, Health, SourceReport

log = logging.getLogger("sis.cache")

Compute = Callable[[], Awaitable[Answer]]


def cache_key(tool: str, family: str, params: dict[str, Any], plan: str | None = None) -> str:
    """Tool, family, the caller's plan where the answer depends on it, and the validated
    parameters, keys sorted: equal requests, equal keys."""
    head = f"{tool}|{family}|" if plan is None else f"{tool}|{family}|plan={plan}|"
    return head + orjson.dumps(params, option=orjson.OPT_SORT_KEYS, default=str).decode()


@dataclass(frozen=True)
class Pending:
    """The computation is still running: the caller answers 202 or a degraded cut-short
    answer, and the same request is answered from the cache once it is done."""

    started_s: float       # how long it has been running


@dataclass
class _Failed:
    """An outcome that is not a cacheable answer: a degraded answer or an error."""

    answer: Answer | None = None
    error: BaseException | None = None

    def give(self) -> Answer:
        if self.error is not None:
            raise self.error
        assert self.answer is not None
        return self.answer


Outcome = Union[Answer, Pending]


DEFAULT_MAX_BYTES = 256 * 2**20


def answer_size(answer: Answer) -> int:
    """An answer's size as the cache counts it: its data's compact JSON. What it holds in memory
    is about twice that (the data and the encoded body both), the same for every entry."""
    try:
        return len(orjson.dumps(answer.data, option=orjson.OPT_NON_STR_KEYS))
    except (TypeError, orjson.JSONEncodeError):
        return 1024


class AnswerCache:
    """One process's cache: an LRU of healthy answers, bounded in entries and in bytes
    (``answer_size``), the computations in flight, and the outcomes handed over once.

    Bounded in entries alone, ten thousand answers of 100 KB (places at distinct boxes, one
    key each) held 1.1 GB, and expired entries stayed until read or evicted: past either
    bound, the expired ones go first, then the least recently used."""

    shared = False

    def __init__(self, max_entries: int = 10_000, clock: Callable[[], float] = time.monotonic,
                 handover_s: float = 300.0, max_bytes: int = DEFAULT_MAX_BYTES) -> None:
        self._entries: OrderedDict[str, tuple[float, Answer, int]] = OrderedDict()
        self._inflight: dict[str, tuple[float, asyncio.Task[Answer]]] = {}
        self._handover: dict[str, tuple[float, _Failed]] = {}
        self.max_entries = max_entries
        self.max_bytes = max_bytes
        self.bytes = 0
        self.clock = clock
        self.handover_s = handover_s
        self.hits = self.misses = 0

    async def get(self, key: str) -> Answer | None:
        hit = self._entries.get(key)
        if hit is None:
            return None
        expires, answer, _ = hit
        if expires <= self.clock():
            self._drop(key)
            return None
        self._entries.move_to_end(key)
        return answer

    async def put(self, key: str, answer: Answer, ttl_s: float) -> None:
        if ttl_s <= 0 or not answer.may_cache:
            return
        size = answer_size(answer)
        if size > self.max_bytes:
            return
        self._drop(key)
        self._entries[key] = (self.clock() + ttl_s, answer, size)
        self.bytes += size
        if len(self._entries) > self.max_entries or self.bytes > self.max_bytes:
            now = self.clock()
            for k in [k for k, (expires, _, _) in self._entries.items() if expires <= now]:
                self._drop(k)
            while len(self._entries) > self.max_entries or self.bytes > self.max_bytes:
                _, (_, _, gone) = self._entries.popitem(last=False)
                self.bytes -= gone

    def _drop(self, key: str) -> None:
        hit = self._entries.pop(key, None)
        if hit is not None:
            self.bytes -= hit[2]

    def clear(self) -> None:
        self._entries.clear()
        self.bytes = 0
        self._handover.clear()

    async def close(self) -> None:
        for _, task in list(self._inflight.values()):
            task.cancel()

    async def run(self, key: str, ttl_s: float, compute: Compute, *, bound_s: float | None = None,
                  accepted: bool = False) -> Outcome:
        """The cached answer, else the outcome of the one computation for ``key``: awaited up
        to ``bound_s`` (None: as long as it takes), or not at all when ``accepted``."""
        hit = await self.get(key)
        if hit is not None:
            self.hits += 1
            return hit
        handed = self._take_handover(key) if accepted else None
        if handed is not None:
            return handed.give()
        flight = self._inflight.get(key)
        if flight is None:
            self.misses += 1
            task = asyncio.create_task(self._compute(key, ttl_s, compute, accepted))
            task.add_done_callback(_retrieve)
            flight = self._inflight[key] = (self.clock(), task)
        started, task = flight
        if accepted:
            return Pending(self.clock() - started)
        try:
            return await asyncio.wait_for(asyncio.shield(task), bound_s)
        except asyncio.TimeoutError:
            return Pending(self.clock() - started)

    async def _compute(self, key: str, ttl_s: float, compute: Compute, accepted: bool) -> Answer:
        try:
            try:
                answer = await compute()
            except asyncio.CancelledError:
                raise
            except BaseException as exc:
                if accepted:
                    self._hand_over_locally(key, _Failed(error=exc))
                raise
            if answer.may_cache:
                await self.put(key, answer, ttl_s)
            elif accepted:
                self._hand_over_locally(key, _Failed(answer=answer))
            return answer
        finally:
            self._inflight.pop(key, None)

    def _hand_over_locally(self, key: str, failed: _Failed) -> None:
        """Keep the outcome for the next poll; outcomes nobody came for are dropped once they
        expire, so many cold keys that failed cannot grow this without bound."""
        now = self.clock()
        if len(self._handover) >= self.max_entries:
            for k in [k for k, (expires, _) in self._handover.items() if expires <= now]:
                del self._handover[k]
            while len(self._handover) >= self.max_entries:
                self._handover.pop(next(iter(self._handover)))
        self._handover[key] = (now + self.handover_s, failed)

    def _take_handover(self, key: str) -> _Failed | None:
        hit = self._handover.pop(key, None)
        if hit is None or hit[0] <= self.clock():
            return None
        return hit[1]


def _retrieve(task: asyncio.Task) -> None:
    """Mark a computation's error as seen: the requests that awaited it re-raise it
    themselves, and one that nobody awaited (an accepted tool's) is handed over."""
    if not task.cancelled():
        exc = task.exception()
        if exc is not None and not isinstance(exc, (ServiceError, *_REDIS_DOWN)):  # Redis down: said once
            log.error("a cached computation failed", exc_info=exc)


# ---- shared through Redis ----------------------------------------------------------------

def answer_to_bytes(answer: Answer) -> bytes:
    """An answer as another process reads it back: every field of each source report (written out
    by name, a report read back without ``absent`` said "retry later" of a dataset never loaded)."""
    health = None if answer.health is None else [dataclasses.asdict(s) for s in answer.health.sources]
    return orjson.dumps({"data": answer.data, "caveats": answer.caveats, "health": health,
                         "cacheable": answer.cacheable, "status": answer.status, "headers": answer.headers,
                         "demo": answer.demo})


def answer_from_bytes(raw: bytes) -> Answer:
    d = orjson.loads(raw)
    health = None if d["health"] is None else Health([SourceReport(**s) for s in d["health"]])
    return Answer(d["data"], caveats=d["caveats"], health=health, cacheable=d["cacheable"], status=d["status"],
                  headers=d["headers"], demo=d.get("demo", False))


def _failed_to_bytes(failed: _Failed) -> bytes:
    if failed.answer is not None:
        return b"A" + answer_to_bytes(failed.answer)
    exc = failed.error
    if isinstance(exc, ServiceError):
        return b"E" + orjson.dumps({"code": exc.code, "message": exc.message, "details": exc.details})
    return b"E" + orjson.dumps({"code": "internal_error", "message": "the computation failed; it has been logged",
                                "details": {}})


def _failed_from_bytes(raw: bytes) -> _Failed:
    if raw[:1] == b"A":
        return _Failed(answer=answer_from_bytes(raw[1:]))
    d = orjson.loads(raw[1:])
    exc = ServiceError(d["message"], d["details"])
    exc.code = d["code"]
    return _Failed(error=exc)


class RedisAnswerCache(AnswerCache):
    """Several coordinators' cache in one Redis. Within a process the in-flight table of
    ``AnswerCache`` still joins concurrent requests; across processes a lock key
    (``SET NX`` with a lease of ``lease_s``, renewed by its holder while it computes)
    elects the one that computes, and the others poll for its entry or its hand-over,
    and take the lock over once it lapses. Entries expire in Redis by their TTL.

    When Redis does not answer, requests are served by an in-process ``AnswerCache``
    (``local``) and a warning is logged once: each process caches and single-flights on
    its own, as one coordinator does, until Redis answers again (tried ``RETRY_S`` after
    it failed). An answer computed while Redis failed is still returned; it is only not
    shared."""

    shared = True
    POLL_S = 0.02
    RETRY_S = 5.0
    TIMEOUT_S = 0.5
    POOL_SIZE = 32
    POOL_WAIT_S = 10.0
    """The Redis connections a process opens at most, and how long a command waits for one of them
    when all are in use (a blocking pool, as the rate limiter's in ``access.meter``). redis-py's
    default pool opened up to 100 and then failed the command at once ("Too many connections"):
    300 concurrent requests to a cached tool put the process on its own cache for ``RETRY_S``,
    each worker then computing the key on its own. A command takes well under a millisecond;
    waiting past ``POOL_WAIT_S`` for a connection is taken for Redis not answering."""
    LEASE_S = 10.0
    """The single-flight lock's lease. The holder renews it every third of it for as long
    as it computes, so the lease bounds how long a holder that died mid-computation
    (SIGKILL, OOM, a crash) keeps every other process's requests for the key waiting before
    one of them takes over; it does not bound a computation. With one fixed lease, long
    enough for any computation (120 s), a holder's death hung every caller of its key on
    every coordinator for up to two minutes. 10 s leaves a live holder's lock two renewals
    to spare (a renewal is a Redis command bounded by ``TIMEOUT_S``; an event loop stalled
    for seconds delays one) before another process could compute the key a second time."""

    def __init__(self, url: str, prefix: str = "sis", *, handover_s: float = 300.0, lease_s: float | None = None,
                 clock: Callable[[], float] = time.monotonic, max_bytes: int = DEFAULT_MAX_BYTES) -> None:
        super().__init__(clock=clock, handover_s=handover_s, max_bytes=max_bytes)
        from redis.asyncio import BlockingConnectionPool, Redis

        pool = BlockingConnectionPool.from_url(url, max_connections=self.POOL_SIZE, timeout=self.POOL_WAIT_S,
                                               **redis_link(self.TIMEOUT_S))
        self.redis = Redis.from_pool(pool)     # the client owns the pool: closed with it (``close``)
        self.prefix = f"{prefix}:cache"
        self.lease_s = self.LEASE_S if lease_s is None else lease_s
        self.local = AnswerCache(clock=clock, handover_s=handover_s, max_bytes=max_bytes)   # while Redis is down
        self.fallbacks = 0
        self._down_until = -float("inf")

    def _k(self, kind: str, key: str) -> str:
        return f"{self.prefix}:{kind}:{key}"

    async def get(self, key: str) -> Answer | None:
        raw = await self.redis.get(self._k("c", key))
        return None if raw is None else answer_from_bytes(raw)

    async def put(self, key: str, answer: Answer, ttl_s: float) -> None:
        if ttl_s <= 0 or not answer.may_cache:
            return
        await self.redis.set(self._k("c", key), answer_to_bytes(answer), px=max(1, int(ttl_s * 1000)))

    def clear(self) -> None:  # entries expire by themselves; tests use their own prefix
        super().clear()
        self.local.clear()

    async def close(self) -> None:
        await super().close()
        await self.local.close()
        await self.redis.aclose()

    def _take_handover(self, key: str) -> _Failed | None:
        return None   # read in run(), asynchronously

    @property
    def degraded(self) -> bool:
        return self._down_until != -float("inf")

    def _fell_back(self, exc: BaseException) -> None:
        if not self.degraded:
            self.fallbacks += 1
            log.warning("answer cache storage (Redis) unreachable or failing: %s; answers are cached per process "
                        "until it answers again (tried every %.0f s)", exc or type(exc).__name__, self.RETRY_S)
        self._down_until = self.clock() + self.RETRY_S

    async def run(self, key: str, ttl_s: float, compute: Compute, *, bound_s: float | None = None,
                  accepted: bool = False) -> Outcome:
        if self.clock() >= self._down_until:
            down_until = self._down_until
            try:
                if accepted:
                    raw = await self.redis.getdel(self._k("hk", key))
                    if raw is not None:
                        return _failed_from_bytes(raw).give()
                outcome = await super().run(key, ttl_s, compute, bound_s=bound_s, accepted=accepted)
            except _REDIS_DOWN as exc:
                self._fell_back(exc)
            else:
                # Shared again only when Redis answered this whole call: one that failed within it (the
                # answer's put, a renewal) fell back and moved the retry time, and was said back at once.
                if self.degraded and self._down_until == down_until and not accepted:
                    self._down_until = -float("inf")
                    log.warning("answer cache storage (Redis) answers again: answers are shared again")
                return outcome
        return await self.local.run(key, ttl_s, compute, bound_s=bound_s, accepted=accepted)

    async def _compute(self, key: str, ttl_s: float, compute: Compute, accepted: bool) -> Answer:
        """This process's one task for ``key``: compute if this process holds the lock, else
        wait for the process that does."""
        try:
            token = os.urandom(8).hex()
            lock = self._k("lock", key)
            while True:
                taken = await self.redis.set(lock, token, nx=True, px=self._lease_ms())
                holder = None if taken else await self.redis.get(lock)
                # ``redis_link`` sends a command again when its connection closed before the reply: the
                # first SET may have taken the lock, and the second then finds our own token there.
                if taken or holder == token.encode():
                    return await self._compute_locked(key, ttl_s, compute, accepted, token)
                outcome = await self._await_holder(key, lock, holder)
                if outcome is not None:
                    return outcome.give() if isinstance(outcome, _Failed) else outcome
                # the holder vanished without an outcome (killed): try to take the lock ourselves
        finally:
            self._inflight.pop(key, None)

    async def _await_holder(self, key: str, lock: str, holder: bytes | None) -> Answer | _Failed | None:
        while True:
            hit = await self.get(key)
            if hit is not None:
                return hit
            now = await self.redis.get(lock)
            if now != holder or now is None:
                hit = await self.get(key)
                if hit is not None:
                    return hit
                if holder is not None:
                    raw = await self.redis.get(self._k("h", holder.decode()))
                    if raw is not None:
                        return _failed_from_bytes(raw)
                return None
            await asyncio.sleep(self.POLL_S)

    async def _compute_locked(self, key: str, ttl_s: float, compute: Compute, accepted: bool,
                              token: str) -> Answer:
        lock = self._k("lock", key)
        # Read again under the lock: a request whose read (``run``) came just before the last holder
        # stored the answer, and whose lock came just after that holder let it go, computed it again.
        try:
            hit = await self.get(key)
        except BaseException:
            await self._release_quietly(lock, token)
            raise
        if hit is not None:
            await self._release_quietly(lock, token)
            return hit
        renewer = asyncio.create_task(self._renew(lock, token))
        try:
            answer = await compute()
        except asyncio.CancelledError:
            raise
        except BaseException as exc:
            try:
                await self._hand_over(key, token, _Failed(error=exc), accepted)
            except _REDIS_DOWN as down:   # the error still reaches this process's requests
                self._fell_back(down)
            raise
        else:
            try:
                if answer.may_cache:
                    await self.put(key, answer, ttl_s)
                else:
                    await self._hand_over(key, token, _Failed(answer=answer), accepted)
            except _REDIS_DOWN as exc:   # the answer stands; it is only not shared
                self._fell_back(exc)
            return answer
        finally:
            renewer.cancel()
            await self._release_quietly(lock, token)

    async def _release_quietly(self, lock: str, token: str) -> None:
        try:
            await self._release(lock, token)
        except _REDIS_DOWN as exc:   # the lock's lease lapses by itself
            self._fell_back(exc)

    def _lease_ms(self) -> int:
        return max(1, int(self.lease_s * 1000))

    async def _renew(self, lock: str, token: str) -> None:
        """The holder's heartbeat: extend the lock's lease every third of it, only while the
        lock is still ours. Once it is not (the lease lapsed, and another process may hold it
        now) or Redis fails, it renews no more; the computation goes on and its answer is
        still returned, the lease left to lapse."""
        try:
            while True:
                await asyncio.sleep(self.lease_s / 3)
                if not await self.redis.eval(_RENEW, 1, lock, token, self._lease_ms()):
                    log.warning("the answer cache's lock on %s lapsed before it was renewed (not renewed within "
                                "%.1f s): another process may compute the same answer", lock, self.lease_s)
                    return
        except _REDIS_DOWN as exc:
            self._fell_back(exc)

    async def _hand_over(self, key: str, token: str, failed: _Failed, accepted: bool) -> None:
        raw = _failed_to_bytes(failed)
        pipe = self.redis.pipeline()
        pipe.set(self._k("h", token), raw, px=30_000)            # for the requests waiting now
        if accepted:
            pipe.set(self._k("hk", key), raw, px=int(self.handover_s * 1000))   # for the next poll
        await pipe.execute()

    async def _release(self, lock: str, token: str) -> None:
        """Delete the lock only if it is still ours (a lease that lapsed may be another's now)."""
        await self.redis.eval("if redis.call('get', KEYS[1]) == ARGV[1] then return redis.call('del', KEYS[1]) "
                              "end return 0", 1, lock, token)


_RENEW = ("if redis.call('get', KEYS[1]) == ARGV[1] then return redis.call('pexpire', KEYS[1], ARGV[2]) "
          "end return 0")


def _redis_down_errors() -> tuple[type[BaseException], ...]:
    """Every error a Redis command can end in: not only one that does not answer, but one that
    answers with an error (out of memory under noeviction, READONLY after a failover, a database
    index it does not have), which failed every cached route with a 500 where the rate limiter
    beside it fell back."""
    from redis.exceptions import RedisError

    return (RedisError,)


_REDIS_DOWN = _redis_down_errors()


def redis_link(timeout_s: float) -> dict:
    """The options of every Redis client of a coordinator: connecting and each reply
    bounded by ``timeout_s``, and a command that meets a closed connection sent once more
    at once on a new one. A restarted Redis leaves every idle pooled connection closed,
    and without that one retry each would fail one request and put its process on its own
    windows and cache for ``RETRY_S`` though Redis answers. A timeout is not retried: a
    Redis that does not answer must not hold a request twice as long.

    A command whose connection closed after Redis ran it but before its reply came is run
    twice. The cache's lock takes that into account (its own token found on the lock is
    the lock taken); a handover read twice is lost, and its waiter computes the answer
    itself; a rate-limit hit counted twice makes that window one request stricter."""
    from redis.asyncio.retry import Retry
    from redis.backoff import NoBackoff
    from redis.exceptions import ConnectionError as RedisConnectionError

    return {"socket_connect_timeout": timeout_s, "socket_timeout": timeout_s,
            "retry": Retry(NoBackoff(), 1, supported_errors=(RedisConnectionError,)),
            "retry_on_error": [RedisConnectionError]}


def make_cache(redis_url: str, prefix: str, max_bytes: int = DEFAULT_MAX_BYTES) -> AnswerCache:
    return RedisAnswerCache(redis_url, prefix, max_bytes=max_bytes) if redis_url else AnswerCache(max_bytes=max_bytes)
