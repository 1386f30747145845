"""What the access tables no longer need is deleted (``core/access/prune.py``), on SQLite and
PostgreSQL, with real rows: an embed chain's per-visitor counters once every token of it has
expired or been revoked and the grace has passed (never while one lives, so its budgets stay
exact), day and month counters past their retention, long-expired embed tokens; in bounded
batches, idempotently, by the leader process only."""
from __future__ import annotations

import asyncio
import math
import time
from datetime import datetime, timedelta, timezone
from pathlib import Path

import pytest
from sqlalchemy import func, insert, select, update

from coordinator.core.access import credentials as creds
from coordinator.core.access.meter import LIFE, day_period, month_period
from coordinator.core.access.prune import Pruner, first_day_kept, first_month_kept
from coordinator.core.db.models import AccessUsage, EmbedToken
from coordinator.core.settings import Settings
from coordinator.services import create_services
from tests.support import make_settings, start_coordinator, stop_coordinator
from tests.test_access_support import key, set_usage

GRACE_S = Settings.model_fields["embed_usage_grace_s"].default
VISITORS = [{"X-Forwarded-For": f"203.0.113.{i}"} for i in range(1, 6)]


def settings_for(url: str, upstream, **kw):
    # No credential cache: a deleted token must read as the database says at once.
    return make_settings(url, upstream, trusted_proxies="127.0.0.1/32", access_cache_s=0, **kw)


async def mint(c, owner: str, budget: int = 10) -> dict:
    r = await c.post(f"/public/v1/{owner}/embed-tokens", {"origin": "https://maps.example.org", "budget": budget,
                                                          "ttl": 3600})
    assert r.status == 201, r.body
    return r.json()


async def use(c, token: str, visitor: dict, route: str = "events") -> int:
    return (await c.get(f"/public/v1/{token}/{route}", headers=visitor)).status


async def rows_of(c, chain: str) -> int:
    async with c.services.db.read() as s:
        return await s.scalar(select(func.count()).select_from(AccessUsage)
                              .where(AccessUsage.subject.like(f"embed:{chain}:%")))


async def token_rows(c, chain: str) -> int:
    async with c.services.db.read() as s:
        return await s.scalar(select(func.count()).select_from(EmbedToken).where(EmbedToken.chain_id == chain))


async def set_token(c, token_id: str, **values) -> None:
    async with c.services.db.write() as s:
        await s.execute(update(EmbedToken).where(EmbedToken.id == token_id).values(**values))


def ago(seconds: float) -> datetime:
    return creds.now() - timedelta(seconds=seconds)


