"""The seen layer read path: H3 cell lookups plus an exact distance filter, the same answer
on SQLite and PostgreSQL, a bounded answer (cap, truncated, nearest first), the contract's
parameter bounds and families."""
from __future__ import annotations

import math
import random
from datetime import datetime, timezone

import orjson
import pytest
from sqlalchemy import String, insert

from coordinator.core.db.models import CoverageCell, SeenFact
from coordinator.seen import tiles
from coordinator.seen.publish import fact_doc, insert_facts
from coordinator.seen.spatial import Disc, distance_m
from coordinator.sweeps import coverage
from sweep_engine.schema import FACT_KINDS, PRIMARY_KEY
from tests.support import start_coordinator, stop_coordinator
from tests.test_error_shape import assert_error_shape
from tests.test_sweeps_kit import migrate, photos, sweep_settings  # noqa: F401

LAT, LON = -6.9147, 107.6098
AT = datetime(2026, 11, 1, tzinfo=timezone.utc)


def fact_rows(n: int, spread_m: float, seed: int = 3) -> list[dict]:
    rng = random.Random(seed)
    out = []
    for i in range(n):
        r, a = spread_m * math.sqrt(rng.random()), rng.uniform(0, 2 * math.pi)
        lat, lon = coverage.offset(LAT, LON, r * math.sin(a), r * math.cos(a))
        kind = FACT_KINDS[i % len(FACT_KINDS)]
        value = None if i % 17 == 0 else {PRIMARY_KEY[kind]: round(1 + rng.random() * 5, 2)}
        out.append({"cell": coverage.point_cell(lat, lon), "kind": kind, "lat": lat, "lon": lon, "value": value,
                    "unit": "m", "confidence": "unknown" if value is None else "high",
                    "basis": ("measured", "modelled", "assumed")[i % 3], "photos": [f"ph-{i}"],
                    "provider": "panoramax", "license": "CC-BY-SA-4.0", "observed_at": "2026-06-01T08:00:00Z",
                    "job_id": 1, "sweep_id": "sr_test", "approved_at": AT})
    return out


async def seeded(db_url, photos, rows: list[dict], covered: set[int] = frozenset(), **kw):
    await migrate(db_url)
    c = await start_coordinator(sweep_settings(db_url, photos, **kw))
    async with c.services.db.write() as s:
        if rows:
            await insert_facts(s, [{**r, "doc": fact_doc(r)} for r in rows])
        if covered:
            await s.execute(insert(CoverageCell), [{"cell": x, "state": "covered", "request_id": None,
                                                    "updated_at": AT, "covered_at": AT} for x in covered])
    return c


async def test_a_fact_keeps_every_license_of_its_photos_however_many(db_url, photos):
    """Five licenses joined were cut to the column's 60 characters, losing the last."""
    from coordinator.seen.publish import _license
    names = {"CC-BY-SA-4.0", "CC-BY-4.0", "CC0-1.0", "etalab-2.0", "LicenceOuverte-2.0"}
    joined = _license(names)
    assert set(joined.split(" AND ")) == names and len(joined) > 60
    rows = [{**r, "license": joined} for r in fact_rows(1, 10)]
    c = await seeded(db_url, photos, rows)
    try:
        body = (await c.get(f"/earth/seen?lat={LAT}&lon={LON}&radius=100")).json()
        assert [f["license"] for f in body["facts"]] == [joined]
    finally:
        await stop_coordinator(c)


def test_the_ground_cells_are_those_a_sweep_request_asks_for():
    rng = random.Random(5)
    for _ in range(300):
        lat, lon, r = rng.uniform(-70, 70), rng.uniform(-180, 180), rng.choice([100, 200, 450, 999, 1500])
        assert set(Disc.of(lat, lon, r).ground) == coverage.circle_cells(lat, lon, r)


def test_the_cells_read_reach_every_point_of_the_circle():
    rng = random.Random(6)
    for _ in range(200):
        lat, lon, r = rng.uniform(-70, 70), rng.uniform(-180, 180), rng.choice([100, 450, 1500])
        reach = set(Disc.of(lat, lon, r).reach)
        for _ in range(50):
            d, a = r * math.sqrt(rng.random()), rng.uniform(0, 2 * math.pi)
            la, lo = coverage.offset(lat, lon, d * math.sin(a), d * math.cos(a))
            assert coverage.point_cell(la, lo) in reach


