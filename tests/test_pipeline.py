"""The pipeline runs the cache policy a tool declares: a TTL, single flight, the cold
behaviour (wait up to a bound, or 202 accepted), never caching a degraded answer, in
process and shared through Redis by several coordinators."""
from __future__ import annotations

import asyncio
import dataclasses
import os
import uuid
from typing import Any

import pytest
import tornado.web
from tornado.httpclient import AsyncHTTPClient

from coordinator.core.honesty import Answer, Health, SourceReport
from coordinator.core.registry import COLD_ACCEPTED, Param, STRING, Tool, ToolRegistry
from coordinator.sources.base import fetch
from coordinator.catalogue import all_tools, default_registry
from coordinator.sources.registry import load_adapters
from tests.support import free_port, make_settings, start_coordinator, stop_coordinator
from tests.test_mcp_sdk import sample_arguments
from tests.test_tool_faces import rest_url

REDIS_URL = os.environ.get("SIS_TEST_REDIS_URL", "")
needs_redis = pytest.mark.skipif(not REDIS_URL, reason="Redis tests: set SIS_TEST_REDIS_URL")


class SlowUpstream:
    """A loopback upstream that counts its requests and answers after a delay."""

    def __init__(self, delay_s: float = 0.3) -> None:
        self.hits = 0
        self.delay_s = delay_s
        self.ok = True

    async def start(self) -> "SlowUpstream":
        outer = self

        class H(tornado.web.RequestHandler):
            async def get(self) -> None:
                outer.hits += 1
                await asyncio.sleep(outer.delay_s)
                if not outer.ok:
                    self.set_status(503)
                self.finish({"value": outer.hits})

        self.port = free_port()
        self.server = tornado.web.Application([(r"/v", H)]).listen(self.port, "127.0.0.1")
        return self

    async def read(self) -> Answer:
        code, body = await fetch(f"http://127.0.0.1:{self.port}/v", 5)
        ok = code == 200
        return Answer({"upstreamHits": self.hits}, health=Health([SourceReport("slow", "CC0-1.0", ok=ok,
                                                                              error=None if ok else f"HTTP {code}")]))

    def stop(self) -> None:
        self.server.stop()


def probe(name: str, upstream: SlowUpstream, **decl: Any) -> Tool:
    async def handler(ctx, params) -> Answer:  # noqa: ANN001
        return await upstream.read()
    return Tool(name=name, title=name, description="test only", handler=handler, routes={"earth": f"/{name}"},
                params=(Param("q", STRING, "any text"),), **decl)


@pytest.fixture
async def slow():
    up = await SlowUpstream().start()
    yield up
    up.stop()


async def many(c, paths: list[str]) -> list[tuple[int, bytes]]:
    """Concurrent GETs on a client of their own (the shared client's ten slots would queue
    the coordinator's own upstream request behind them: both live in this process)."""
    client = AsyncHTTPClient(force_instance=True, max_clients=64)
    try:
        rs = await asyncio.gather(*(client.fetch(c.base_url + p, raise_error=False) for c, p in paths))
        return [(r.code, r.body) for r in rs]
    finally:
        client.close()


async def serve(sqlite_url, upstream, *tools: Tool, **settings: Any):
    return await start_coordinator(make_settings(sqlite_url, upstream, **settings),
                                   ToolRegistry([*all_tools(), *tools]))


async def test_a_hit_within_the_ttl_and_a_miss_after_it(sqlite_url, upstream, slow):
    c = await serve(sqlite_url, upstream, probe("cached_probe", slow, cache_ttl_s=60))
    now = [1000.0]
    c.services.cache.clock = lambda: now[0]
    try:
        first = await c.get("/earth/cached_probe?q=a")
        assert first.status == 200 and slow.hits == 1
        now[0] += 59
        assert (await c.get("/earth/cached_probe?q=a")).body == first.body and slow.hits == 1
        assert (await c.get("/earth/cached_probe?q=b")).status == 200 and slow.hits == 2   # another key
        now[0] += 2
        assert (await c.get("/earth/cached_probe?q=a")).status == 200 and slow.hits == 3
    finally:
        await stop_coordinator(c)


