"""Several coordinators on one PostgreSQL database: the hazard poller and the lease
sweeper run in one of them at a time (``core.db.leader``), and another takes over
within a bounded time when the leader stops or loses its connection."""
from __future__ import annotations

import asyncio
import time

import pytest
from sqlalchemy import func, select, text
from sqlalchemy.ext.asyncio import create_async_engine

from coordinator.core.db.models import EventPoll
from coordinator.sweeps.service import sweeps_of
from tests.support import make_settings, start_coordinator, stop_coordinator

pytestmark = pytest.mark.postgres

RETRY_S = 0.3          # how often a standby tries for the lock, and a leader checks its connection


@pytest.fixture
async def pg_url(pg_database) -> str:
    if not pg_database:
        pytest.skip("PostgreSQL suite: set SIS_TEST_DATABASE_URL")
    from tests.conftest import reset_postgres
    from tests.test_sweeps_kit import migrate
    await reset_postgres(pg_database)
    await migrate(pg_database)
    return pg_database


async def start_background(url: str, upstream):
    """A coordinator whose poller and sweeper are started, as ``sis serve`` starts them."""
    settings = make_settings(url, upstream).model_copy(update={"poll_interval_s": 0.2,
                                                                "lease_sweep_interval_s": 0.1})
    c = await start_coordinator(settings)
    sweeper = sweeps_of(c.services).sweeper
    for role in (c.services.poller, sweeper):
        role.leader.retry_s = RETRY_S
    c.services.poller.start()
    sweeper.start()
    return c


def work_done(c) -> tuple[int, int]:
    return c.services.poller.polls, sweeps_of(c.services).sweeper.pass_count


async def until(predicate, timeout: float) -> float:
    """Seconds until ``predicate()`` held (TimeoutError past ``timeout``)."""
    t0 = time.monotonic()
    while not predicate():
        if time.monotonic() - t0 > timeout:
            raise TimeoutError
        await asyncio.sleep(0.02)
    return time.monotonic() - t0


async def test_two_coordinators_poll_and_sweep_in_one_and_the_other_takes_over(pg_url, upstream):
    a = await start_background(pg_url, upstream)
    b = None
    try:
        await until(lambda: all(work_done(a)), 5)      # a started alone: it leads both roles
        b = await start_background(pg_url, upstream)
        await asyncio.sleep(1.5)                        # five retries of b's, many polls and passes of a's
        assert work_done(b) == (0, 0), "the standby coordinator polled or swept"
        assert not b.services.poller.leading and not sweeps_of(b.services).sweeper.leading
        assert b.services.poller.running                # standing by, not stopped
        polls_a = a.services.poller.polls
        async with a.services.db.read() as s:
            recorded = await s.scalar(select(func.count()).select_from(EventPoll))
        assert recorded >= polls_a >= 5                  # every recorded poll is a's (none of b's)
        await stop_coordinator(a)
        a = None
        took = await until(lambda: all(work_done(b)), 3 * RETRY_S + 2)
        print(f"\nthe standby took over both roles {took:.2f} s after the leader stopped (retry {RETRY_S} s)")
        assert b.services.poller.leading and sweeps_of(b.services).sweeper.leading
    finally:
        for c in (a, b):
            if c is not None:
                await stop_coordinator(c)


async def test_a_leader_that_loses_its_connection_stops_and_the_standby_takes_over(pg_url, upstream):
    """A leader whose session ends (the process died, the network went) has lost its lock:
    it must stop working at once, since another process may lead already."""
    a = await start_background(pg_url, upstream)
    b = await start_background(pg_url, upstream)
    try:
        await until(lambda: a.services.poller.leading or b.services.poller.leading, 5)
        leader, standby = (a, b) if a.services.poller.leading else (b, a)
        pid = await leader.services.poller.leader.backend_pid()
        eng = create_async_engine(pg_url)
        async with eng.connect() as conn:
            assert (await conn.execute(text("SELECT pg_terminate_backend(:p)"), {"p": pid})).scalar()
        await eng.dispose()
        took = await until(lambda: standby.services.poller.leading, 3 * RETRY_S + 2)
        print(f"\nthe standby leads {took:.2f} s after the leader's session was ended")
        await until(lambda: not leader.services.poller.leading, RETRY_S + 1)   # noticed at its next check
        before = leader.services.poller.polls
        await asyncio.sleep(1.0)
        assert not leader.services.poller.leading
        assert leader.services.poller.polls == before     # the old leader polls no more...
        assert leader.services.poller.running             # ...but stands by, to lead again later
    finally:
        await stop_coordinator(a)
        await stop_coordinator(b)


async def test_on_sqlite_one_process_is_assumed_and_the_work_just_runs(sqlite_url, upstream):
    c = await start_background(sqlite_url, upstream)
    try:
        await until(lambda: all(work_done(c)), 5)
        assert c.services.poller.leading and c.services.poller.leader.is_sqlite
    finally:
        await stop_coordinator(c)