async def test_a_chains_visitor_counters_go_once_every_token_ended_and_the_grace_passed(db_url, upstream):
    c = await start_coordinator(settings_for(db_url, upstream))
    try:
        owner, rec = await key(c, "Pro")
        pruner = c.services.access.pruner
        first = await mint(c, owner)                                   # chain A: minted, renewed, 3 visitors
        r = await c.get(f"/public/v1/{first['token']}/renew", headers=VISITORS[0])
        assert r.status == 200
        second = r.json()
        chain_a = first["chain"]
        for v in VISITORS[:3]:
            assert await use(c, second["token"], v) == 200
        live = await mint(c, owner, budget=2)                          # chain B: lives throughout
        assert [await use(c, live["token"], VISITORS[0]) for _ in range(3)] == [200, 200, 403]
        revoked = await mint(c, owner)                                 # chain C: revoked
        assert await use(c, revoked["token"], VISITORS[3]) == 200
        assert await creds.revoke_embed_chain(c.services.db, revoked["chain"]) == 1
        await set_usage(c, "embed:chn_0ld000000000:0123456789abcdef0123", LIFE, 7)   # a chain no token has
        assert (await rows_of(c, chain_a), await rows_of(c, live["chain"]), await rows_of(c, revoked["chain"])) \
            == (3, 1, 1)
        usage_before = await c.services.access.key_usage(rec)

        out = await pruner.run_once()              # only the tokenless chain's row: C was revoked just now
        assert (out.visitor_rows, out.chains, out.tokens) == (1, 1, 0)
        assert await rows_of(c, "chn_0ld000000000") == 0
        assert (await rows_of(c, chain_a), await rows_of(c, revoked["chain"])) == (3, 1)

        await set_token(c, first["id"], expires_at=ago(2 * 86400))    # A's first token long gone, its second lives
        assert (await pruner.run_once()).total == 0
        assert await rows_of(c, chain_a) == 3

        await set_token(c, second["id"], expires_at=ago(10))          # A has ended, but within the grace
        assert (await c.get(f"/public/v1/{second['token']}/renew", headers=VISITORS[0])).json()["error"][
            "details"]["reason"] == "expired"
        assert (await pruner.run_once()).total == 0
        assert await rows_of(c, chain_a) == 3

        await set_token(c, second["id"], expires_at=ago(GRACE_S + 1))  # past the grace: A's counters go
        await set_token(c, revoked["id"], revoked_at=ago(GRACE_S + 1))  # and C's, revoked that long ago
        out = await pruner.run_once()
        assert (out.visitor_rows, out.chains, out.day_rows, out.month_rows, out.tokens) == (4, 2, 0, 0, 0)
        assert (await rows_of(c, chain_a), await rows_of(c, revoked["chain"])) == (0, 0)
        assert await rows_of(c, live["chain"]) == 1
        # The live chain's budget is exactly as before: its spent visitor stays refused, another is served.
        assert await use(c, live["token"], VISITORS[0]) == 403
        assert await use(c, live["token"], VISITORS[1]) == 200
        assert await rows_of(c, live["chain"]) == 2
        usage = await c.services.access.key_usage(rec)
        assert usage["publicToday"] == usage_before["publicToday"] + 1   # the key's day counters untouched
        assert (await pruner.run_once()).total == 0                       # idempotent

        # The tokens themselves: kept SIS_EMBED_TOKENS_KEPT_DAYS after their expiry, then deleted.
        assert await token_rows(c, chain_a) == 2
        kept_s = Settings.model_fields["embed_tokens_kept_days"].default * 86400
        await set_token(c, second["id"], expires_at=ago(kept_s - 60))
        assert (await pruner.run_once()).tokens == 0
        await set_token(c, first["id"], expires_at=ago(kept_s + 60))
        await set_token(c, second["id"], expires_at=ago(kept_s + 60))
        out = await pruner.run_once()
        assert out.tokens == 2 and await token_rows(c, chain_a) == 0
        assert await token_rows(c, live["chain"]) == 1 and await token_rows(c, revoked["chain"]) == 1
        r = await c.get(f"/public/v1/{second['token']}/renew", headers=VISITORS[0])
        assert r.status == 401 and r.json()["error"]["details"]["reason"] == "unknown"
        assert (await pruner.run_once()).total == 0
    finally:
        await stop_coordinator(c)


def test_the_first_day_and_month_kept():
    t = datetime(2026, 1, 15, 12, tzinfo=timezone.utc)
    assert first_day_kept(t, 62) == "d:2025-11-15" and first_day_kept(t, 2) == "d:2026-01-14"
    assert first_month_kept(t, 24) == "m:2024-02" and first_month_kept(t, 2) == "m:2025-12"
    assert first_month_kept(datetime(2026, 12, 1, tzinfo=timezone.utc), 12) == "m:2026-01"


