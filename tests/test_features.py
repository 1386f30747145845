"""Map data (issue 22) on the synthetic town, in the real file formats, on both databases:
the loads (progress, bad records counted, the extract's declared bounds as extent), each
tool over the loaded data, sampling, per-plan caps, licenses kept separable, the live
Overpass fallback where no extract covers a request (and its remark as a partial answer),
place trends across two snapshots, and brand counts that never leak a row."""
from __future__ import annotations

import json
from pathlib import Path

import pytest

from coordinator.datasets import ingest
from coordinator.features import synthetic
from coordinator.features.tools import NONE_MAPPED, NOT_ANSWERED
from tests.support import make_settings, start_coordinator, stop_coordinator

CENTRE = (-6.9147, 107.6098)          # lat, lon: the demo's town
LAT, LON = CENTRE
TOWN = f"{LON - 0.009},{LAT - 0.009},{LON + 0.009},{LAT + 0.009}"
WHOLE = f"{LON - 0.01},{LAT - 0.01},{LON + 0.01},{LAT + 0.01}"      # the extract's declared bounds


@pytest.fixture(scope="module")
def files(tmp_path_factory) -> dict[str, Path]:
    d = tmp_path_factory.mktemp("map")
    out = {"osm": d / "town.osm.pbf", "old": d / "places-2026-09.geojsonl", "new": d / "places-2026-10.parquet",
           "xml": d / "town.osm"}
    out["counts"] = synthetic.write_extract(out["osm"], CENTRE, bad_way=True)
    synthetic.write_extract(out["xml"], CENTRE)
    synthetic.write_geojsonseq(out["old"], synthetic.places(CENTRE, 400), bad_lines=2)
    synthetic.write_geoparquet(out["new"], synthetic.places(CENTRE, 440, drop_every=10))
    return out


@pytest.fixture
async def c(db_url, upstream):
    c = await start_coordinator(make_settings(db_url, upstream))
    yield c
    await stop_coordinator(c)


@pytest.fixture
async def loaded(c, files):
    db = c.services.db
    c.osm = await ingest.run(db, "osm", files["osm"])
    c.old = await ingest.run(db, "places", files["old"])
    c.new = await ingest.run(db, "places", files["new"])
    c.files = files
    return c


async def test_loads_count_bad_records_and_keep_the_declared_bounds(loaded, files):
    v = loaded.osm
    counts = files["counts"]
    assert v.state == "ready" and v.bad_records == 1 and "some of its nodes are not in the extract" in v.bad_samples[0]
    assert v.records == sum(counts.values())
    assert [v.west, v.south, v.east, v.north] == pytest.approx([LON - 0.01, LAT - 0.01, LON + 0.01, LAT + 0.01])
    assert loaded.old.records == 400 and loaded.old.bad_records == 2
    assert loaded.new.bad_records == 0 and loaded.new.records == 440 - len(range(0, 440, 10))


async def test_a_load_writes_its_rows_in_query_order_and_leaves_no_staging(loaded, monkeypatch):
    """Rows reach map_features in (cls, tile, level descending, sample) order, so a bbox
    sample's rows lie together on disk; the staging table is left empty."""
    import sqlalchemy as sa
    from coordinator.features import store
    C = store.C
    monkeypatch.setattr(store, "MOVE_ROWS", 50)          # many small moves, as a large extract makes
    v = await ingest.run(loaded.services.db, "places", Path(loaded.files["new"]))
    async with loaded.services.db.engine.connect() as conn:
        rows = (await conn.execute(sa.select(C.cls, C.tile, C.level, C.sample).where(C.version_id == v.id)
                                   .order_by(C.id))).all()
        staged = (await conn.execute(sa.select(sa.func.count()).select_from(store.LOAD_TABLE))).scalar_one()
    keys = [(r.cls, r.tile, -r.level, r.sample) for r in rows]
    assert len(keys) == v.records + sum(1 for r in rows if r.cls == "brand") and keys == sorted(keys)
    assert staged == 0


async def test_places_are_sampled_with_the_full_count_and_their_own_licenses(loaded):
    body = (await loaded.get(f"/earth/places?bbox={TOWN}")).json()
    assert body["answeredBy"] == "dataset:places" and body["health"]["degraded"] is False
    assert body["health"]["sources"][0]["dataset"]["version"] == loaded.new.id
    assert body["matched"] == body["count"] > 300 and body["sampled"] is False
    assert set(body["licenses"]) == {"CDLA-Permissive-2.0", "Apache-2.0", "CC0-1.0"}
    assert sum(body["licenses"].values()) == body["count"]
    f = body["features"][0]
    assert f["type"] == "Feature" and f["geometry"]["type"] == "Point" and f["properties"]["license"]
    assert f["properties"]["name"].startswith("Synthetic Place")


