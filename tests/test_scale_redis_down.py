"""When Redis is down: per-minute limits fall back to each process's own windows with a
logged warning (never to no limits, never to refusing everyone), the shared answer
cache falls back to the in-process one, and both return to Redis when it answers."""
from __future__ import annotations

import asyncio
import logging
from collections import Counter

import pytest

from coordinator.core.access.meter import RateLimiter
from coordinator.core.cache import RedisAnswerCache
from tests.support import free_port, make_settings, start_coordinator, stop_coordinator
from tests.test_access_support import REDIS_URL, burst, unique_prefix

needs_redis = pytest.mark.skipif(not REDIS_URL, reason="Redis tests: set SIS_TEST_REDIS_URL")


def allowed(statuses: list[int]) -> int:
    counts = Counter(statuses)
    assert set(counts) <= {200, 429}, counts
    return counts[200]


def warnings_about(caplog, words: str) -> int:
    return sum(1 for r in caplog.records if r.levelno == logging.WARNING and words in r.getMessage())


async def test_with_redis_unreachable_limits_are_per_process_and_exact_and_the_cache_is_local(
        sqlite_url, upstream, caplog):
    caplog.set_level(logging.WARNING)
    c = await start_coordinator(make_settings(sqlite_url, upstream, redis_url=f"redis://127.0.0.1:{free_port()}/0",
                                              rate_limit_prefix=unique_prefix()))
    try:
        cache = c.services.cache
        assert cache.shared
        r1 = await c.get("/earth/events")
        r2 = await c.get("/earth/events")
        assert r1.status == r2.status == 200
        assert r1.json() == r2.json()
        assert cache.degraded and cache.local.hits == 1     # the second answer came from this process's cache
        assert warnings_about(caplog, "answer cache storage (Redis) unreachable") == 1

        statuses = await burst(c.base_url, "/earth/limits", clients=64, per_client=4)
        got = allowed(statuses)
        print(f"\nRedis unreachable: {got} + 2 of {len(statuses) + 2} allowed (64 concurrent clients, 120/min)")
        assert 117 <= got <= 119                       # 120 less the two above: neither no limits nor nobody
        assert c.services.access.limiter.degraded
        assert warnings_about(caplog, "rate-limit storage (Redis) unreachable") == 1   # said once, not per request
    finally:
        await stop_coordinator(c)


@needs_redis
async def test_a_redis_that_answers_with_errors_is_fallen_back_from_like_one_that_does_not_answer(
        sqlite_url, upstream, caplog):
    """Out of memory under noeviction, READONLY after a failover, a database index it does not have: Redis
    answers every command with an error. The cache took only silence for an outage, and every cached
    route answered 500 while the rate limiter beside it fell back."""
    from urllib.parse import urlparse
    caplog.set_level(logging.WARNING)
    at = urlparse(REDIS_URL)
    c = await start_coordinator(make_settings(sqlite_url, upstream, redis_url=f"redis://{at.hostname}:{at.port}/99",
                                              rate_limit_prefix=unique_prefix()))
    try:
        for path in ("/earth/events", "/earth/limits", "/public/v1/anon/events"):
            r = await c.get(path)
            assert r.status == 200, (path, r.body)
        assert c.services.cache.degraded and c.services.access.limiter.degraded
        assert warnings_about(caplog, "answer cache storage (Redis) unreachable or failing") == 1
    finally:
        await stop_coordinator(c)