async def test_day_and_month_counters_past_their_retention_go_in_bounded_batches(db_url, upstream):
    c = await start_coordinator(settings_for(db_url, upstream, usage_days_kept=10, usage_months_kept=3))
    try:
        owner, rec = await key(c, "Free")
        minted = await mint(c, owner)
        assert await use(c, minted["token"], VISITORS[0]) == 200        # a live chain's counter: not a day row
        assert (await c.get("/earth/usage", headers={"X-Api-Key": owner})).status == 200
        await c.services.access.key_usage(rec)                          # its tally written, before the seed
        now = creds.now()
        subjects = [f"key:{rec.id}", f"direct:{rec.id}", f"embedloads:{rec.id}", "key:key_000000000000"]
        days = [day_period(now - timedelta(days=n)) for n in range(40)]            # today and 39 before
        months = [f"m:{(now.year * 12 + now.month - 1 - n) // 12:04d}-{(now.year * 12 + now.month - 1 - n) % 12 + 1:02d}"
                  for n in range(8)]                                                 # this month and 7 before
        assert months[0] == month_period(now)
        async with c.services.db.write() as s:
            have = {(r[0], r[1]) for r in (await s.execute(select(AccessUsage.subject, AccessUsage.period))).all()}
            seed = [{"subject": sub, "period": p, "count": 3} for sub in subjects for p in days + months
                    if (sub, p) not in have]
            await s.execute(insert(AccessUsage), seed)
        await set_usage(c, "other:thing", LIFE, 1)                   # a lifetime counter of no chain
        before = await c.services.access.key_usage(rec)

        out = await c.services.access.pruner.run_once(now=now, batch=7, page=10, pause_s=0)
        assert (out.day_rows, out.month_rows, out.visitor_rows, out.tokens) == (4 * 30, 4 * 5, 0, 0)
        assert out.batches >= math.ceil(140 / 7)                      # no transaction deleted more than 7
        async with c.services.db.read() as s:
            left = {(r[0], r[1]) for r in (await s.execute(select(AccessUsage.subject, AccessUsage.period))).all()}
        for sub in subjects:
            assert {p for s_, p in left if s_ == sub and p.startswith("d:")} == set(days[:10])
            assert {p for s_, p in left if s_ == sub and p.startswith("m:")} == set(months[:3])
        assert ("other:thing", LIFE) in left and await rows_of(c, minted["chain"]) == 1
        assert await c.services.access.key_usage(rec) == before       # what the service reads is all there
        again = await c.services.access.pruner.run_once(now=now, batch=7, page=10, pause_s=0)
        assert again.total == 0
    finally:
        await stop_coordinator(c)


async def until(predicate, timeout: float) -> float:
    t0 = time.monotonic()
    while not predicate():
        if time.monotonic() - t0 > timeout:
            raise TimeoutError
        await asyncio.sleep(0.02)
    return time.monotonic() - t0


RETRY_S = 0.3


async def start_pruning(url: str, upstream):
    c = await start_coordinator(settings_for(url, upstream, access_prune_interval_s=0.1))
    c.services.access.pruner.leader.retry_s = RETRY_S
    c.services.access.pruner.start()
    return c


@pytest.mark.postgres
async def test_two_coordinators_prune_in_one_and_the_other_takes_over(pg_database, upstream):
    if not pg_database:
        pytest.skip("PostgreSQL suite: set SIS_TEST_DATABASE_URL")
    from tests.conftest import fresh_postgres
    url = await fresh_postgres(pg_database)
    a = await start_pruning(url, upstream)
    b = None
    try:
        pa = a.services.access.pruner
        await until(lambda: pa.pass_count >= 2, 5)
        b = await start_pruning(url, upstream)
        pb = b.services.access.pruner
        await set_usage(a, "embed:chn_0ld000000000:0123456789abcdef0123", LIFE, 7)
        await until(lambda: pa.deleted_total >= 1, 5)                   # the leader's pass deleted it
        await asyncio.sleep(1.5)                                         # five retries of b's
        assert pb.pass_count == 0 and not pb.leading and pb.running      # standing by, not pruning
        assert pa.leading and pa.pass_count >= 5
        await stop_coordinator(a)
        a = None
        await set_usage(b, "embed:chn_0ld000000000:0123456789abcdef0123", LIFE, 7)
        took = await until(lambda: pb.deleted_total >= 1, 3 * RETRY_S + 3)
        print(f"\nthe standby took over the prune {took:.2f} s after the leader stopped")
        assert pb.leading
    finally:
        for c in (a, b):
            if c is not None:
                await stop_coordinator(c)


