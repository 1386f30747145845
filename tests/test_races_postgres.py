"""Races under concurrency where PostgreSQL's READ COMMITTED let two transactions each read
the other's work out (SQLite's ``BEGIN IMMEDIATE`` write transaction holds the whole
database): sweep requests over the same ground, one requester's bound on queued requests,
a no-imagery cell queued again; and the shared answer cache's Redis pool and single flight.

The interleavings are forced where they can be: both transactions are held, up to a second,
just after the read a lock must order (``Meeting``), so that without the lock both read
before either writes, and with it the second is still waiting for the lock when the first
goes on. PostgreSQL tests run where SIS_TEST_DATABASE_URL names a server, Redis ones where
SIS_TEST_REDIS_URL names one."""
from __future__ import annotations

import asyncio
import contextlib
import contextvars
import random
from collections import Counter
from datetime import datetime, timezone
from typing import AsyncIterator

import pytest
from sqlalchemy import func, select
from sqlalchemy.exc import IntegrityError

from coordinator.core.cache import RedisAnswerCache
from coordinator.core.db.models import CoverageCell, SweepJob, SweepRequest
from coordinator.core.errors import RateLimited
from coordinator.core.honesty import Answer
from coordinator.sweeps import coverage, requests
from coordinator.sweeps import transitions as tr
from coordinator.sweeps.service import sweeps_of
from tests.conftest import fresh_postgres
from tests.support import Coordinator, stop_coordinator
from tests.test_access_support import REDIS_URL, unique_prefix
from tests.test_scale_redis_cache_lock import counting
from tests.test_sweeps_kit import CENTRE, photos, start  # noqa: F401

IP = "192.0.2.7"
_queueing = contextvars.ContextVar("queueing", default=False)


@pytest.fixture
async def pg_url(pg_database) -> str:
    if not pg_database:
        pytest.skip("PostgreSQL suite: set SIS_TEST_DATABASE_URL")
    return await fresh_postgres(pg_database)


@pytest.fixture
async def pg(pg_url, photos) -> AsyncIterator[Coordinator]:   # noqa: F811
    c = await start(pg_url, photos, sweep_max_queued_per_requester=100)
    yield c
    await stop_coordinator(c)


class Meeting:
    """Holds each of the first ``n`` arrivals until all ``n`` have arrived, at most ``wait_s``;
    later arrivals pass at once."""

    def __init__(self, n: int = 2, wait_s: float = 1.0) -> None:
        self.n, self.wait_s, self.arrived = n, wait_s, 0
        self.all = asyncio.Event()

    async def arrive(self) -> None:
        self.arrived += 1
        if self.arrived >= self.n:
            self.all.set()
        if self.arrived <= self.n:
            with contextlib.suppress(asyncio.TimeoutError):
                await asyncio.wait_for(self.all.wait(), self.wait_s)


def meet_after_reading_states(monkeypatch) -> tuple[Meeting, list[BaseException]]:  # noqa: ANN001
    """Every request's write transaction (``requests._queue``) held just after it read its
    cells' states; each attempt that failed is kept."""
    meeting, failed = Meeting(), []
    real_queue, real_states = requests._queue, coverage.cell_states

    async def queue(*args, **kw):  # noqa: ANN002, ANN003
        token = _queueing.set(True)
        try:
            return await real_queue(*args, **kw)
        except BaseException as exc:
            failed.append(exc)
            raise
        finally:
            _queueing.reset(token)

    async def cell_states(session, cells):  # noqa: ANN001
        out = await real_states(session, cells)
        if _queueing.get():
            await meeting.arrive()
        return out

    monkeypatch.setattr(requests, "_queue", queue)
    monkeypatch.setattr(coverage, "cell_states", cell_states)
    return meeting, failed


async def held_cells(c: Coordinator) -> tuple[dict[int, tuple[str, str | None]], Counter]:
    """Each coverage cell's state and request, and how many requests' jobs hold each cell."""
    async with c.services.db.read() as s:
        cells = {r.cell: (r.state, r.request_id) for r in (await s.execute(select(CoverageCell))).scalars()}
        by_request: dict[str, set[str]] = {}
        for sid, job_cells in (await s.execute(select(SweepJob.sweep_id, SweepJob.cells))).all():
            by_request.setdefault(sid, set()).update(job_cells)
    return cells, Counter(cell for held in by_request.values() for cell in held)