async def test_sampling_is_stable_and_says_how(loaded, monkeypatch):
    import dataclasses
    from coordinator.core.access import plans
    exact = (await loaded.get(f"/earth/places?bbox={TOWN}")).json()
    assert exact["matchedEstimated"] is False and exact["sampled"] is False
    monkeypatch.setitem(plans.CAPS, "anon", dataclasses.replace(plans.CAPS["anon"], rows=50))
    one = (await loaded.get(f"/legacy/places?bbox={TOWN}")).json()        # other families: computed again
    two = (await loaded.get(f"/public/v1/anon/places?bbox={TOWN}")).json()
    assert one["count"] == 50 and one["sampled"] is True and one["matchedEstimated"] is True
    assert abs(one["matched"] - exact["matched"]) <= one["sampling"]["matchedMargin"]
    assert one["sampling"]["returned"] == 50 and "uniform sample" in one["sampling"]["method"]
    assert [f["id"] for f in one["features"]] == [f["id"] for f in two["features"]]


async def test_stored_features_are_those_rendered_from_the_rows(loaded):
    """A bbox answer joins each point's feature as encoded at load (``doc``, migration 0015):
    the same bytes as rendering the row's columns, and a load made before 0015 (no docs)
    is answered the same, from its columns."""
    import sqlalchemy as sa
    from coordinator.features import store
    db = loaded.services.db
    async with db.engine.connect() as conn:
        docs = dict((await conn.execute(sa.select(store.C.cls, sa.func.count(store.C.doc)).group_by(store.C.cls))).all())
    assert docs["place"] > 300 and docs["comm_tower"] > 0 and docs["power_line"] == docs["tree"] == docs["brand"] == 0
    routes = (f"/places?bbox={TOWN}", f"/infrastructure?bbox={WHOLE}")
    stored = [(await loaded.get(f"/earth{route}")).json() for route in routes]
    async with db.write_core() as conn:
        await conn.execute(sa.update(store.TABLE).values(doc=None))
    rendered = [(await loaded.get(f"/legacy{route}")).json() for route in routes]     # not the cached answer
    for a, b in zip(stored, rendered):
        assert a["count"] > 20 and json.dumps(a["features"]) == json.dumps(b["features"])
        assert (a["matched"], a["licenses"]) == (b["matched"], b["licenses"])


async def test_mcp_serves_the_stored_features_as_rest_does(loaded):
    """The stored encodings travel inside an MCP result too (its text and its structured
    content), as the same features the REST route serves."""
    from tests.test_mcp_protocol import modern_headers, rpc
    rest = (await loaded.get(f"/earth/places?bbox={TOWN}")).json()
    r = await loaded.post("/mcp", rpc("tools/call", {"name": "places_bbox", "arguments": {"bbox": TOWN}}),
                          headers=modern_headers("tools/call", "places_bbox"))
    result = r.json()["result"]
    assert result["isError"] is False and result["structuredContent"]["features"] == rest["features"]
    assert json.loads(result["content"][0]["text"])["features"] == rest["features"]


async def test_a_sample_is_the_lowest_hashes_at_the_level_that_holds_it(loaded):
    """However the levels are counted (how many queries, which levels each reads) and
    however the rows are bounded (per-bucket counts), a sample is what its definition
    says, worked out here from every place in the box."""
    from coordinator.features import store
    from coordinator.features.classes import PLACES
    db = loaded.services.db
    for box in ((LON - 0.01, LAT - 0.01, LON + 0.01, LAT + 0.01), (LON - 0.004, LAT - 0.006, LON + 0.002, LAT)):
        every = (await store.sample_box(db, loaded.new.id, PLACES, box, 10_000)).rows
        for limit in (1, 7, 50, 120, 2000):
            k = next((k for k in range(store.MAX_LEVEL, 0, -1)
                      if sum(store.level_of(r["sample"]) >= k for r in every) >= limit), 0)
            held = sorted((r for r in every if store.level_of(r["sample"]) >= k), key=lambda r: r["sample"])
            found = await store.sample_box(db, loaded.new.id, PLACES, box, limit, docs=True)
            assert [r["sample"] for r in found.rows] == [r["sample"] for r in held[:limit]]
            assert found.total == len(held) << k and found.total_estimated == (k > 0)