def test_the_cells_read_for_an_annulus_reach_every_point_of_it():
    rng = random.Random(7)
    for _ in range(200):
        lat, lon, r = rng.uniform(-70, 70), rng.uniform(-180, 180), rng.choice([900, 1200, 1500])
        disc = Disc.of(lat, lon, r)
        inner, outer = set(disc.reach_between(0, 0.7 * r)), set(disc.reach_between(0.7 * r, r))
        assert inner | outer <= set(disc.reach)
        for _ in range(50):
            d, a = r * math.sqrt(rng.random()), rng.uniform(0, 2 * math.pi)
            la, lo = coverage.offset(lat, lon, d * math.sin(a), d * math.cos(a))
            assert coverage.point_cell(la, lo) in (inner if distance_m(lat, lon, la, lo) <= 0.7 * r else outer)


async def test_a_large_circle_read_by_annuli_is_the_nearest_whatever_the_cap(db_url, photos, monkeypatch):
    """A circle of 900 m or more is read inner disc first (``query._stages``); the answer
    must be the very one a single read of the whole circle gives, and the nearest facts,
    with the cap just under, at and just over what the inner disc holds, and with the
    circle empty near its centre."""
    from coordinator.seen import query
    from coordinator.seen.reader import reader_of

    rows = fact_rows(500, 1500, seed=8)
    hole = [r for r in fact_rows(300, 1500, seed=9) if distance_m(LAT, LON, r["lat"], r["lon"]) > 1100]
    for i, r in enumerate(hole):
        r["photos"] = [f"hole-{i}"]
    marked = set(sorted(coverage.circle_cells(LAT, LON, 1500))[::3])
    c = await seeded(db_url, photos, rows + hole, covered=marked)
    reader = reader_of(c.services)

    async def both(radius, cap):
        staged = await query.seen_facts(reader, LAT, LON, radius, cap)
        monkeypatch.setattr(query, "STAGED_FROM_M", 10_000)          # one read of the whole circle
        whole = await query.seen_facts(reader, LAT, LON, radius, cap)
        monkeypatch.undo()
        staged = staged[0], orjson.loads(orjson.dumps(staged[1])), staged[2]     # facts come encoded
        assert staged == (whole[0], orjson.loads(orjson.dumps(whole[1])), whole[2]), (radius, cap)
        ground = coverage.circle_cells(LAT, LON, radius)     # the coverage comes with the first read
        assert staged[0] == query.Coverage(len(ground), len(ground & marked)), (radius, cap)
        return staged

    def check(facts, truncated, pool, radius, cap):
        want = sorted(d for d in (distance_m(LAT, LON, r["lat"], r["lon"]) for r in pool) if d <= radius)
        assert truncated is (len(want) > cap) and len(facts) == min(cap, len(want)), (radius, cap)
        edge = want[min(cap, len(want)) - 1]         # the farthest served, in exact distance
        exact = {r["photos"][0]: distance_m(LAT, LON, r["lat"], r["lon"]) for r in pool}
        # the nearest, up to the planar order's 0.1 % among facts at the same distance
        assert all(exact[f["photos"][0]] <= edge * 1.001 + 0.1 for f in facts), (radius, cap)
        assert sum(1 for d in want if d < edge * 0.999 - 0.1) <= len(facts)
        assert [f["distanceM"] for f in facts] == sorted(f["distanceM"] for f in facts)

    try:
        inner = sum(1 for r in rows + hole if distance_m(LAT, LON, r["lat"], r["lon"]) <= 1500 * query.INNER_SHARE)
        assert 0 < inner < 400
        for radius, cap in [(1500, inner - 1), (1500, inner), (1500, inner + 1), (1500, inner + 37),
                            (1500, 2000), (1500, 1), (1000, 50), (1200, 5000)]:
            _, facts, truncated = await both(radius, cap)
            check(facts, truncated, rows + hole, radius, cap)
        # nothing near the centre: the inner disc is empty and the ring holds all
        async with c.services.db.write() as s:
            await s.execute(SeenFact.__table__.delete().where(SeenFact.photos.cast(String).not_like("%hole-%")))
            await s.run_sync(lambda ss: tiles.rebuild(ss.connection()))
        for cap in (1, 10, len(hole), 1000):
            _, facts, truncated = await both(1500, cap)
            check(facts, truncated, hole, 1500, cap)
    finally:
        await stop_coordinator(c)