class RedisProxy:
    """A TCP relay in front of the real Redis that can stop answering mid-run (every
    connection cut, the port refusing) and start again on the same port."""

    def __init__(self, target: str) -> None:
        from urllib.parse import urlparse
        u = urlparse(target)
        self.target = (u.hostname, u.port or 6379)
        self.db = u.path
        self.port = free_port()
        self.server: asyncio.AbstractServer | None = None
        self.writers: set[asyncio.StreamWriter] = set()

    @property
    def url(self) -> str:
        return f"redis://127.0.0.1:{self.port}{self.db}"

    async def start(self) -> "RedisProxy":
        self.server = await asyncio.start_server(self._relay, "127.0.0.1", self.port, reuse_address=True)
        return self

    async def stop(self) -> None:
        assert self.server is not None
        self.server.close()
        for w in list(self.writers):
            w.close()
        await self.server.wait_closed()
        self.writers.clear()

    async def _relay(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        up_r, up_w = await asyncio.open_connection(*self.target)
        self.writers.update((writer, up_w))

        async def pipe(r: asyncio.StreamReader, w: asyncio.StreamWriter) -> None:
            try:
                while data := await r.read(65536):
                    w.write(data)
                    await w.drain()
            except (ConnectionError, OSError):
                pass
            finally:
                w.close()

        await asyncio.gather(pipe(reader, up_w), pipe(up_r, writer))


@needs_redis
async def test_redis_stopping_mid_run_falls_back_per_process_and_sharing_resumes_when_it_answers(
        sqlite_url, upstream, caplog, monkeypatch):
    caplog.set_level(logging.WARNING)
    # The outage here is a stop (connections cut, the port refusing), which the limiter sees
    # at once, without its reply timeout. That timeout (0.5 s) stays out of the way: on a slow
    # machine everything below shares one event loop (both coordinators, their clients and
    # the proxy), which can stall past it while Redis is up; a request would then be counted
    # in its process's own window, and the outage's exact 120 per process would come out short.
    monkeypatch.setattr(RateLimiter, "TIMEOUT_S", 30.0)
    proxy = await RedisProxy(REDIS_URL).start()
    prefix = unique_prefix()
    a = await start_coordinator(make_settings(sqlite_url, upstream, redis_url=proxy.url, rate_limit_prefix=prefix))
    b = await start_coordinator(make_settings(sqlite_url, upstream, redis_url=proxy.url, rate_limit_prefix=prefix))
    limiters = (a.services.access.limiter, b.services.access.limiter)
    try:
        for limiter in limiters:
            limiter.RETRY_S = 0.3
        # Redis up: one window for both coordinators, and not one request counted elsewhere.
        sa, sb = await asyncio.gather(burst(a.base_url, "/earth/limits", clients=10, per_client=5),
                                      burst(b.base_url, "/earth/limits", clients=10, per_client=5))
        assert allowed(sa + sb) == 100
        assert [limiter.fallbacks for limiter in limiters] == [0, 0]

        await proxy.stop()
        # Redis gone: each process counts on its own, 120 each, exactly.
        sa, sb = await asyncio.gather(burst(a.base_url, "/earth/limits", clients=32, per_client=5),
                                      burst(b.base_url, "/earth/limits", clients=32, per_client=5))
        print(f"\nRedis stopped mid-run: {allowed(sa)} + {allowed(sb)} of {len(sa + sb)} allowed "
              "(per-process windows of 120)")
        assert 119 <= allowed(sa) <= 121 and 119 <= allowed(sb) <= 121
        assert all(limiter.degraded for limiter in limiters)
        assert [limiter.fallbacks for limiter in limiters] == [1, 1]
        assert warnings_about(caplog, "rate-limit storage (Redis) unreachable") == 2    # once per process

        await proxy.start()
        # Until the moment each process asks Redis again (RETRY_S after its last failure),
        # however long the outage's requests took to finish on this machine.
        await asyncio.sleep(max(limiter._down_until - limiter._clock() for limiter in limiters) + 0.05)
        # Redis back: the shared window resumes with the 100 it held, so 20 more pass in all.
        sa, sb = await asyncio.gather(burst(a.base_url, "/earth/limits", clients=5, per_client=5),
                                      burst(b.base_url, "/earth/limits", clients=5, per_client=5))
        assert allowed(sa + sb) == 20
        assert not any(limiter.degraded for limiter in limiters)
        assert [limiter.fallbacks for limiter in limiters] == [1, 1]   # no second outage on the way back
        assert warnings_about(caplog, "answers again") >= 2
    finally:
        await stop_coordinator(a)
        await stop_coordinator(b)
        if proxy.server is not None and proxy.server.is_serving():
            await proxy.stop()


@needs_redis
async def test_a_redis_restarted_between_requests_is_used_again_without_a_fallback():
    """A restart leaves every idle pooled connection closed. The next commands are sent
    once more on new connections, so neither the limiter nor the answer cache falls back
    to its own process's windows for RETRY_S while Redis answers (before that retry, the
    first request after the restart did: fallbacks 1)."""
    proxy = await RedisProxy(REDIS_URL).start()
    limiter = RateLimiter(proxy.url, unique_prefix())
    cache = RedisAnswerCache(proxy.url, unique_prefix())
    try:
        await asyncio.gather(*(limiter.hit(1000, "idle") for _ in range(20)))     # 20 pooled connections
        await asyncio.gather(*(cache.get(f"k{i}") for i in range(20)))
        assert len(limiter._pool._available_connections) > 1
        await proxy.stop()
        await proxy.start()
        windows = await asyncio.gather(*(limiter.hit(1000, "idle") for _ in range(20)))
        assert limiter.fallbacks == 0 and not limiter.degraded
        assert min(w.remaining for w in windows) == 1000 - 40          # all 40 counted in the shared window
        assert await asyncio.gather(*(cache.get(f"k{i}") for i in range(20))) == [None] * 20   # no error raised
    finally:
        await limiter.close()
        await cache.close()
        await proxy.stop()


@needs_redis
async def test_a_lock_taken_by_a_command_sent_twice_is_the_callers_own():
    """A command whose connection closed after Redis ran it is sent again (``redis_link``):
    the cache's first SET NX took the lock, its reply was lost, and the second found the
    key held, by this caller's own token. That is the lock taken: the answer is computed
    at once, not awaited from a holder that is the caller itself until the lock lapses."""
    from coordinator.core.honesty import Answer

    cache = RedisAnswerCache(REDIS_URL, unique_prefix(), lease_s=30)
    real_set = cache.redis.set

    async def set_sent_twice(*args, **kwargs):  # noqa: ANN002, ANN003
        await real_set(*args, **kwargs)              # ran; its reply lost with the connection
        return await real_set(*args, **kwargs)       # the same command again: None, the key is held

    cache.redis.set = set_sent_twice
    computed = []

    async def compute() -> Answer:
        computed.append(1)
        return Answer({"n": 1})

    try:
        outcome = await asyncio.wait_for(cache.run("k", 60, compute), 5)
        assert outcome.data == {"n": 1} and computed == [1]
    finally:
        await cache.close()


@needs_redis
async def test_healthz_says_when_redis_is_unreachable_and_asks_it_again_itself(sqlite_url, upstream):
    """/healthz said "ok" with Redis down while limits were counted per process (each process
    giving a client the whole limit): it says so now, without failing the probe, and a process
    that no request reaches learns from the probe that Redis answers again."""
    proxy = await RedisProxy(REDIS_URL).start()
    c = await start_coordinator(make_settings(sqlite_url, upstream, redis_url=proxy.url,
                                              rate_limit_prefix=unique_prefix()))
    try:
        c.services.access.limiter.RETRY_S = 0.2
        body = (await c.get("/healthz")).json()
        assert body["redis"] == "ok" and "redisUnreachableSince" not in body
        await proxy.stop()
        assert (await c.get("/earth/limits")).status == 200              # served, counted in the process
        r = await c.get("/healthz")
        assert r.status == 200 and r.json()["status"] == "ok" and r.json()["redis"] == "unreachable"
        assert r.json()["redisUnreachableSince"].endswith("Z")
        await proxy.start()
        await asyncio.sleep(0.3)
        body = (await c.get("/healthz")).json()                           # no other request in between
        assert body["redis"] == "ok" and "redisUnreachableSince" not in body
    finally:
        await stop_coordinator(c)
        if proxy.server is not None and proxy.server.is_serving():
            await proxy.stop()
    plain = await start_coordinator(make_settings(sqlite_url, upstream))
    try:
        assert (await plain.get("/healthz")).json()["redis"] == "not configured"
    finally:
        await stop_coordinator(plain)
