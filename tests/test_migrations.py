"""The Alembic migrations and the table declarations agree, on both databases;
PostgreSQL refuses to serve on an old schema."""
from __future__ import annotations

import pytest
from sqlalchemy import select
from alembic.autogenerate import compare_metadata
from alembic.runtime.migration import MigrationContext

from coordinator.core.db import Database
from coordinator.core.db import migrate
from coordinator.core.db.models import Base
from coordinator.core.db.migrate import SchemaOutOfDate, prepare_database
from coordinator.core.settings import Settings


async def test_migrations_match_the_models(db_url):
    db = Database(db_url)
    try:
        await migrate.upgrade_async(db.write_engine, db_url)

        def diff(conn):
            ctx = MigrationContext.configure(conn, opts={"compare_type": True})
            return compare_metadata(ctx, Base.metadata)

        async with db.engine.connect() as conn:
            changes = await conn.run_sync(diff)
        assert changes == [], f"models and migrations disagree: {changes}"
        assert not await migrate.pending(db.engine, db_url)
    finally:
        await db.close()


async def test_facts_live_before_0006_are_encoded_as_the_service_encodes_them(db_url):
    """Migration 0006 stores each live fact as served (``doc``): facts approved before it
    are encoded by the service's own encoder, in batches, and the column becomes NOT NULL."""
    from datetime import datetime, timezone

    from sqlalchemy import JSON, Float, String, column, insert, select, table

    from coordinator.seen.publish import fact_doc

    if not db_url.startswith("sqlite"):
        from tests.conftest import reset_postgres
        await reset_postgres(db_url)
    db = Database(db_url)
    old = table("seen_facts", *(column(c, String) for c in ("kind", "unit", "confidence", "basis", "provider",
                                                           "license", "observed_at", "sweep_id")),
                column("lat", Float), column("lon", Float), column("value", JSON), column("photos", JSON),
                column("cell"), column("job_id"), column("approved_at"))
    rows = [{"cell": 1, "kind": "pole", "lat": -6.9 + i * 1e-5, "lon": 107.6 + i * 1e-5,
             "value": None if i % 7 == 0 else {"heightM": i / 3}, "unit": "m",
             "confidence": "unknown" if i % 7 == 0 else "high", "basis": "measured", "photos": [f"p{i}", "q"],
             "provider": "panoramax", "license": "CC-BY-SA-4.0", "observed_at": "2026-06-01T08:00:00Z",
             "sweep_id": "sr_old", "job_id": 1, "approved_at": datetime(2026, 11, 1, tzinfo=timezone.utc)}
            for i in range(12_000)]                       # more than two batches
    try:
        await migrate.upgrade_async(db.write_engine, db_url, "0005")
        async with db.write() as s:
            await s.execute(insert(old), rows)
        await migrate.upgrade_async(db.write_engine, db_url)
        async with db.write() as s:
            docs = (await s.execute(select(Base.metadata.tables["seen_facts"].c.doc)
                                    .order_by(Base.metadata.tables["seen_facts"].c.id))).scalars().all()
        assert docs == [fact_doc(r) for r in rows]
        assert '"value":null' in docs[0] and '"photos":["p1","q"]' in docs[1]
        assert Base.metadata.tables["seen_facts"].c.doc.nullable is False
        def nullable(conn):
            from sqlalchemy import inspect
            return {c["name"]: c["nullable"] for c in inspect(conn).get_columns("seen_facts")}["doc"]
        async with db.engine.connect() as conn:
            assert await conn.run_sync(nullable) is False
    finally:
        await db.close()


async def test_facts_live_before_0007_are_packed_into_the_tiles_of_their_cells(db_url, monkeypatch):
    """Migration 0007 makes the tiles of facts already live (``tiles.rebuild``), reading
    ``seen_facts`` a batch of cells at a time, each tile in id order."""
    from datetime import datetime, timezone

    from sqlalchemy import insert

    from coordinator.core.db.models import SeenFact, SeenTile
    from coordinator.seen import tiles

    if not db_url.startswith("sqlite"):
        from tests.conftest import reset_postgres
        await reset_postgres(db_url)
    monkeypatch.setattr(tiles, "REBUILD_CELLS", 2)         # three batches
    db = Database(db_url)
    cells = [622236750694711295 + k for k in range(5)]
    rows = [{"cell": cells[i % 5], "kind": "pole", "lat": -6.9 + i * 1e-5, "lon": 107.6, "value": None,
             "unit": "m", "confidence": "unknown", "basis": "measured", "photos": [f"p{i}"],
             "provider": "panoramax", "license": "CC-BY-SA-4.0", "observed_at": "2026-06-01T08:00:00Z",
             "sweep_id": "sr_old", "job_id": 1, "approved_at": datetime(2026, 11, 1, tzinfo=timezone.utc),
             "doc": f'"kind":"pole","n":{i}'} for i in range(53)]
    try:
        await migrate.upgrade_async(db.write_engine, db_url, "0006")
        async with db.write() as s:
            await s.execute(insert(SeenFact), rows)
        await migrate.upgrade_async(db.write_engine, db_url)
        async with db.engine.connect() as conn:
            got = await conn.run_sync(lambda c: {
                cell: tiles.read(c, [cell]) for cell in c.execute(select(SeenTile.cell)).scalars()})
        assert sorted(got) == cells
        for k, cell in enumerate(cells):
            p, mine = got[cell], [(i + 1, r) for i, r in enumerate(rows) if i % 5 == k]   # ids from 1
            assert p.ids.tolist() == [i for i, _ in mine]
            assert p.lats.tolist() == [r["lat"] for _, r in mine]
            assert [p.docs[s:e].decode() for s, e in zip(p.starts, p.ends)] == [r["doc"] for _, r in mine]
    finally:
        await db.close()