async def test_facts_served_are_exactly_those_within_the_radius_on_each_database(db_url, photos):
    rows = fact_rows(600, 1200)
    c = await seeded(db_url, photos, rows)
    try:
        for radius in (100, 450, 1000):
            body = (await c.get(f"/earth/seen?lat={LAT}&lon={LON}&radius={radius}")).json()
            want = sorted((distance_m(LAT, LON, r["lat"], r["lon"]), r["photos"][0]) for r in rows
                          if distance_m(LAT, LON, r["lat"], r["lon"]) <= radius)
            assert body["count"] == len(want) > 0 and body["truncated"] is False
            assert {f["photos"][0] for f in body["facts"]} == {p for _, p in want}     # none missed, none extra
            got = [f["distanceM"] for f in body["facts"]]
            assert got == sorted(got)                                                # nearest first
            exact = dict((p, d) for d, p in want)
            assert all(abs(f["distanceM"] - exact[f["photos"][0]]) <= 0.1 + 3e-4 * f["distanceM"]
                       for f in body["facts"])
            assert body["covered"] is False and body["coverage"]["coveredCells"] == 0
        by_photo = {r["photos"][0]: r for r in rows}
        for f in body["facts"]:                        # every member, as approval stored it
            r = by_photo[f["photos"][0]]
            assert list(f) == ["id", "kind", "geometry", "value", "unit", "confidence", "basis", "source", "photos",
                               "timestamp", "license", "sweepId", "distanceM"]
            assert f == {"id": f["id"], "kind": r["kind"], "geometry": {"type": "Point", "coordinates": [r["lon"], r["lat"]]},
                         "value": r["value"], "unit": "m", "confidence": r["confidence"], "basis": r["basis"],
                         "source": "panoramax:" + r["photos"][0], "photos": r["photos"],
                         "timestamp": "2026-06-01T08:00:00Z", "license": "CC-BY-SA-4.0", "sweepId": "sr_test",
                         "distanceM": f["distanceM"]}
            assert isinstance(f["id"], int) and isinstance(f["distanceM"], float)
        unknown = next(f for f in body["facts"] if f["value"] is None)
        assert unknown["confidence"] == "unknown"                      # unknown is not zero
        assert {f["basis"] for f in body["facts"]} == {"measured", "modelled", "assumed"}
    finally:
        await stop_coordinator(c)


async def tile_facts(conn) -> dict[int, list[tuple]]:
    """Each tile's facts as (id, lat, lon, doc), as ``tiles.read`` unpacks them."""
    from sqlalchemy import select as sel

    from coordinator.core.db.models import SeenTile

    def read(sync):
        out = {}
        for cell in sync.execute(sel(SeenTile.cell)).scalars():
            p = tiles.read(sync, [cell])
            out[cell] = [(int(i), float(la), float(lo), p.docs[s:e].decode())
                         for i, la, lo, s, e in zip(p.ids, p.lats, p.lons, p.starts, p.ends)]
        return out
    return await conn.run_sync(read)


async def test_tiles_hold_exactly_the_live_facts_after_approvals_in_the_same_cells(db_url, photos):
    """Approvals add their facts to the tiles of their cells (``tiles.append``), to tiles
    made by earlier approvals too; the tiles then hold what a rebuild from ``seen_facts``
    makes, and a circle is served from them."""
    first, second = fact_rows(150, 250, seed=11), fact_rows(150, 250, seed=12)
    for i, r in enumerate(second):
        r["photos"] = [f"second-{i}"]
    c = await seeded(db_url, photos, first)
    try:
        async with c.services.db.write() as s:
            await insert_facts(s, [{**r, "doc": fact_doc(r)} for r in second])
        async with c.services.db.engine.connect() as conn:
            appended = await tile_facts(conn)
        cells = {r["cell"] for r in first} & {r["cell"] for r in second}
        assert len(cells) > 5 and set(appended) == {r["cell"] for r in first + second}
        assert sum(len(v) for v in appended.values()) == 300
        async with c.services.db.write() as s:
            assert await s.run_sync(lambda ss: tiles.rebuild(ss.connection())) == 300
        async with c.services.db.engine.connect() as conn:
            assert await tile_facts(conn) == appended
        body = (await c.get(f"/earth/seen?lat={LAT}&lon={LON}&radius=300")).json()
        want = {r["photos"][0] for r in first + second if distance_m(LAT, LON, r["lat"], r["lon"]) <= 300}
        assert {f["photos"][0] for f in body["facts"]} == want and body["count"] == len(want)
    finally:
        await stop_coordinator(c)