async def test_sis_serve_starts_the_prune_with_the_other_leader_jobs(sqlite_url, upstream):
    settings = settings_for(sqlite_url, upstream, access_prune_interval_s=0.1)
    services = await create_services(settings, start_background=True)
    try:
        pruner = services.access.pruner
        assert isinstance(pruner, Pruner) and pruner.running
        await until(lambda: pruner.pass_count >= 2, 5)
        assert pruner.leading and pruner.leader.is_sqlite             # one process on SQLite: it just runs
    finally:
        await services.close()
    assert not pruner.running
    off = await create_services(settings.model_copy(update={"access_prune_interval_s": 0}), start_background=True)
    try:
        assert not off.access.pruner.running                          # 0 disables it
    finally:
        await off.close()


def test_the_retention_settings_are_documented_with_their_defaults():
    doc = (Path(__file__).resolve().parents[1] / "docs" / "access.md").read_text()
    for name in ("access_prune_interval_s", "embed_usage_grace_s", "embed_tokens_kept_days", "usage_days_kept",
                 "usage_months_kept"):
        default = Settings.model_fields[name].default
        row = next(line for line in doc.splitlines() if line.startswith(f"| `SIS_{name.upper()}`"))
        assert str(int(default)) in row, name
    assert "## What is kept, and for how long" in doc


async def test_the_metering_read_of_counters_searches_the_index_on_sqlite(sqlite_url, upstream):
    """The rows a table of visitors holds cost every credentialed request if its counters are
    read by a scan: SQLite plans a row-value IN list of (subject, period) pairs as one."""
    from sqlalchemy import event
    c = await start_coordinator(settings_for(sqlite_url, upstream))
    seen: list[tuple[str, tuple]] = []

    def capture(conn, cursor, statement, params, context, executemany):  # noqa: ANN001
        if statement.lstrip().upper().startswith("SELECT") and "FROM access_usage" in statement:
            seen.append((statement, params))

    engine = c.services.db.write_engine.sync_engine
    event.listen(engine, "before_cursor_execute", capture)
    try:
        owner, _ = await key(c, "Pro")
        minted = await mint(c, owner)
        assert await use(c, minted["token"], VISITORS[0]) == 200
        assert seen, "no metering read of access_usage was seen"
        async with c.services.db.write_core() as conn:
            for statement, params in seen:
                plan = (await conn.exec_driver_sql("EXPLAIN QUERY PLAN " + statement, params)).all()
                text = " ".join(str(r[-1]) for r in plan)
                assert "SCAN access_usage" not in text, text
    finally:
        event.remove(engine, "before_cursor_execute", capture)
        await stop_coordinator(c)


def test_sis_prune_runs_one_pass_now_and_says_what_it_deleted(tmp_path, capsys):
    """For an operator who shortened a retention or set the interval to 0: the leader's pass, by
    hand, with the settings in force, beside running coordinators."""
    import sqlite3

    from coordinator.cli import main
    path = tmp_path / "p.db"
    assert main(["migrate", "--database", f"sqlite:///{path}"]) == 0
    now = creds.now()
    rows = [("key:k1", day_period(now), 5), ("key:k1", day_period(now - timedelta(days=100)), 7),
            ("key:k1", month_period(now), 9), ("key:k1", month_period(now - timedelta(days=800)), 3)]
    with sqlite3.connect(path) as conn:
        conn.executemany("INSERT INTO access_usage (subject, period, count) VALUES (?, ?, ?)", rows)
    capsys.readouterr()
    assert main(["prune", "--database", f"sqlite:///{path}"]) == 0
    out, err = capsys.readouterr()
    assert out.startswith("deleted 0 visitor counters of 0 ended embed chains, 1 day and 1 month counters"), out
    assert "keeping 62 days and 24 months" in err
    with sqlite3.connect(path) as conn:
        kept = sorted(conn.execute("SELECT period FROM access_usage"))
    assert kept == sorted([(day_period(now),), (month_period(now),)])
    assert main(["prune", "--database", f"sqlite:///{path}"]) == 0          # idempotent
    assert capsys.readouterr().out.startswith("deleted 0 visitor counters of 0 ended embed chains, 0 day and 0 month")
