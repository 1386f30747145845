"""Day, month and embed-budget counters live in the database: they survive a
coordinator restart, refuse at the ceiling with 429 and Retry-After, and stay
exact under concurrent requests, on SQLite and on PostgreSQL."""
from __future__ import annotations

from collections import Counter
from datetime import datetime, timezone

import asyncio

import pytest
from sqlalchemy.ext.asyncio import create_async_engine

from coordinator.core.access.meter import day_period, month_period, seconds_until_period_end
from coordinator.core.db import migrate
from tests.conftest import PG_URL, reset_postgres
from tests.support import make_settings, start_coordinator, stop_coordinator
from tests.test_access_support import burst, embed, key, set_usage


@pytest.fixture(params=["sqlite", pytest.param("postgres", marks=pytest.mark.postgres)])
def db_url(request, tmp_path) -> str:
    """Each database in turn. (The shared ``db_url`` fixture needs PostgreSQL configured even to
    skip it; this one asks for the session's PostgreSQL database only when one is configured.)"""
    if request.param == "sqlite":
        return f"sqlite+aiosqlite:///{tmp_path}/sis.db"
    if not PG_URL:
        pytest.skip("PostgreSQL suite: set SIS_TEST_DATABASE_URL")
    url = request.getfixturevalue("pg_database")
    asyncio.run(reset_postgres(url))
    return url


async def coordinator_on(db_url: str, upstream):
    """A coordinator on ``db_url``; PostgreSQL is migrated first, as an operator would (`sis migrate`)."""
    if not db_url.startswith("sqlite"):
        engine = create_async_engine(db_url)
        await migrate.upgrade_async(engine, db_url)
        await engine.dispose()
    return await start_coordinator(make_settings(db_url, upstream))


async def test_day_and_month_usage_survive_a_restart(db_url, upstream):
    c = await coordinator_on(db_url, upstream)
    try:
        secret, _ = await key(c, "Free")
        for _ in range(5):
            assert (await c.get(f"/public/v1/{secret}/events")).status == 200
    finally:
        await stop_coordinator(c)
    c = await coordinator_on(db_url, upstream)
    try:
        r = await c.get(f"/public/v1/{secret}/limits")
        assert r.status == 200
        quota = r.json()["quota"]
        assert quota["usedToday"] == 5 and quota["usedThisMonth"] == 5     # five before the restart; /limits is not counted
        assert quota["remainingToday"] == 5000 - 5
    finally:
        await stop_coordinator(c)


async def test_a_spent_day_quota_is_429_until_midnight_utc_and_stays_spent_after_a_restart(db_url, upstream):
    c = await coordinator_on(db_url, upstream)
    try:
        secret, rec = await key(c, "Free")
        now = datetime.now(timezone.utc)
        await set_usage(c, f"key:{rec.id}", day_period(now), 4999)
        await set_usage(c, f"key:{rec.id}", month_period(now), 7000)
        assert (await c.get(f"/public/v1/{secret}/events")).status == 200   # the 5000th of the day
        r = await c.get(f"/public/v1/{secret}/events")
        assert r.status == 429
        err = r.json()["error"]
        assert err["code"] == "rate_limited" and err["details"]["limit"] == "perDay"
        want = seconds_until_period_end(day_period(now), datetime.now(timezone.utc))
        assert abs(int(r.headers["Retry-After"]) - want) <= 3
        assert r.headers["RateLimit-Limit"] == "5000" and r.headers["RateLimit-Remaining"] == "0"
        usage = await c.services.access.key_usage(rec)
        assert usage["publicToday"] == 5000 and usage["publicThisMonth"] == 7001   # the refusal counted nowhere
    finally:
        await stop_coordinator(c)
    c = await coordinator_on(db_url, upstream)
    try:
        assert (await c.get(f"/public/v1/{secret}/events")).status == 429
        assert (await c.get("/public/v1/anon/events")).status == 200
    finally:
        await stop_coordinator(c)