async def test_every_way_of_reading_a_sample_gives_the_same_answer(loaded, monkeypatch):
    """The counts from memory (``store._top``) or from the database, read by tile, whole
    classes or by level (the level index, migration 0016, and the infra index, 0017), and
    the rows bounded exactly or to within a bucket: the same features, in the same order,
    the same bytes, and the same count, for places and infrastructure, small boxes and the
    whole extract."""
    import orjson
    import sqlalchemy as sa
    from coordinator.features import geojson, store
    from coordinator.features.classes import INFRASTRUCTURE, PLACES
    db = loaded.services.db
    boxes = ((LON - 0.01, LAT - 0.01, LON + 0.01, LAT + 0.01), (LON - 0.004, LAT - 0.006, LON + 0.002, LAT),
             (LON - 0.0012, LAT + 0.001, LON + 0.0007, LAT + 0.0031))

    async def answers() -> list:
        out = []
        for version, classes in ((loaded.new.id, PLACES), (loaded.osm.id, INFRASTRUCTURE)):
            for box in boxes:
                for limit in (1, 7, 20, 120, 2000):
                    f = await store.sample_box(db, version, classes, box, limit, docs=True)
                    out.append((f.total, f.total_estimated, f.margin, f.truncated,
                                orjson.dumps([geojson.bbox_feature(r) for r in f.rows])))
        return out

    usual = await answers()
    assert sum(1 for a in usual if a[1]) > 5 and sum(1 for a in usual if not a[1]) > 5   # estimated and exact
    ways = {"database counts": {"TOP_ENTRIES": 0},
            "by tile": {"TOP_ENTRIES": 0, "SEEK_COST": 0},
            "by level or whole classes": {"TOP_ENTRIES": 0, "SEEK_COST": 10 ** 9}}
    for way, settings in ways.items():
        with monkeypatch.context() as m:
            m.setitem(db.memo, "map_tops", {})
            for name, value in settings.items():
                m.setattr(store, name, value)
            assert await answers() == usual, way
    # Reading by level reads the level index, the literal bound being its own condition.
    levels = await store.level_totals(db, loaded.new.id)
    with monkeypatch.context() as m:
        m.setattr(store, "SEEK_COST", 10 ** 9)
        where = store._box_clause(db, PLACES, boxes[0], loaded.new.id, await store.class_totals(db, loaded.new.id),
                                  min_level=5, levels=levels)
    sql = str(sa.select(store.C.sample).where(where).compile(db.engine.sync_engine,
                                                             compile_kwargs={"literal_binds": True}))
    assert "level >= 4" in sql and "tile" not in sql
    if db.is_sqlite:
        async with db.engine.connect() as conn:
            plan = " ".join(str(r) for r in await conn.exec_driver_sql("EXPLAIN QUERY PLAN " + sql))
        assert "ix_map_features_level" in plan
    # The infrastructure tool's point classes are read by level at every level, from the
    # infra index (migration 0017), its condition written as the index's own.
    from coordinator.core.db.models import INFRA_POINTS_SQL
    from coordinator.features.classes import is_line
    points = [c for c in INFRASTRUCTURE if not is_line(c)]
    assert set(points) == store.INFRA_POINTS and all(f"'{c}'" in INFRA_POINTS_SQL for c in points)
    with monkeypatch.context() as m:
        m.setattr(store, "SEEK_COST", 10 ** 9)
        where = store._box_clause(db, points, boxes[0], loaded.osm.id, await store.class_totals(db, loaded.osm.id),
                                  min_level=1, levels=await store.level_totals(db, loaded.osm.id))
    sql = str(sa.select(*store.DOC_COLUMNS).where(where).compile(db.engine.sync_engine,
                                                               compile_kwargs={"literal_binds": True}))
    assert INFRA_POINTS_SQL in sql and "tile" not in sql
    if db.is_sqlite:
        async with db.engine.connect() as conn:
            plan = " ".join(str(r) for r in await conn.exec_driver_sql("EXPLAIN QUERY PLAN " + sql))
        assert "COVERING INDEX ix_map_features_infra" in plan