async def test_the_mcp_face_serves_the_same_facts_as_rest(db_url, photos):
    """Facts are served pre-encoded (``query.served_facts``): the MCP face, read by the official
    SDK client, must carry them as the REST face does, in the text and the structured content."""
    import json

    import mcp

    c = await seeded(db_url, photos, fact_rows(120, 400, seed=11))
    try:
        rest = (await c.get(f"/earth/seen?lat={LAT}&lon={LON}&radius=450")).json()
        async with mcp.Client(c.base_url + "/mcp") as client:
            result = await client.call_tool("seen_layer", {"lat": LAT, "lon": LON, "radius": 450})
        assert not result.is_error
        assert rest["count"] > 50 and result.structured_content["facts"] == rest["facts"]
        assert json.loads(result.content[0].text)["facts"] == rest["facts"]
    finally:
        await stop_coordinator(c)


async def test_a_dense_circle_is_truncated_to_the_nearest_with_a_caveat(db_url, photos):
    rows = fact_rows(400, 300, seed=4)
    c = await seeded(db_url, photos, rows, seen_max_facts=25)
    try:
        body = (await c.get(f"/earth/seen?lat={LAT}&lon={LON}&radius=450")).json()
        assert body["truncated"] is True and body["count"] == 25 and body["maxFacts"] == 25
        nearest = sorted((distance_m(LAT, LON, r["lat"], r["lon"]), r["photos"][0]) for r in rows)[:25]
        assert [f["photos"][0] for f in body["facts"]] == [p for _, p in nearest]
        assert any(x.startswith("Truncated") for x in body["caveats"])
    finally:
        await stop_coordinator(c)