async def test_twenty_concurrent_cold_requests_reach_the_upstream_once(sqlite_url, upstream, slow):
    c = await serve(sqlite_url, upstream, probe("cached_probe", slow, cache_ttl_s=60))
    try:
        answers = await many(c, [(c, "/earth/cached_probe?q=x")] * 20)
        assert {code for code, _ in answers} == {200}
        assert slow.hits == 1
        assert len({body for _, body in answers}) == 1
    finally:
        await stop_coordinator(c)


async def test_a_degraded_answer_is_never_cached(sqlite_url, upstream, slow):
    slow.ok = False
    c = await serve(sqlite_url, upstream, probe("cached_probe", slow, cache_ttl_s=60))
    try:
        for n in (1, 2):
            r = await c.get("/earth/cached_probe?q=x")
            assert r.status == 200 and r.json()["health"]["degraded"] is True
            assert r.headers["Cache-Control"] == "no-store"
            assert slow.hits == n
        slow.ok = True
        await c.get("/earth/cached_probe?q=x")
        await c.get("/earth/cached_probe?q=x")
        assert slow.hits == 3
    finally:
        await stop_coordinator(c)


async def test_a_passed_cold_bound_answers_degraded_uncached_and_the_result_lands_later(sqlite_url, upstream, slow):
    slow.delay_s = 0.8
    tool = probe("bounded_probe", slow, cache_ttl_s=60, cold_bound_s=0.1, family_cold_bound_s={"earth": 0.1})
    c = await serve(sqlite_url, upstream, tool)
    try:
        r = await c.get("/earth/bounded_probe?q=x")
        body = r.json()
        assert r.status == 200 and body["pending"] is True and body["health"]["degraded"] is True
        assert r.headers["Cache-Control"] == "no-store" and r.headers["Retry-After"] == "5"
        assert body["caveats"][0].startswith("Degraded") and any("Not ready" in cv for cv in body["caveats"])
        again = await c.get("/earth/bounded_probe?q=x")      # the one computation is still running
        assert again.json()["pending"] is True and slow.hits == 1
        await asyncio.sleep(1.0)
        done = await c.get("/earth/bounded_probe?q=x")
        assert done.status == 200 and "pending" not in done.json() and done.json()["upstreamHits"] == 1
        assert slow.hits == 1
    finally:
        await stop_coordinator(c)


async def test_accepted_answers_202_then_200_on_the_same_url(sqlite_url, upstream, slow):
    slow.delay_s = 0.4
    c = await serve(sqlite_url, upstream, probe("accepted_probe", slow, cache_ttl_s=60, cold=COLD_ACCEPTED,
                                                retry_after_s=2))
    try:
        first = await asyncio.gather(*(c.get("/earth/accepted_probe?q=x") for _ in range(5)))
        for r in first:
            assert r.status == 202 and r.headers["Retry-After"] == "2" and r.json()["accepted"] is True
            assert r.headers["Cache-Control"] == "no-store"
        await asyncio.sleep(0.7)
        r = await c.get("/earth/accepted_probe?q=x")
        assert r.status == 200 and r.json()["upstreamHits"] == 1 and slow.hits == 1
    finally:
        await stop_coordinator(c)


async def test_an_accepted_computation_that_ends_degraded_is_handed_to_the_next_poll_once(sqlite_url, upstream,
                                                                                          slow):
    slow.ok, slow.delay_s = False, 0.1
    c = await serve(sqlite_url, upstream, probe("accepted_probe", slow, cache_ttl_s=60, cold=COLD_ACCEPTED))
    try:
        assert (await c.get("/earth/accepted_probe?q=x")).status == 202
        await asyncio.sleep(0.4)
        r = await c.get("/earth/accepted_probe?q=x")
        assert r.status == 200 and r.json()["health"]["degraded"] is True
        assert r.headers["Cache-Control"] == "no-store"
        assert (await c.get("/earth/accepted_probe?q=x")).status == 202      # not cached: computed anew
        await asyncio.sleep(0.3)
        assert slow.hits == 2
    finally:
        await stop_coordinator(c)


# Values of required parameters where the recorded samples answer (keyed sources get a key);
# any other parameter takes the faces' tests' sample value.
REQUIRED_SAMPLE = {"lat": "-6.2", "lon": "106.8", "bbox": "115,-8.25,115.25,-8", "id": "gdacs:EQ:1569499"}