async def queued_requests(c: Coordinator) -> list[SweepRequest]:
    async with c.services.db.read() as s:
        return list((await s.execute(select(SweepRequest).where(SweepRequest.state == tr.REQUEST_QUEUED)
                                     .order_by(SweepRequest.requested_at))).scalars())


# ---- sweep requests over the same ground ----------------------------------------------------------

@pytest.mark.postgres
async def test_two_requests_over_the_same_ground_the_second_waits_and_merges_at_its_first_attempt(
        pg, photos, monkeypatch):  # noqa: F811
    """Both read the ground free before either claimed it, and the second failed on the
    coverage key (three such losses answered 500). Locked, the second reads the first's
    cells and merges into it, or queues only the ground left."""
    photos.scatter(*CENTRE, radius_m=350, n=40, seed=3)
    meeting, failed = meet_after_reading_states(monkeypatch)
    sweeps = sweeps_of(pg.services)
    east = coverage.offset(*CENTRE, 120, 0)
    outs = await asyncio.gather(requests.submit(sweeps, *CENTRE, 300, IP),
                                requests.submit(sweeps, *east, 300, "192.0.2.8"))
    assert failed == [], f"an attempt failed: {failed[0]!r}"
    assert meeting.arrived == 2
    assert all(o.queued for o in outs), [o.as_json() for o in outs]
    ids = {o.request["id"] for o in outs}
    cells, in_jobs = await held_cells(pg)
    assert {rid for _, rid in cells.values()} <= ids
    assert max(in_jobs.values()) == 1, "a cell's photos in the jobs of two requests"


@pytest.mark.postgres
async def test_a_no_imagery_cell_with_photos_now_is_queued_again_by_one_request_not_two(
        pg, photos, monkeypatch):  # noqa: F811
    """Ground swept before with no imagery that has photos now is queued again (its row
    updated, not inserted, so no key stops the second): two requests at once both read it
    ``no_imagery``, both moved it to queued and both made jobs for its photos."""
    near = photos.scatter(*CENTRE, radius_m=60, n=6, seed=4)
    bare = {coverage.point_cell(p.lat, p.lon) for p in near}
    at = datetime(2026, 6, 1, tzinfo=timezone.utc)
    async with pg.services.db.write() as s:
        for cell in bare:
            s.add(CoverageCell(cell=cell, state=tr.CELL_NO_IMAGERY, request_id=None, updated_at=at, covered_at=at))
    meeting, failed = meet_after_reading_states(monkeypatch)
    sweeps = sweeps_of(pg.services)
    outs = await asyncio.gather(*(requests.submit(sweeps, *CENTRE, 300, ip) for ip in (IP, "192.0.2.8")))
    assert failed == [] and meeting.arrived == 2
    assert sorted((o.queued, o.merged) for o in outs) == [(True, False), (True, True)], [o.as_json() for o in outs]
    cells, in_jobs = await held_cells(pg)
    assert {cells[c] for c in bare} == {(tr.CELL_QUEUED, next(o.request["id"] for o in outs if not o.merged))}
    assert set(in_jobs) == {coverage.cell_text(c) for c in bare} and set(in_jobs.values()) == {1}
    assert len(await queued_requests(pg)) == 1