async def test_covered_needs_every_cell_and_partial_coverage_is_a_fraction(db_url, photos):
    ground = coverage.circle_cells(LAT, LON, 300)
    some = set(sorted(ground)[: len(ground) // 2])
    c = await seeded(db_url, photos, [], covered=some)
    try:
        body = (await c.get(f"/earth/seen?lat={LAT}&lon={LON}&radius=300")).json()
        assert body["covered"] is False
        assert body["coverage"] == {"h3Resolution": 10, "cells": len(ground), "coveredCells": len(some),
                                    "fraction": round(len(some) / len(ground), 4), "withImageryCells": len(some),
                                    "noImageryCells": 0, "imageryShare": 1.0}
        async with c.services.db.write() as s:
            await s.execute(insert(CoverageCell), [{"cell": x, "state": "covered", "request_id": None,
                                                    "updated_at": AT, "covered_at": AT} for x in ground - some])
        body = (await c.get(f"/earth/seen?lat={LAT}&lon={LON}&radius=300")).json()
        assert body["covered"] is True and body["coverage"]["fraction"] == 1.0
        wider = (await c.get(f"/earth/seen?lat={LAT}&lon={LON}&radius=600")).json()
        assert wider["covered"] is False and 0 < wider["coverage"]["fraction"] < 1
        areas = (await c.get("/public/v1/anon/seen-areas")).json()
        assert areas["count"] == 1 and areas["features"][0]["properties"]["cells"] == len(ground)
    finally:
        await stop_coordinator(c)


async def test_seen_areas_hold_ground_swept_with_no_imagery_and_a_fraction_is_never_rounded_up(db_url, photos):
    """Swept with no imagery is covered to the seen layer and the queue, so to seen-areas too;
    a circle all but one cell covered is not 'covered (100%)'."""
    ground = sorted(coverage.circle_cells(LAT, LON, 1500))
    bare, rest = ground[0], set(ground[1:-1])          # one swept with no imagery, one left unswept
    c = await seeded(db_url, photos, [], covered=rest)
    try:
        async with c.services.db.write() as s:
            await s.execute(insert(CoverageCell), [{"cell": bare, "state": "no_imagery", "request_id": None,
                                                    "updated_at": AT, "covered_at": AT}])
        body = (await c.get(f"/earth/seen?lat={LAT}&lon={LON}&radius=1500")).json()
        assert body["covered"] is False and body["coverage"]["fraction"] > 0.995
        assert "(99%)" in body["caveats"][0], body["caveats"][0]
        props = (await c.get("/public/v1/anon/seen-areas")).json()["features"][0]["properties"]
        assert props["cells"] == len(ground) - 1 and props["noImageryCells"] == 1
    finally:
        await stop_coordinator(c)


@pytest.mark.parametrize("path,param", [
    ("/earth/seen?lat=0&lon=0&radius=99", "radius"), ("/earth/seen?lat=0&lon=0&radius=1501", "radius"),
    ("/earth/seen?lat=91&lon=0", "lat"), ("/earth/street-measure?lat=0&lon=0&maxM=49", "maxM"),
    ("/earth/street-measure?lat=0&lon=0&maxM=401", "maxM"), ("/earth/seen?lon=0", "lat")])
async def test_bounds_of_the_contract_are_enforced_with_the_one_error_shape(coordinator, path, param):
    r = await coordinator.get(path)
    assert r.status == 400
    assert_error_shape(r.json(), "bad_parameter")
    assert r.json()["error"]["details"]["parameter"] == param


async def test_defaults_families_and_credentials(coordinator):
    body = (await coordinator.get("/earth/seen?lat=1&lon=1")).json()
    assert body["covered"] is False and body["facts"] == [] and list(body)[0] == "caveats"
    assert body["coverage"]["cells"] == len(coverage.circle_cells(1, 1, 450))      # radius defaults to 450
    m = (await coordinator.get("/earth/street-measure?lat=1&lon=1")).json()
    assert m["measured"] is False and m["roadWidth"]["value"] is None
    assert (await coordinator.get("/legacy/seen?lat=1&lon=1")).status == 404     # absent from legacy
    assert (await coordinator.get("/legacy/street-measure?lat=1&lon=1")).status == 404
    r = await coordinator.get("/public/v1/not-a-credential/seen-areas")
    assert r.status == 401
    assert_error_shape(r.json(), "unauthorized")
    doc = (await coordinator.get("/public/v1/anon/seen-areas")).json()
    assert doc["type"] == "FeatureCollection" and doc["features"] == [] and doc["truncated"] is False
    spec = (await coordinator.get("/openapi.json")).json()
    assert {"/earth/seen", "/earth/street-measure", "/public/v1/{cred}/seen-areas"} <= set(spec["paths"])


async def test_a_read_survives_its_connections_dying_on_postgresql(db_url, photos):
    """The seen layer's PostgreSQL reader does not check connections as it takes them
    (``seen.reader``): a read on a dead one is run again on a fresh one, and answers."""
    if not db_url.startswith("postgresql"):
        pytest.skip("PostgreSQL only: SQLite readers open the file, there is no server to lose")
    from sqlalchemy import text

    c = await seeded(db_url, photos, fact_rows(80, 400, seed=12))
    try:
        path = f"/earth/seen?lat={LAT}&lon={LON}&radius=450"
        first = (await c.get(path)).json()
        assert first["count"] > 20
        async with c.services.db.write() as s:          # every other backend: the reader's pooled ones
            killed = (await s.execute(text("SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity "
                                           "WHERE datname = current_database() AND pid <> pg_backend_pid() "
                                           "AND backend_type = 'client backend'"))).scalar_one()
        assert killed >= 1
        for _ in range(3):
            again = await c.get(path)
            assert again.status == 200 and again.json()["facts"] == first["facts"]
    finally:
        await stop_coordinator(c)


def test_times_are_served_in_utc_with_z_and_a_time_without_a_zone_is_kept_as_it_came():
    from coordinator.sources.values import utc_z
    assert utc_z("2026-06-01T08:13:32+00:00") == "2026-06-01T08:13:32Z"
    assert utc_z("2026-06-01T15:13:32.250+07:00") == "2026-06-01T08:13:32Z"
    assert utc_z("2026-06-01T08:13:32Z") == "2026-06-01T08:13:32Z"
    assert utc_z("2026-06-01T08:13:32") == "2026-06-01T08:13:32" and utc_z("yesterday") == "yesterday"