def test_an_encoding_too_long_for_the_level_index_is_not_stored():
    """A point whose encoded feature passes ``DOC_MAX_BYTES`` (a PostgreSQL index entry holds
    about 2,700 bytes) stores no ``doc``: it is rendered per request, to the same bytes."""
    import orjson
    from coordinator.features import geojson, store
    [short] = store.rows_for(1, "overture:a", ["place"], license="CDLA-Permissive-2.0", point=(LON, LAT),
                             name="Synthetic Place", props={"category": "cafe"})
    [long] = store.rows_for(1, "overture:b", ["place"], license="CDLA-Permissive-2.0", point=(LON, LAT),
                            name="Synthetic Place " + "é" * 1000, props={"category": "cafe"})
    assert short["doc"] is not None and long["doc"] is None
    assert orjson.dumps(geojson.bbox_feature({**long, "doc": None})).decode() == (
        orjson.dumps(geojson.feature(long, geojson.place_properties(long))).decode())
    assert len(orjson.dumps(geojson.bbox_feature(long))) > geojson.DOC_MAX_BYTES


async def test_infrastructure_lists_towers_power_and_lines_from_the_extract(loaded, files):
    body = (await loaded.get(f"/earth/infrastructure?bbox={WHOLE}")).json()
    classes = {}
    for f in body["features"]:
        classes[f["properties"]["class"]] = classes.get(f["properties"]["class"], 0) + 1
    assert body["answeredBy"] == "dataset:osm" and body["licenses"] == {"ODbL-1.0": body["count"]}
    assert classes["comm_tower"] == files["counts"]["comm_tower"] and classes["power_line"] == 1
    assert classes["substation"] == 1 and classes["power_pole"] > 0 and classes["power_tower"] > 0
    line = next(f for f in body["features"] if f["properties"]["class"] == "power_line")
    assert line["geometry"]["type"] == "LineString" and len(line["geometry"]["coordinates"]) >= 2
    assert any("very incomplete" in cv for cv in body["caveats"])


async def test_environment_features_near_a_point_with_height_priors(loaded):
    body = (await loaded.get(f"/earth/environment?lat={LAT}&lon={LON}&radius=300")).json()
    assert body["answeredBy"] == "dataset:osm" and body["radiusM"] == 300
    kinds = {f["properties"]["class"] for f in body["features"]}
    assert {"tree", "gate"} <= kinds
    d = [f["properties"]["distanceM"] for f in body["features"]]
    assert d == sorted(d) and max(d) <= 300
    tree = next(f for f in body["features"] if f["properties"]["class"] == "tree")
    assert tree["properties"]["heightM"] is None and tree["properties"]["heightPrior"]["basis"] == "assumed"
    r = await loaded.get(f"/earth/environment?lat={LAT}&lon={LON}&radius=900")
    assert r.status == 400 and "radius" in r.json()["error"]["message"]


async def test_road_geometry_carries_the_width_model(loaded):
    body = (await loaded.get(f"/earth/road-geometry?lat={LAT}&lon={LON}&radius=1000")).json()
    roads = {f["properties"]["highway"]: f["properties"] for f in body["features"]}
    assert roads["residential"]["ruasWidthM"] == 3.25 and roads["secondary"]["ruasWidthM"] == 4.5
    assert roads["primary"]["ruasWidthM"] == 5.5 and roads["service"]["ruasWidthM"] is None
    assert roads["trunk"]["ruasWidthM"] == 5.5
    assert all(f["geometry"]["type"] in ("LineString", "MultiLineString") for f in body["features"])
    assert any("not a measurement" in cv for cv in body["caveats"]) and "PP 34/2006" in body["widthModel"]
    assert all(f["properties"]["distanceM"] <= 1000 for f in body["features"])


async def test_a_circle_across_the_antimeridian_says_its_far_side_was_not_searched(c):
    """The boxes the store and Overpass search run west to east and stop at 180 degrees: near Taveuni
    (Fiji) a circle's far side is not searched, and the answer says so rather than count it as none."""
    from coordinator.features.grid import ANTIMERIDIAN
    for lon, cut in ((179.999, True), (-179.9995, True), (179.9, False)):
        for route in (f"/earth/environment?lat=-16.8&lon={lon}&radius=400",
                      f"/earth/road-geometry?lat=-16.8&lon={lon}&radius=400",
                      f"/earth/site-intel?lat=-16.8&lon={lon}&radius=400"):
            r = await c.get(route)
            assert r.status == 200, (route, r.json())
            assert (ANTIMERIDIAN in r.json()["caveats"]) == cut, route