@pytest.mark.postgres
async def test_many_overlapping_requests_at_once_are_all_answered_and_each_cell_is_held_once(pg, photos):  # noqa: F811
    """60 requests over overlapping circles on fresh ground at once (the audit's 150 answered
    6 to 21 of them 500): every one queued or merged, every cell held by one of them, no
    cell's photos in two requests' jobs."""
    rnd = random.Random(5)
    photos.scatter(*CENTRE, radius_m=700, n=200, seed=5)
    sweeps = sweeps_of(pg.services)
    points = [coverage.offset(*CENTRE, rnd.uniform(-250, 250), rnd.uniform(-250, 250)) for _ in range(60)]
    outs = await asyncio.gather(*(requests.submit(sweeps, la, lo, 300, f"192.0.2.{i}")
                                  for i, (la, lo) in enumerate(points)), return_exceptions=True)
    errors = [o for o in outs if isinstance(o, BaseException)]
    assert errors == [], f"{len(errors)} of 60 failed, the first: {errors[0]!r}"
    assert all(o.queued for o in outs), Counter(o.reason_code for o in outs)
    cells, in_jobs = await held_cells(pg)
    ids = {o.request["id"] for o in outs}
    assert {rid for _, rid in cells.values()} <= ids
    assert in_jobs and max(in_jobs.values()) == 1


# ---- one requester's bound --------------------------------------------------------------------------

@pytest.mark.postgres
async def test_one_requester_at_its_bound_is_refused_though_its_requests_come_at_once(
        pg_url, photos, monkeypatch):  # noqa: F811
    """Two requests from one address over ground far apart, the bound one: each counted the
    other's uncommitted request out, and both were queued."""
    far = (CENTRE[0] + 0.2, CENTRE[1])            # about 22 km north: no ground lock in common
    for i, (la, lo) in enumerate((CENTRE, far)):
        photos.scatter(la, lo, radius_m=250, n=5, seed=40 + i)
    c = await start(pg_url, photos, sweep_max_queued_per_requester=1)
    try:
        meeting, real = Meeting(), requests._within_requester_bound

        async def bound(*args, **kw):  # noqa: ANN002, ANN003
            await real(*args, **kw)
            await meeting.arrive()

        monkeypatch.setattr(requests, "_within_requester_bound", bound)
        sweeps = sweeps_of(c.services)
        outs = await asyncio.gather(*(requests.submit(sweeps, la, lo, 300, IP) for la, lo in (CENTRE, far)),
                                    return_exceptions=True)
        assert sorted(type(o).__name__ for o in outs) == ["Outcome", "RateLimited"], outs
        refused = next(o for o in outs if isinstance(o, RateLimited))
        assert refused.details == {"queued": 1, "limit": 1}
        assert len(await queued_requests(c)) == 1
    finally:
        await stop_coordinator(c)


@pytest.mark.postgres
async def test_forty_requests_at_once_from_one_address_queue_no_more_than_its_bound(pg_url, photos):  # noqa: F811
    """The audit's 40 at once with a bound of 5 queued 15 (26 over two workers)."""
    places = [(CENTRE[0] + 0.05, CENTRE[1] + 0.02 * i) for i in range(40)]
    for i, (la, lo) in enumerate(places):
        photos.scatter(la, lo, radius_m=250, n=5, seed=100 + i)
    c = await start(pg_url, photos, sweep_max_queued_per_requester=5)
    try:
        sweeps = sweeps_of(c.services)
        outs = await asyncio.gather(*(requests.submit(sweeps, la, lo, 300, IP) for la, lo in places),
                                    return_exceptions=True)
        kinds = Counter(type(o).__name__ for o in outs)
        assert kinds == {"Outcome": 5, "RateLimited": 35}, kinds
        assert len(await queued_requests(c)) == 5
    finally:
        await stop_coordinator(c)


# ---- a claim that fails every time --------------------------------------------------------------------

async def test_a_claim_lost_at_every_attempt_is_answered_503_with_retry_after_not_500(
        db_url, photos, monkeypatch):  # noqa: F811
    photos.scatter(*CENTRE, radius_m=300, n=10, seed=6)
    c = await start(db_url, photos)
    try:
        tries = []

        async def losing(*args, **kw):  # noqa: ANN002, ANN003
            tries.append(1)
            raise IntegrityError("INSERT INTO coverage_cells ...", {}, Exception(
                'duplicate key value violates unique constraint "coverage_cells_pkey"'))

        monkeypatch.setattr(requests, "_queue", losing)
        r = await c.post("/earth/sweep-request", {"lat": CENTRE[0], "lon": CENTRE[1], "radius": 300})
        assert r.status == 503, r.body
        assert r.headers.get("Retry-After") == str(requests.RETRY_AFTER_S)
        assert r.json()["error"]["code"] == "unavailable"
        assert len(tries) == requests.QUEUE_ATTEMPTS
        async with c.services.db.read() as s:
            assert (await s.execute(select(func.count()).select_from(SweepRequest))).scalar_one() == 0
    finally:
        await stop_coordinator(c)


