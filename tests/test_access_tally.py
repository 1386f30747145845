"""Direct-family keyed requests, whose counters have no ceiling, wait for a shared
revocation read and no write: their counts are written after the answer (``tally.py``),
still shown by /earth/usage, written at stop and within a second without one, kept when
the write fails. Revocation is still refused on the next request. SQLite and PostgreSQL."""
from __future__ import annotations

import asyncio
import time
from datetime import datetime, timezone

from sqlalchemy import select, text

from coordinator.core.access import credentials as creds
from coordinator.core.access.meter import day_period, month_period
from coordinator.core.access.revocation import RevocationReads
from coordinator.core.access.tally import Tally
from coordinator.core.db import Database
from coordinator.core.db.models import AccessUsage
from tests.support import stop_coordinator
from tests.test_access_quota import coordinator_on, db_url  # noqa: F401  (fixture)
from tests.test_access_support import burst, key


async def stored(db: Database, subject: str, period: str) -> int | None:
    async with db.read() as s:
        return (await s.execute(select(AccessUsage.count).where(AccessUsage.subject == subject,
                                                               AccessUsage.period == period))).scalar()


async def test_keyed_direct_reads_take_no_metering_transaction_and_usage_still_counts_them(db_url, upstream):  # noqa: F811
    c = await coordinator_on(db_url, upstream)
    try:
        secret, rec = await key(c, "Free")
        statuses = await burst(c.base_url, "/earth/limits", clients=8, per_client=5, headers={"X-Api-Key": secret})
        assert statuses == [200] * 40
        access = c.services.access
        assert access.usage.batches == 0 and access.revocations.reads >= 1   # a read, no group-commit transaction
        r = await c.get("/earth/usage", headers={"X-Api-Key": secret})
        assert r.json()["direct"]["today"] == 41 and r.json()["direct"]["thisMonth"] == 41   # this one included
    finally:
        await stop_coordinator(c)


async def test_uncapped_counts_reach_the_database_within_a_second_and_at_stop(db_url, upstream):  # noqa: F811
    c = await coordinator_on(db_url, upstream)
    db2 = Database(db_url)           # another process's view: it sees only what was written
    day = day_period(datetime.now(timezone.utc))
    try:
        secret, rec = await key(c, "Free")
        for _ in range(3):
            assert (await c.get("/earth/events", headers={"X-Api-Key": secret})).status == 200
        deadline = time.monotonic() + Tally.FLUSH_S + 10
        while await stored(db2, f"direct:{rec.id}", day) != 3:
            assert time.monotonic() < deadline, "the tally was not written"
            await asyncio.sleep(0.05)
        c.services.access.usage.tally.FLUSH_S = 3600     # only the stop can write the next two
        for _ in range(2):
            assert (await c.get("/earth/events", headers={"X-Api-Key": secret})).status == 200
        assert await stored(db2, f"direct:{rec.id}", day) == 3
    finally:
        await stop_coordinator(c)
    try:
        assert await stored(db2, f"direct:{rec.id}", day) == 5
    finally:
        await db2.close()


async def test_a_failed_tally_write_is_kept_and_written_by_the_next(tmp_path):
    url = f"sqlite+aiosqlite:///{tmp_path}/sis.db"
    from coordinator.core.db import migrate
    db = Database(url)
    await migrate.upgrade_async(db.write_engine, url)
    tally = Tally(db)
    month = month_period(datetime.now(timezone.utc))
    try:
        async with db.write_core() as conn:
            await conn.execute(text("ALTER TABLE access_usage RENAME TO access_usage_away"))
        tally.add([("direct:k1", month)] * 2)
        try:
            await tally.flush()
            raise AssertionError("the write should have failed without its table")
        except Exception as exc:
            assert "access_usage" in str(exc)
        assert tally.pending == 2
        tally.add([("direct:k1", month)])
        async with db.write_core() as conn:
            await conn.execute(text("ALTER TABLE access_usage_away RENAME TO access_usage"))
        await tally.close()
        assert tally.pending == 0 and await stored(db, "direct:k1", month) == 3
    finally:
        await db.close()


async def test_one_revocation_read_answers_every_request_waiting_and_sees_a_revocation_from_elsewhere(db_url):  # noqa: F811
    from coordinator.core.db import migrate
    db = Database(db_url)
    await migrate.upgrade_async(db.write_engine, db_url)
    other = Database(db_url)          # the revoking side: the CLI, or another coordinator
    reads = RevocationReads(db)
    try:
        _, live = await creds.create_key(db, "live")
        _, gone = await creds.create_key(db, "gone")
        got = await asyncio.gather(*(reads.check(k.id) for k in [live, gone] * 8))
        assert got == [None] * 16 and reads.reads == 1
        await creds.revoke_key(other, gone.id)
        assert await reads.check(gone.id) == "revoked"          # the very next request
        assert await reads.check(live.id) is None
        assert await reads.check("key_000000000000") == "revoked"   # a key that does not exist is not live
        assert reads.reads == 4
    finally:
        await reads.close()
        await db.close()
        await other.close()