@pytest.mark.parametrize("header", [True, False], ids=["declared bounds", "records' reach"])
async def test_an_extract_across_the_antimeridian_covers_its_own_ground_and_no_other(c, tmp_path, header):
    """A Fiji extract from 179.8 to -179.8: read as minima and maxima its extent was the band round the
    Earth but its own ground, so its towers were never served and Madagascar was answered 'none mapped'
    from it. libosmium keeps a crossing header box as -179.8..179.8; it is read as the file meant it."""
    import osmium
    path = tmp_path / "fiji.osm.pbf"
    h = osmium.io.Header()
    if header:
        h.add_box(osmium.osm.Box(osmium.osm.Location(179.8, -16.9), osmium.osm.Location(-179.8, -16.7)))
    w = osmium.SimpleWriter(str(path), header=h)
    for i, (lon, lat) in enumerate(((179.9, -16.9), (-179.9, -16.7)), 1):
        w.add_node(osmium.osm.mutable.Node(id=i, location=(lon, lat), tags={"power": "tower"}))
    w.close()
    v = await ingest.run(c.services.db, "osm", path)
    assert v.west > v.east and v.west == pytest.approx(179.8 if header else 179.9)
    for w, e in ((179.9, 180), (-180, -179.9)):             # each side of 180, inside the records' reach too
        body = (await c.get(f"/earth/infrastructure?bbox={w},-16.9,{e},-16.7")).json()
        assert body["answeredBy"] == "dataset:osm" and body["count"] == 1, (w, body)
    body = (await c.get("/earth/infrastructure?bbox=46.4,-16.85,46.5,-16.75")).json()     # Madagascar
    assert body["answeredBy"] != "dataset:osm"


async def test_place_trends_between_the_two_newest_snapshots(loaded):
    body = (await loaded.get(f"/earth/place-trends?bbox={TOWN}")).json()
    assert body["covered"] is True and body["to"]["version"] == loaded.new.id and body["from"]["version"] == loaded.old.id
    assert body["appeared"]["count"] > 0 and body["disappeared"]["count"] > 0
    assert all(s["name"].startswith("Synthetic Place") for s in body["appeared"]["samples"])
    assert "mapping activity" in body["caveats"][0]
    legacy = (await loaded.get(f"/legacy/place-trends?bbox={TOWN}")).json()
    assert legacy["appeared"] == body["appeared"]
    assert (await loaded.get(f"/earth/place-trends?bbox={LON},{LAT},{LON + 1.5},{LAT + 0.5}")).status == 400


async def test_place_trends_with_one_snapshot_is_unknown_not_zero(c, files):
    await ingest.run(c.services.db, "places", files["old"])
    body = (await c.get(f"/earth/place-trends?bbox={TOWN}")).json()
    assert body["covered"] is False and body["appeared"] is None and "holds 1 snapshot" in body["reason"]
    # Not kept: the next load answers it (a kept copy asked for that load for an hour after it was done).
    await ingest.run(c.services.db, "places", files["new"])
    assert (await c.get(f"/earth/place-trends?bbox={TOWN}")).json()["covered"] is True


async def test_place_trends_never_serves_a_snapshot_dropped_while_it_was_read(loaded, monkeypatch):
    """``sis datasets drop`` deletes a version's rows at once: an answer that was reading it came back
    with nothing disappeared and nothing unchanged, named the dropped version, and was cached."""
    from coordinator.datasets import drop
    from coordinator.features import store
    real = store.fids_in_box

    async def read_then_drop(db, version_id, *args):
        rows = await real(db, version_id, *args)
        if version_id == loaded.new.id:                       # the newer one is read first: drop the older
            monkeypatch.setattr(store, "fids_in_box", real)
            (old,) = await drop.check(db, [loaded.old.id])
            await drop.drop(db, old, loaded.services.settings.data_dir)
        return rows

    monkeypatch.setattr(store, "fids_in_box", read_then_drop)
    body = (await loaded.get(f"/earth/place-trends?bbox={TOWN}")).json()
    assert body["covered"] is False and "holds 1 snapshot" in body["reason"], body


async def test_nothing_loaded_places_say_so_degraded(c):
    body = (await c.get(f"/earth/places?bbox={TOWN}")).json()
    assert body["health"]["degraded"] is True and body["count"] == 0 and "empty" not in body
    assert "sis ingest places FILE" in body["health"]["sources"][0]["error"]
    # Nothing was read: the full count is unknown, not zero, and no source answered.
    assert body["matched"] is None and body["sampling"]["matched"] is None and body["answeredBy"] is None
    assert NOT_ANSWERED in body["caveats"] and NONE_MAPPED not in body["caveats"]
    # A dataset nobody loaded is not a source that failed for now: no retry fills it, and the caveat
    # said "retry later for a full read".
    first = body["caveats"][0]
    assert first.startswith("Degraded: 1 of 1 sources are not loaded on this service (dataset:places)")
    assert "retry later" not in " ".join(body["caveats"])