def test_the_ground_lock_keys_are_few_signed_and_shared_by_requests_sharing_a_cell():
    a = coverage.circle_cells(*CENTRE, 1000)
    b = coverage.circle_cells(*coverage.offset(*CENTRE, 1500, 0), 1000)
    ka, kb = requests._ground_keys(a), requests._ground_keys(b)
    assert 1 <= len(ka) <= 7 and ka == sorted(ka)
    assert set(ka) & set(kb)
    assert all(-2**63 <= k < 2**63 for k in ka + kb)
    assert requests._signed(2**64 - 1) == -1 and requests._signed(5) == 5
    assert -2**63 <= requests._requester_key("f" * 64) < 2**63


# ---- the shared answer cache ----------------------------------------------------------------------------

redis_only = pytest.mark.skipif(not REDIS_URL, reason="Redis tests: set SIS_TEST_REDIS_URL")


async def forget(prefix: str) -> None:
    from redis.asyncio import Redis

    r = Redis.from_url(REDIS_URL)
    try:
        async for k in r.scan_iter(f"{prefix}:*"):
            await r.delete(k)
    finally:
        await r.aclose()


@redis_only
async def test_a_burst_of_requests_for_one_cold_key_waits_for_redis_connections_and_computes_once(monkeypatch):
    """300 requests at once over two processes' caches (150 each): redis-py's default pool
    failed the 101st concurrent command ("Too many connections"), each process fell back to
    its own cache for ``RETRY_S`` and computed the key on its own."""
    # The reply timeout (0.5 s) set aside: 300 requests on one event loop of a loaded machine can
    # stall it past that while Redis is up, a fallback this test would take for the pool's.
    monkeypatch.setattr(RedisAnswerCache, "TIMEOUT_S", 30.0)
    prefix = unique_prefix()
    a, b = RedisAnswerCache(REDIS_URL, prefix), RedisAnswerCache(REDIS_URL, prefix)
    computed: list[str] = []
    try:
        outs = await asyncio.gather(*(cache.run("k", 60, counting(computed, name, 0.05), bound_s=10)
                                      for _ in range(150) for cache, name in ((a, "a"), (b, "b"))))
        assert (a.fallbacks, b.fallbacks) == (0, 0)
        assert len(computed) == 1, computed
        assert {o.data["by"] for o in outs} == set(computed)
        assert a.redis.connection_pool.max_connections == RedisAnswerCache.POOL_SIZE
    finally:
        await a.close()
        await b.close()
        await forget(prefix)
    assert not any(conn.is_connected for conn in a.redis.connection_pool._available_connections)   # closed with it


@redis_only
async def test_a_request_that_missed_just_before_the_answer_was_stored_reads_it_under_the_lock():
    """Its read came just before the holder stored the answer, its lock just after the holder
    let it go: it computed the answer again."""
    prefix = unique_prefix()
    a, b = RedisAnswerCache(REDIS_URL, prefix), RedisAnswerCache(REDIS_URL, prefix)
    computed: list[str] = []
    try:
        real_get, reads = b.get, []

        async def get(key: str):  # noqa: ANN202
            reads.append(key)
            return None if len(reads) == 1 else await real_get(key)   # the first read: before "a" stored

        b.get = get
        assert (await a.run("k", 60, counting(computed, "a", 0.05))).data == {"by": "a"}
        assert (await b.run("k", 60, counting(computed, "b", 0.05))).data == {"by": "a"}
        assert computed == ["a"]
        assert await b.redis.get(b._k("lock", "k")) is None       # the lock it took is let go
    finally:
        await a.close()
        await b.close()
        await forget(prefix)