async def test_every_registered_tool_that_declares_a_cache_is_served_from_it(sqlite_url, upstream):
    """Wraps each declared-cached tool of the default registry with a counter: a second
    identical request must not run the handler again. Fails for any tool whose declared
    policy the pipeline does not apply (or that caches by hand and declares nothing)."""
    counts: dict[str, int] = {}

    def counted(t: Tool) -> Tool:
        async def handler(ctx, params):  # noqa: ANN001
            counts[t.name] = counts.get(t.name, 0) + 1
            return await t.handler(ctx, params)
        return dataclasses.replace(t, handler=handler)

    declared = [t for t in default_registry() if t.cached and t.keyless]   # a scoped tool's cache is the same code
    assert {"hazard_events", "limits"} <= {t.name for t in declared}
    keys = {name: {"api_key": "k"} for name, cls in load_adapters().items() if cls.needs_key}
    c = await start_coordinator(make_settings(sqlite_url, upstream, sources=keys),
                                ToolRegistry([counted(t) if t.cached else t for t in default_registry()]))
    healthy = set()
    try:
        for t in declared:
            fam = t.families[0]
            args = sample_arguments(t)
            args.update({k: v for k, v in REQUIRED_SAMPLE.items() if k in args
                         and (k != "bbox" or (t.param(k).max_side_deg or 1) >= 0.25)})
            url = rest_url(t, fam, args)
            for _ in range(2):
                r = await c.get(url)
                while r.status == 202 and t.cold == COLD_ACCEPTED:     # accepted: the same URL until ready
                    await asyncio.sleep(0.02)
                    r = await c.get(url)
                assert r.status == 200, url
            if r.json().get("health", {}).get("degraded"):
                assert counts[t.name] == 2, f"{t.name}: a degraded answer was cached"
            else:
                healthy.add(t.name)
                assert counts[t.name] == 1, f"{t.name}: the declared cache was not applied"
        assert {"hazard_events", "limits"} <= healthy
    finally:
        await stop_coordinator(c)


@needs_redis
async def test_two_coordinators_sharing_redis_share_one_entry_and_one_computation(sqlite_url, tmp_path,
                                                                                  upstream, slow):
    prefix = f"t{uuid.uuid4().hex[:8]}"
    tool = probe("cached_probe", slow, cache_ttl_s=60)
    a = await serve(sqlite_url, upstream, tool, redis_url=REDIS_URL, rate_limit_prefix=prefix)
    b = await serve(f"sqlite+aiosqlite:///{tmp_path}/b.db", upstream, tool, redis_url=REDIS_URL,
                    rate_limit_prefix=prefix)
    try:
        answers = await many(a, [(x, "/earth/cached_probe?q=x") for x in [a, b] * 10])
        assert {code for code, _ in answers} == {200} and slow.hits == 1
        assert len({body for _, body in answers}) == 1
        assert (await b.get("/earth/cached_probe?q=x")).status == 200 and slow.hits == 1
        assert a.services.cache.shared and b.services.cache.shared
    finally:
        await stop_coordinator(a)
        await stop_coordinator(b)


@needs_redis
async def test_on_redis_an_accepted_tool_answers_202_on_one_coordinator_and_200_on_the_other(sqlite_url, tmp_path,
                                                                                            upstream, slow):
    prefix = f"t{uuid.uuid4().hex[:8]}"
    tool = probe("accepted_probe", slow, cache_ttl_s=60, cold=COLD_ACCEPTED)
    a = await serve(sqlite_url, upstream, tool, redis_url=REDIS_URL, rate_limit_prefix=prefix)
    b = await serve(f"sqlite+aiosqlite:///{tmp_path}/b.db", upstream, tool, redis_url=REDIS_URL,
                    rate_limit_prefix=prefix)
    try:
        assert (await a.get("/earth/accepted_probe?q=x")).status == 202
        await asyncio.sleep(0.05)
        assert (await b.get("/earth/accepted_probe?q=x")).status == 202
        await asyncio.sleep(0.6)
        r = await b.get("/earth/accepted_probe?q=x")
        assert r.status == 200 and slow.hits == 1
    finally:
        await stop_coordinator(a)
        await stop_coordinator(b)