async def test_overpass_answers_where_no_extract_covers(c, upstream):
    body = (await c.get("/earth/environment?lat=-6.9003&lon=107.6301&radius=200")).json()
    assert body["answeredBy"] == "overpass" and body["health"]["degraded"] is False
    kinds = sorted({f["properties"]["class"] for f in body["features"]})
    assert kinds == ["comm_tower", "gate", "power_line", "power_tower", "tree"]
    sent = upstream.bodies["/overpass/api/interpreter"][-1].decode()
    assert "data=%5Bout%3Ajson%5D" in sent
    roads = (await c.get("/earth/road-geometry?lat=-6.9003&lon=107.6301&radius=200")).json()
    assert {f["properties"]["highway"] for f in roads["features"]} == {"secondary", "service"}


async def test_an_overpass_remark_is_a_partial_degraded_answer(c, upstream):
    doc = json.loads((Path(__file__).parents[1] / "coordinator/features/samples/overpass/api/interpreter.json")
                     .read_text())
    doc["remark"] = 'runtime error: Query timed out in "query" at line 1 after 26 seconds.'
    doc["elements"] = doc["elements"][:2]
    upstream.set_json("/overpass/api/interpreter", doc)
    r = await c.get("/earth/environment?lat=-6.9003&lon=107.6301&radius=200")
    body = r.json()
    assert body["health"]["degraded"] is True and "timed out" in body["health"]["sources"][0]["error"]
    assert body["count"] == 2 and r.headers["Cache-Control"].startswith("no-store")
    assert body["answeredBy"] == "overpass" and body["matched"] is None       # some of them, the rest unknown


async def test_overpass_down_is_degraded_not_empty(c, upstream):
    upstream.set_json("/overpass/api/interpreter", {"error": "busy"}, status=429)
    body = (await c.get(f"/earth/infrastructure?bbox={TOWN}")).json()
    assert body["health"]["degraded"] is True and "429" in body["health"]["sources"][0]["error"]
    assert "empty" not in body and body["matched"] is None and body["answeredBy"] is None


async def test_caps_per_plan_bind_the_credentialed_routes(loaded):
    r = await loaded.get(f"/public/v1/anon/places?bbox={LON},{LAT},{LON + 0.5},{LAT + 0.5}")
    assert r.status == 400 and r.json()["error"]["details"]["cap"] == "bboxDeg"
    r = await loaded.get(f"/public/v1/anon/infrastructure?bbox={LON},{LAT},{LON + 0.3},{LAT + 0.1}")
    assert r.status == 400
    assert (await loaded.get(f"/public/v1/anon/places?bbox={TOWN}")).status == 200


async def test_a_cached_answer_follows_the_callers_plan(loaded, monkeypatch):
    """An answer cut to a plan's caps is cached for that plan alone: a Pro caller never gets
    the sample drawn for anon, and anon never gets an answer its caps refuse."""
    import dataclasses

    from coordinator.core.access import plans
    from tests.test_access_support import key
    monkeypatch.setitem(plans.CAPS, "anon", dataclasses.replace(plans.CAPS["anon"], rows=50))
    pro, _ = await key(loaded, "Pro")
    small = (await loaded.get(f"/public/v1/anon/places?bbox={TOWN}")).json()
    full = (await loaded.get(f"/public/v1/{pro}/places?bbox={TOWN}")).json()
    assert small["sampling"]["limit"] == 50 and small["count"] == 50
    assert full["sampling"]["limit"] == plans.CAPS["Pro"].rows and full["count"] == full["matched"] > 50
    again = (await loaded.get(f"/public/v1/anon/places?bbox={TOWN}")).json()
    assert again["sampling"]["limit"] == 50 and again["count"] == 50

    wide = f"{LON - 0.2},{LAT - 0.2};{LON + 0.2},{LAT - 0.2};{LON + 0.2},{LAT + 0.2};{LON - 0.2},{LAT + 0.2}"
    assert plans.CAPS["anon"].bbox_deg < 0.4 <= plans.CAPS["Pro"].bbox_deg
    assert (await loaded.get(f"/public/v1/{pro}/brand-exposure?brand=Q99999901&poly={wide}")).status == 200
    r = await loaded.get(f"/public/v1/anon/brand-exposure?brand=Q99999901&poly={wide}")
    assert r.status == 400
    # The plan's shape is checked before the call is admitted: a refusal is not counted against the quota.
    free, _ = await key(loaded, "Free")
    wider = f"{LON - 0.4},{LAT - 0.4};{LON + 0.4},{LAT - 0.4};{LON + 0.4},{LAT + 0.4};{LON - 0.4},{LAT + 0.4}"
    for _ in range(3):
        assert (await loaded.get(f"/public/v1/{free}/brand-exposure?brand=Q99999901&poly={wider}")).status == 400
    assert (await loaded.get(f"/public/v1/{free}/limits")).json()["quota"]["usedToday"] == 0 and r.json()["error"]["details"]["cap"] == "bboxDeg"