async def test_sqlite_applies_pending_migrations_itself(sqlite_url):
    db = Database(sqlite_url)
    try:
        assert await migrate.pending(db.engine, sqlite_url)
        await prepare_database(Settings(database_url=sqlite_url), db)
        assert not await migrate.pending(db.engine, sqlite_url)
    finally:
        await db.close()


@pytest.mark.postgres
async def test_postgres_refuses_an_old_schema(db_url):
    if db_url.startswith("sqlite"):
        pytest.skip("PostgreSQL only")
    from tests.conftest import reset_postgres
    await reset_postgres(db_url)
    db = Database(db_url)
    try:
        with pytest.raises(SchemaOutOfDate, match="sis migrate"):
            await prepare_database(Settings(database_url=db_url), db)
        await migrate.upgrade_async(db.engine, db_url)
        await prepare_database(Settings(database_url=db_url), db)   # now it starts
    finally:
        await db.close()


async def test_sqlite_write_transactions_begin_immediate(sqlite_url):
    """Two writers cannot both read a row as free and then both claim it."""
    import asyncio
    from sqlalchemy import text

    db = Database(sqlite_url)
    try:
        async with db.write() as s:
            await s.execute(text("CREATE TABLE slot (id INTEGER PRIMARY KEY, owner TEXT)"))
            await s.execute(text("INSERT INTO slot (id, owner) VALUES (1, NULL)"))

        async def claim(name: str) -> bool:
            async with db.write() as s:
                owner = (await s.execute(text("SELECT owner FROM slot WHERE id = 1"))).scalar()
                await asyncio.sleep(0.05)  # widen the race window
                if owner is None:
                    await s.execute(text("UPDATE slot SET owner = :o WHERE id = 1"), {"o": name})
                    return True
                return False

        results = await asyncio.gather(*(claim(f"w{i}") for i in range(8)))
        assert sum(results) == 1
    finally:
        await db.close()


async def test_json_columns_keep_every_value_they_are_given(db_url):
    """JSON columns are encoded with orjson, and with the standard library where orjson
    refuses (integers past 64 bits): what is written reads back the same, type included."""
    from datetime import datetime, timezone

    from coordinator.core.db.models import EventPoll

    db = Database(db_url)
    now = datetime.now(timezone.utc)
    plain = {"sources": [{"name": "gdacs", "ok": True, "latency": 0.25}], "note": "é ✓", "none": None,
             "cell": 2 ** 63 + 5}
    huge = {"count": 2 ** 70 + 1, "nested": [2 ** 64]}
    try:
        await migrate.upgrade_async(db.write_engine, db_url)
        async with db.write() as s:
            for health in (plain, huge):
                s.add(EventPoll(started_at=now, finished_at=now, sources_queried=1, sources_usable=1,
                                events_seen=0, health=health))
        async with db.read() as s:
            got = [p.health for p in (await s.execute(select(EventPoll).order_by(EventPoll.id))).scalars()]
        assert got == [plain, huge]
        assert type(got[1]["count"]) is int and type(got[0]["cell"]) is int
    finally:
        await db.close()