async def test_the_cache_is_bounded_in_bytes_and_drops_expired_answers_before_live_ones():
    """Bounded in entries alone, ten thousand answers of 100 KB held 1.1 GB, and an expired answer stayed
    until read or evicted; past the byte budget the expired ones go first, then the least recently used."""
    from coordinator.core.cache import AnswerCache, answer_size

    now = [0.0]
    cache = AnswerCache(clock=lambda: now[0], max_bytes=10_000)
    big = Answer({"rows": "x" * 2_000})
    size = answer_size(big)
    assert 2_000 < size < 2_100
    await cache.put("short", big, ttl_s=5)
    await cache.put("a", big, ttl_s=60)
    await cache.put("b", big, ttl_s=60)
    await cache.get("a")                                     # a is now the most recently used
    now[0] = 10                                               # "short" has expired, unread
    for k in ("c", "d", "e"):
        await cache.put(k, big, ttl_s=60)
    assert cache.bytes <= 10_000 and cache.bytes == size * len(cache._entries)
    assert await cache.get("short") is None                  # the expired one went first
    assert await cache.get("b") is None and await cache.get("a") is big    # then the least recently used
    await cache.put("huge", Answer({"rows": "x" * 20_000}), ttl_s=60)    # over the whole budget: not kept
    assert await cache.get("huge") is None and await cache.get("e") is big
    cache.clear()
    assert cache.bytes == 0


def test_an_answer_shared_through_redis_comes_back_with_every_field_of_its_health():
    """Another process reads a shared answer back from its bytes: each report's fields were written out by
    name, so one that was not (``absent``: a dataset never loaded) came back said as "retry later", and
    an answer's demo mark was dropped."""
    import dataclasses

    from coordinator.core.cache import answer_from_bytes, answer_to_bytes
    from coordinator.core.honesty import Answer, Health, SourceReport

    reports = [SourceReport("dataset:osm", "n/a", ok=False, absent=True, error="no osm dataset has been loaded"),
               SourceReport("GDACS", "GDACS-terms", ok=True, records=3, demo=True, dataset={"id": 4})]
    answer = Answer({"count": None}, caveats=["x"], health=Health(reports), demo=True)
    back = answer_from_bytes(answer_to_bytes(answer))
    assert back.health.sources == reports and back.demo is True
    assert back.body() == answer.body()
    assert {f.name for f in dataclasses.fields(SourceReport)} <= set(orjson_keys(answer_to_bytes(answer)))


def orjson_keys(raw: bytes) -> set[str]:
    import orjson
    return set(orjson.loads(raw)["health"][0])


def test_a_demo_coordinator_keeps_its_answers_apart_in_a_shared_redis():
    from coordinator.services import cache_prefix, code_tag
    from tests.support import make_settings
    live = make_settings("sqlite+aiosqlite:///x.db", None)
    tag = code_tag()
    assert cache_prefix(live) == f"sis:{tag}"
    assert cache_prefix(live.model_copy(update={"demo": True})) == f"sis:demo:{tag}"


def test_another_release_of_the_code_keeps_its_cached_answers_apart(tmp_path):
    """After an upgrade the new code served the answers the old had cached in a shared Redis;
    the prefix holds a hash of the coordinator's sources, so any change of them moves it."""
    from coordinator.services import code_tag
    (tmp_path / "faces").mkdir()
    (tmp_path / "a.py").write_text("x = 1\n")
    (tmp_path / "faces" / "b.py").write_text("y = 2\n")
    (tmp_path / "catalogue.json").write_text("{}")
    (tmp_path / "__pycache__").mkdir()
    (tmp_path / "__pycache__" / "a.cpython-311.pyc").write_bytes(b"compiled")
    before = code_tag(tmp_path)
    assert len(before) == 12 and int(before, 16) >= 0
    code_tag.cache_clear()
    (tmp_path / "__pycache__" / "a.cpython-311.pyc").write_bytes(b"compiled again")   # not what answers
    assert code_tag(tmp_path) == before
    code_tag.cache_clear()
    (tmp_path / "catalogue.json").write_text('{"widgets": []}')       # data that shapes answers
    changed = code_tag(tmp_path)
    assert changed != before
    code_tag.cache_clear()
    (tmp_path / "faces" / "b.py").write_text("y = 3\n")
    assert code_tag(tmp_path) not in (before, changed)
    code_tag.cache_clear()