async def test_brand_exposure_counts_and_never_serves_rows(loaded):
    ring = f"{LON - 0.0095},{LAT - 0.0095};{LON + 0.0095},{LAT - 0.0095};{LON + 0.0095},{LAT + 0.0095};" \
           f"{LON - 0.0095},{LAT + 0.0095}"
    r = await loaded.get(f"/public/v1/anon/brand-exposure?brand=Q99999901&poly={ring}")
    body = r.json()
    assert r.status == 200 and body["counts"]["osm"] > 0 and body["counts"]["places"] > 0
    text = json.dumps(body)
    assert "coordinates" not in text and "osm:node" not in text and "features" not in body
    assert not any("count of 0" in c for c in body["caveats"])
    none = (await loaded.get(f"/public/v1/anon/brand-exposure?brand=Q99999903&poly={ring}")).json()
    assert none["counts"] == {"osm": 0, "places": 0}                 # a floor: none tagged, not none there
    assert any("count of 0" in c and "unknown, not none" in c for c in none["caveats"])
    assert (await loaded.get(f"/public/v1/anon/brand-exposure?brand=X1&poly={ring}")).status == 400
    across = "179.95,-16.9;-179.95,-16.9;-179.95,-16.8;179.95,-16.8"      # it said "must fit in 0.25 deg"
    r = await loaded.get(f"/public/v1/anon/brand-exposure?brand=Q99999901&poly={across}")
    assert r.status == 400 and "across the antimeridian" in r.json()["error"]["message"]
    bow = f"{LON},{LAT};{LON + 0.001},{LAT + 0.001};{LON + 0.001},{LAT};{LON},{LAT + 0.001}"
    assert (await loaded.get(f"/public/v1/anon/brand-exposure?brand=Q99999901&poly={bow}")).status == 400


async def test_an_osm_xml_extract_loads_too(c, files):
    v = await ingest.run(c.services.db, "osm", files["xml"])
    assert v.state == "ready" and v.bad_records == 0 and v.records > 200


async def test_places_beyond_the_loaded_extent_say_the_rest_is_unknown(loaded):
    wide = f"{LON - 0.05},{LAT - 0.05},{LON + 0.05},{LAT + 0.05}"
    body = (await loaded.get(f"/earth/places?bbox={wide}")).json()
    assert body["answeredBy"] == "dataset:places" and body["count"] > 300
    assert any("reaches beyond the loaded places dataset" in cv for cv in body["caveats"])
    trends = (await loaded.get(f"/earth/place-trends?bbox={wide}")).json()
    assert trends["covered"] is True and any("nothing is known" in cv for cv in trends["caveats"])


async def test_demo_mode_loads_the_synthetic_town_once(c):
    from coordinator.datasets import versions
    from coordinator.features.demo import SOURCE, load_demo_map
    await load_demo_map(c.services.db, CENTRE)
    await load_demo_map(c.services.db, CENTRE)
    loaded = await versions.list_versions(c.services.db)
    assert [v.kind for v in loaded] == ["osm", "places", "places"] and all(v.source == SOURCE for v in loaded)
    body = (await c.get(f"/earth/place-trends?bbox={TOWN}")).json()
    assert body["covered"] is True and body["disappeared"]["count"] > 0
    assert body["health"]["sources"][0]["demo"] is True and body["caveats"][0].startswith("Demo data")