async def test_limits_answer_when_the_day_quota_is_spent_and_are_not_counted(db_url, upstream):
    c = await coordinator_on(db_url, upstream)
    try:
        secret, rec = await key(c, "Free")
        now = datetime.now(timezone.utc)
        await set_usage(c, f"key:{rec.id}", day_period(now), 5000)
        await set_usage(c, f"key:{rec.id}", month_period(now), 7000)
        assert (await c.get(f"/public/v1/{secret}/events")).status == 429
        for _ in range(3):
            r = await c.get(f"/public/v1/{secret}/limits")
            assert r.status == 200, r.body
            quota = r.json()["quota"]
            assert quota["usedToday"] == 5000 and quota["remainingToday"] == 0
            assert quota["usedThisMonth"] == 7000 and quota["remainingThisMonth"] == 50000 - 7000
            assert int(r.headers["RateLimit-Limit"]) == 240                  # the per-minute window still counts it
        usage = await c.services.access.key_usage(rec)
        assert usage["publicToday"] == 5000 and usage["publicThisMonth"] == 7000
        await set_usage(c, f"key:{rec.id}", month_period(now), 50000)         # the month spent too
        assert (await c.get(f"/public/v1/{secret}/limits")).json()["quota"]["remainingThisMonth"] == 0
    finally:
        await stop_coordinator(c)


async def test_limits_of_a_revoked_key_are_refused_even_with_the_quota_spent(db_url, upstream):
    from coordinator.core.access import credentials as creds
    c = await coordinator_on(db_url, upstream)
    try:
        secret, rec = await key(c, "Free")
        await set_usage(c, f"key:{rec.id}", day_period(datetime.now(timezone.utc)), 5000)
        assert (await c.get(f"/public/v1/{secret}/limits")).status == 200   # the key is now in the lookup cache
        await creds.revoke_key(c.services.db, rec.id)
        r = await c.get(f"/public/v1/{secret}/limits")
        assert r.status == 401 and r.json()["error"]["details"]["reason"] == "revoked"
    finally:
        await stop_coordinator(c)


async def test_a_spent_month_quota_is_429_until_the_first_of_next_month(db_url, upstream):
    c = await coordinator_on(db_url, upstream)
    try:
        secret, rec = await key(c, "Basic")
        now = datetime.now(timezone.utc)
        await set_usage(c, f"key:{rec.id}", month_period(now), 300000)
        r = await c.get(f"/public/v1/{secret}/events")
        assert r.status == 429
        assert r.json()["error"]["details"]["limit"] == "perMonth"
        want = seconds_until_period_end(month_period(now), datetime.now(timezone.utc))
        assert abs(int(r.headers["Retry-After"]) - want) <= 3
    finally:
        await stop_coordinator(c)


async def test_the_last_requests_of_a_day_quota_are_counted_exactly_under_concurrency(db_url, upstream):
    c = await coordinator_on(db_url, upstream)
    try:
        secret, rec = await key(c, "Free")
        await set_usage(c, f"key:{rec.id}", day_period(datetime.now(timezone.utc)), 4990)
        statuses = await burst(c.base_url, f"/public/v1/{secret}/events", clients=16, per_client=2)
        assert Counter(statuses) == {200: 10, 429: 22}
        assert (await c.services.access.key_usage(rec))["publicToday"] == 5000
    finally:
        await stop_coordinator(c)


async def test_an_embed_budget_is_persisted_across_a_restart(db_url, upstream):
    c = await coordinator_on(db_url, upstream)
    try:
        owner, _ = await key(c, "Pro")
        token = (await embed(c, owner, budget=3))["token"]
        for _ in range(2):
            assert (await c.get(f"/public/v1/{token}/events")).status == 200
    finally:
        await stop_coordinator(c)
    c = await coordinator_on(db_url, upstream)
    try:
        assert (await c.get(f"/public/v1/{token}/events")).status == 200
        r = await c.get(f"/public/v1/{token}/events")
        assert r.status == 403 and r.json()["error"]["details"]["reason"] == "embed_budget_exhausted"
    finally:
        await stop_coordinator(c)


async def test_two_coordinators_on_one_database_share_a_quota_exactly(db_url, upstream):
    """Two coordinators (own engines, own batch writers) at the edge of one key's day quota."""
    a = await coordinator_on(db_url, upstream)
    b = await coordinator_on(db_url, upstream)
    try:
        secret, rec = await key(a, "Free")
        await set_usage(a, f"key:{rec.id}", day_period(datetime.now(timezone.utc)), 4980)
        sa, sb = await asyncio.gather(burst(a.base_url, f"/public/v1/{secret}/events", clients=12, per_client=2),
                                      burst(b.base_url, f"/public/v1/{secret}/events", clients=12, per_client=2))
        assert Counter(sa + sb) == {200: 20, 429: 28}
        assert (await a.services.access.key_usage(rec))["publicToday"] == 5000
    finally:
        await stop_coordinator(a)
        await stop_coordinator(b)