@pytest.mark.postgres
def test_two_migrates_at_once_on_an_empty_postgres_both_end_well(pg_database):
    """Two ``sis migrate`` started together on an empty PostgreSQL database: both created
    ``alembic_version`` and one failed with a 159-line IntegrityError. Each run now takes an
    advisory lock first (``migrations/env.py``): while the test holds it neither moves; once
    it is let go one migrates and the other, waiting its turn, finds nothing to do."""
    import asyncio
    import os
    import subprocess
    import sys
    import time

    from alembic.script import ScriptDirectory
    from sqlalchemy import text
    from sqlalchemy.ext.asyncio import create_async_engine

    if not pg_database:
        pytest.skip("PostgreSQL suite: set SIS_TEST_DATABASE_URL")
    from tests.conftest import reset_postgres

    asyncio.run(reset_postgres(pg_database))
    (head,) = migrate.head_revisions(pg_database)

    async def run_while_locked() -> list[subprocess.Popen]:
        engine = create_async_engine(pg_database)
        try:
            async with engine.connect() as conn:
                await conn.execute(text("SELECT pg_advisory_lock(:k)"), {"k": migrate.MIGRATION_LOCK})
                procs = [subprocess.Popen([sys.executable, "-m", "coordinator.cli", "migrate", "--database",
                                           pg_database], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                                          env={**os.environ, "SIS_LOG_LEVEL": "WARNING"}) for _ in range(2)]
                deadline = time.monotonic() + 4
                while time.monotonic() < deadline:
                    assert all(p.poll() is None for p in procs), "a migration ran while another held the lock"
                    await asyncio.sleep(0.1)
                await conn.execute(text("SELECT pg_advisory_unlock(:k)"), {"k": migrate.MIGRATION_LOCK})
                await conn.commit()
        finally:
            await engine.dispose()
        return procs

    said = []
    for p in asyncio.run(run_while_locked()):
        out, err = p.communicate(timeout=60)
        assert p.returncode == 0, err
        assert "Traceback" not in err, err
        said.append(out.splitlines()[0])
    # Each says what it did itself: one applied them all, the other, waiting its turn, nothing.
    n = len(list(ScriptDirectory.from_config(migrate.alembic_config(pg_database)).walk_revisions()))
    assert sorted(said) == sorted([f"database at {head}, {n} migrations applied: {pg_database.split('@')[-1]}",
                                   f"database at {head}, nothing to apply: {pg_database.split('@')[-1]}"]), said


async def test_jobs_drawn_across_180_before_0021_are_drawn_again_from_their_cells(db_url, caplog):
    """A job over a cell straddling 180 made before its area was drawn across it spanned the
    latitude band (the hull of H3's raw corners: a centre near lon -20, a 21,000 km radius);
    migration 0021 draws it again from its cells, and leaves every other job as it was. One
    parked for its failures stays parked, and the migration names it for the operator to
    requeue (the docs said it was requeued)."""
    import logging
    from datetime import datetime, timezone

    import h3
    from shapely.geometry import Polygon, mapping
    from sqlalchemy import insert

    from coordinator.core.db.models import SweepJob, SweepRequest
    from coordinator.sweeps import coverage, jobs

    if not db_url.startswith("sqlite"):
        from tests.conftest import reset_postgres
        await reset_postgres(db_url)
    at = datetime(2026, 11, 20, tzinfo=timezone.utc)
    straddling = coverage.point_cell(-16.85, 179.99995)
    hull = Polygon([(lo, la) for la, lo in h3.cell_to_boundary(coverage.cell_text(straddling))]).convex_hull
    old_area = {"type": "Polygon", "coordinates": [[list(p) for p in mapping(hull)["coordinates"][0]]]}
    plain = jobs._plan([coverage.point_cell(-6.9, 107.6)], [])

    def row(job_id: int, area: dict, cells: list[int], lat: float, lon: float, radius: float,
            state: str = "queued") -> dict:
        return {"id": job_id, "sweep_id": "sr_old", "state": state, "area": area, "center_lat": lat,
                "center_lon": lon, "radius_m": radius, "cells": [coverage.cell_text(c) for c in cells],
                "photos": [], "created_at": at, "updated_at": at}

    db = Database(db_url)
    try:
        await migrate.upgrade_async(db.write_engine, db_url, "0020")
        async with db.write() as s:
            await s.execute(insert(SweepRequest), [{"id": "sr_old", "lat": -16.85, "lon": 180.0, "radius_m": 100,
                                                    "state": "queued", "requested_at": at, "updated_at": at}])
            await s.execute(insert(SweepJob), [
                row(1, old_area, [straddling], hull.centroid.y, hull.centroid.x, 21_308_000.0),
                row(2, plain.area, plain.cells, plain.center_lat, plain.center_lon, plain.radius_m),
                row(3, old_area, [straddling], hull.centroid.y, hull.centroid.x, 21_308_000.0, "failed")])
        with caplog.at_level(logging.INFO, logger="sis.migrations"):
            await migrate.upgrade_async(db.write_engine, db_url)
        async with db.write() as s:
            got = {j.id: j for j in (await s.execute(select(SweepJob))).scalars()}
        want = jobs._plan([straddling], [])
        assert got[1].area == want.area and got[1].radius_m == want.radius_m < 150
        assert (got[1].center_lat, got[1].center_lon) == (want.center_lat, want.center_lon)
        lons = [x for x, _ in got[1].area["coordinates"][0]]
        assert max(lons) - min(lons) < 0.005
        assert got[2].area == plain.area and got[2].radius_m == plain.radius_m
        assert got[1].state == "queued" and got[1].cells == [coverage.cell_text(straddling)]
        assert got[3].state == "failed" and got[3].area == want.area
        said = [r.getMessage() for r in caplog.records if r.name == "sis.migrations"]
        assert said == ["sweep_jobs: 2 areas across the antimeridian drawn again from their cells",
                        "sweep_jobs: 1 of them parked for their failures stay parked (job-3): `sis jobs requeue ID` "
                        "sweeps one on its new area"], said
    finally:
        await db.close()