@pytest.mark.postgres
async def test_sqlite_and_postgresql_answer_alike_from_the_same_files(files, upstream, tmp_path, pg_database,
                                                                      monkeypatch):
    """The same files loaded into SQLite and PostgreSQL give every map tool the same answer,
    byte for byte (issue 22): the same features chosen, in the same order, with the same
    coordinates, properties and counts, whichever database an operator chose. Lines merged
    from their chunks included: a line's chunks of one tile are rows the load's move puts in
    no order of their own, and each database returned them in its own."""
    import dataclasses
    from coordinator.core.access import plans
    from tests.conftest import fresh_postgres
    if not pg_database:
        pytest.skip("PostgreSQL suite: set SIS_TEST_DATABASE_URL")
    await fresh_postgres(pg_database)

    boxes = [(LON - 0.01, LAT - 0.01, LON + 0.01, LAT + 0.01), (LON - 0.004, LAT - 0.006, LON + 0.002, LAT),
             (LON - 0.0012, LAT + 0.001, LON + 0.0007, LAT + 0.0031), (LON - 0.009, LAT - 0.002, LON + 0.003, LAT + 0.009),
             (LON, LAT - 0.01, LON + 0.01, LAT)]
    points = [(LAT, LON, 100), (LAT, LON, 400), (LAT - 0.004, LON + 0.003, 250), (LAT + 0.002, LON - 0.002, 700)]

    async def answers(url: str) -> list[str]:
        c = await start_coordinator(make_settings(url, upstream))
        try:
            for kind in ("osm", "places"):
                await ingest.run(c.services.db, kind, files["osm" if kind == "osm" else "new"])
        finally:
            await stop_coordinator(c)
        out = []
        for rows in (2000, 50, 7):         # each sample size on a coordinator of its own: not the cached answer
            monkeypatch.setitem(plans.CAPS, "anon", dataclasses.replace(plans.CAPS["anon"], rows=rows))
            paths = [f"/legacy/{tool}?bbox={','.join(map(str, box))}"
                     for box in boxes for tool in ("places", "infrastructure")]
            paths += [f"/earth/{tool}?lat={la}&lon={lo}&radius={r}"
                      for la, lo, r in points for tool in ("environment", "road-geometry")]
            c = await start_coordinator(make_settings(url, upstream))
            try:
                for path in paths:
                    body = (await c.get(path)).json()
                    assert body["answeredBy"] != "overpass" and 0 < body["count"] <= rows, path
                    body.pop("health", None)
                    out.append(f"{rows} {path} {json.dumps(body)}")
            finally:
                await stop_coordinator(c)
        assert sum(1 for a in out if '"truncated": true' in a) > 10       # sampled and cut answers too
        return out

    on_sqlite = await answers(f"sqlite+aiosqlite:///{tmp_path}/alike.db")
    on_postgres = await answers(pg_database)
    assert len(on_sqlite) == len(on_postgres)
    differ = [a.split(" {")[0] for a, b in zip(on_sqlite, on_postgres) if a != b]
    assert not differ, differ


async def test_a_database_emptied_and_loaded_again_under_its_url_answers_from_its_new_rows(db_url, upstream, files,
                                                                                           tmp_path):
    """What a reader works out about a ready version (its rows per level, its top levels in
    memory) is kept by the coordinator's Database, not by the process under the database's
    URL and the version's id: a database emptied and loaded with other files, under the
    same URL and with the same version ids, is answered from its own rows, as a database
    that only ever held them is (it was answered from the figures of the rows before; on
    PostgreSQL the tests share one database, and one test's rows answered the next's)."""
    from tests.conftest import fresh_postgres

    async def places_after_loading(url: str, which: str) -> dict:
        if url.startswith("postgresql"):
            await fresh_postgres(url)
        else:
            Path(url.split("///", 1)[1]).unlink(missing_ok=True)
        c = await start_coordinator(make_settings(url, upstream))
        try:
            v = await ingest.run(c.services.db, "places", files[which])
            body = (await c.get(f"/legacy/places?bbox={TOWN}")).json()
            body.pop("health")
            return {"version": v.id, **body}
        finally:
            await stop_coordinator(c)

    new = await places_after_loading(db_url, "new")
    old = await places_after_loading(db_url, "old")
    only_old = await places_after_loading(f"sqlite+aiosqlite:///{tmp_path}/only-old.db", "old")
    assert new["version"] == old["version"] == 1 and new["matched"] != old["matched"]
    assert old == only_old


async def test_a_record_that_is_not_utf8_is_one_bad_record_not_the_end_of_the_load(c, files, tmp_path):
    """A strict decoder ended the whole load at one bad byte, naming a position in its buffer: a record
    holding one is counted bad with its line, and the load goes on."""
    lines = files["old"].read_bytes().split(b"\n")
    lines[200] = lines[200].replace(b"Synthetic", b"Synth\xe9tic", 1)
    bad = tmp_path / "places-latin1.geojsonl"
    bad.write_bytes(b"\n".join(lines))
    v = await ingest.run(c.services.db, "places", bad)
    assert v.state == "ready" and v.records == 399 and v.bad_records == 3       # the two bad lines, and this one
    assert "line 201: not UTF-8: byte 0xE9" in v.bad_samples
