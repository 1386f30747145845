"""Site scores and site scans (issue 24) over the synthetic town, in the real formats (an
.osm.pbf, Overture places, an Esri ASCII population grid), on both databases: signed
contributions with evidence geometry, the null score below the evidence threshold, the
saturation factor, the bounds, the credentialed route's scope rule, and the scan's ranked
cells with their nearest-road distance checked against the road geometry."""
from __future__ import annotations

import math
from pathlib import Path

import pytest

from coordinator.core.access import plans
from coordinator.datasets import ingest
from coordinator.features import grid, synthetic
from coordinator.hazards import history
from coordinator.sites import model, population
from tests.support import make_settings, start_coordinator, stop_coordinator
from tests.test_access_support import key

CENTRE = (-6.9147, 107.6098)
LAT, LON = CENTRE
PER_CELL = 40.0          # people in each 0.001-degree cell of the synthetic grid
CELL = 0.001


def write_population(path: Path, centre: tuple[float, float] = CENTRE, half: float = 0.012,
                     nodata_rows: int = 0) -> None:
    """A grid over the town: PER_CELL people a cell, the first ``nodata_rows`` rows NODATA."""
    n = int(round(2 * half / CELL))
    rows = [[None if r < nodata_rows else PER_CELL for _ in range(n)] for r in range(n)]
    population.write_asc(path, centre[1] - half, centre[0] - half, CELL, rows)


@pytest.fixture(scope="module")
def files(tmp_path_factory) -> dict[str, Path]:
    d = tmp_path_factory.mktemp("sites")
    out = {"osm": d / "town.osm.pbf", "places": d / "places.geojsonl", "pop": d / "pop.asc"}
    synthetic.write_extract(out["osm"], CENTRE, half_deg=0.02)
    synthetic.write_geojsonseq(out["places"], synthetic.places(CENTRE, 1500, half_deg=0.02))
    write_population(out["pop"], half=0.02)
    return out


@pytest.fixture
async def c(db_url, upstream, tmp_path):
    c = await start_coordinator(make_settings(db_url, upstream, data_dir=str(tmp_path / "data")))
    yield c
    await stop_coordinator(c)


async def load_all(c, files) -> None:
    db, data = c.services.db, c.services.settings.data_dir
    for kind, f in (("osm", "osm"), ("places", "places"), ("population", "pop")):
        await ingest.run(db, kind, files[f], data_dir=data)


@pytest.fixture
async def loaded(c, files):
    await load_all(c, files)
    await history.poll_once(c.services.db, c.services.sources)      # the hazard feeds, polled once
    return c


async def test_a_site_score_has_signed_contributions_with_evidence(loaded):
    r = await loaded.get(f"/earth/site-intel?lat={LAT}&lon={LON}&radius=600")
    body = r.json()
    assert r.status == 200, body
    assert list(body)[0] == "caveats" and body["health"]["degraded"] is False
    assert 0 <= body["score"] <= 100 and body["confidence"] in ("high", "low") and body["declined"] is None
    by = {c["feature"]: c for c in body["contributions"]}
    assert set(by) == {f.name for f in model.FEATURES}
    for cn in by.values():
        assert {"feature", "weight", "value", "confidence", "evidence", "source", "contribution"} <= set(cn)
        if cn["confidence"] != "unknown":
            assert cn["contribution"] == pytest.approx(cn["weight"] * cn["signal"], abs=1e-3)
    road = by["road_access"]
    assert road["evidence"]["type"] in ("LineString", "MultiLineString") and road["value"] <= 110
    assert by["arterial_reach"]["value"] == "arterial"          # the primary street and the trunk cross here
    assert by["activity"]["evidence"]["type"] == "MultiPoint" and by["activity"]["places"] > 20
    people = by["population"]
    expected = PER_CELL / (CELL * grid.EARTH_R * math.pi / 180) ** 2 / math.cos(math.radians(LAT)) \
        * math.pi * 600 ** 2
    assert people["value"] == pytest.approx(expected, rel=0.03) and people["evidence"]["type"] == "Polygon"
    assert by["utilities"]["confidence"] == "low" and by["utilities"]["value"] > 0
    assert by["hazard"]["value"] == 0 and by["hazard"]["signal"] == 0       # no event over the town
    assert body["model"]["weights"]["road_access"] == 0.25
    assert sum(c["contribution"] for c in by.values() if c["contribution"] is not None) < 1
    legacy = (await loaded.get(f"/legacy/site-intel?lat={LAT}&lon={LON}&radius=600")).json()
    assert legacy["score"] == body["score"] and legacy["contributions"] == body["contributions"]


async def test_hazard_is_unknown_until_a_poll_has_had_an_answer_from_a_feed(c, files, upstream):
    """A poll that reached no feed read no events: a score must not count that as none."""
    await load_all(c, files)
    for path in ("/gdacs/events/geteventlist/EVENTS4APP", "/usgs/4.5_week.geojson"):
        upstream.set_json(path, {"error": "down"}, status=503)
    await history.poll_once(c.services.db, c.services.sources)

    async def hazard(radius: int = 600) -> dict:     # another radius: not the answer cached before
        body = (await c.get(f"/earth/site-intel?lat={LAT}&lon={LON}&radius={radius}")).json()
        return next(cn for cn in body["contributions"] if cn["feature"] == "hazard")
    h = await hazard()
    assert h["confidence"] == "unknown" and h["value"] is None and h["contribution"] is None, h
    upstream.load_recorded()
    await history.poll_once(c.services.db, c.services.sources)
    assert (await hazard())["confidence"] == "high"
    upstream.set_json("/gdacs/events/geteventlist/EVENTS4APP", {"error": "down"}, status=503)
    await history.poll_once(c.services.db, c.services.sources)
    h = await hazard(700)   # the events of the poll that was answered, the last one partial
    assert h["confidence"] == "low" and h["value"] == 0


async def test_an_event_square_across_the_antimeridian_holds_the_ground_beyond_it(db_url, upstream, tmp_path):
    """USGS us7000r1c2 lies at -178.2: its 4 deg square reaches 179.8 across 180 deg. It was
    cut at -180, so a site at 179.9 under it read 'no hazard' at high confidence."""
    c = await start_coordinator(make_settings(db_url, upstream, data_dir=str(tmp_path / "data"),
                                              event_square_deg=4.0))
    try:
        await history.poll_once(c.services.db, c.services.sources)
        event = next(e for e in (await c.get("/earth/events")).json()["events"] if e["id"] == "usgs:us7000r1c2")
        assert event["bbox"] == [179.8, -26.1, -176.2, -22.1]        # RFC 7946 5.2: west > east
        for lon, held in ((179.9, True), (-178.5, True), (179.5, False)):
            body = (await c.get(f"/earth/site-intel?lat=-24.1&lon={lon}&radius=500")).json()
            hz = next(cn for cn in body["contributions"] if cn["feature"] == "hazard")
            assert (hz["value"] == 1) is held, (lon, hz)
        assert hz["value"] == 0 and hz["confidence"] == "high"
        body = (await c.get("/earth/site-intel?lat=-24.1&lon=179.9&radius=500")).json()
        hz = next(cn for cn in body["contributions"] if cn["feature"] == "hazard")
        assert hz["evidence"]["type"] == "MultiPolygon" and len(hz["evidence"]["coordinates"]) == 2
        brief = (await c.get("/earth/event-brief?id=usgs:us7000r1c2")).json()
        assert brief["event"]["area"]["bbox"] == event["bbox"]
        assert brief["event"]["area"]["measuredBbox"] == [-180.0, -26.1, -176.2, -22.1]
        assert any("crosses the antimeridian" in cv for cv in brief["caveats"])
    finally:
        await stop_coordinator(c)


async def test_the_score_is_null_below_the_evidence_threshold(c, files):
    body = (await c.get(f"/earth/site-intel?lat={LAT}&lon={LON}&radius=600")).json()
    assert body["score"] is None and body["confidence"] == "unknown" and "too little is known" in body["declined"]
    assert body["caveats"][0].startswith("Degraded") and body["health"]["degraded"] is True
    assert all(cn["value"] is None and cn["contribution"] is None for cn in body["contributions"])
    # One layer known (population: a quarter of the weight) is still too little.
    await ingest.run(c.services.db, "population", files["pop"], data_dir=c.services.settings.data_dir)
    body = (await c.get(f"/earth/site-intel?lat={LAT}&lon={LON}&radius=700")).json()
    known = [cn for cn in body["contributions"] if cn["confidence"] != "unknown"]
    assert [cn["feature"] for cn in known] == ["population"]
    assert body["score"] is None and body["evidence"]["knownWeightShare"] == 0.25
    # Its files where this server does not look (an ingest run from another folder): said where, not "retry".
    import shutil

    from coordinator.datasets import versions
    (pop,) = await versions.newest_ready(c.services.db, "population")
    folder = versions.folder_of(c.services.settings.data_dir, pop)
    shutil.rmtree(folder)
    from coordinator.sites import ground
    ground._GRIDS.clear()                                         # as a server that never opened it
    body = (await c.get(f"/earth/site-intel?lat={LAT}&lon={LON}&radius=650")).json()
    said = [s["error"] for s in body["health"]["sources"] if s["name"] == "dataset:population"]
    assert said == [f"the files of population version {pop.id} are not in {folder.resolve()} (SIS_DATA_DIR): every "
                    "coordinator must see the folder `sis ingest` wrote them to"], body["health"]


async def test_unmapped_ground_is_unknown_not_zero(loaded):
    # Far from the town: no extract covers it, so roads, places and structures are unknown.
    body = (await loaded.get("/earth/site-intel?lat=-6.5&lon=107.2&radius=300")).json()
    by = {cn["feature"]: cn for cn in body["contributions"]}
    for name in ("road_access", "activity", "utilities"):
        assert by[name]["value"] is None and by[name]["confidence"] == "unknown"
    assert body["score"] is None


async def test_saturation_scales_the_score_by_same_category_places(loaded):
    base = (await loaded.get(f"/earth/site-intel?lat={LAT}&lon={LON}&radius=500")).json()
    shop = (await loaded.get(f"/earth/site-intel?lat={LAT}&lon={LON}&radius=500&category=restaurant")).json()
    none = (await loaded.get(f"/earth/site-intel?lat={LAT}&lon={LON}&radius=500&category=ice_rink")).json()
    sat = shop["saturation"]
    n = sat["sameCategoryNearby"]
    assert n > 0 and sat["value"] == pytest.approx(1 / (1 + n / model.HALF_SATURATION), abs=1e-4)
    assert sat["evidence"]["type"] == "MultiPoint" and len(sat["evidence"]["coordinates"]) == n
    assert shop["score"] == pytest.approx(base["score"] * sat["value"], abs=0.1) and shop["score"] < base["score"]
    assert none["saturation"]["value"] == 1 and none["saturation"]["sameCategoryNearby"] == 0
    assert none["saturation"]["confidence"] == "low" and none["score"] == base["score"]
    assert "saturation" not in base


@pytest.mark.parametrize("query", ["radius=99", "radius=3001", "radius=", "category=Bad%20Cat", "lat=91",
                                   "radius=500&extra=1"])
async def test_site_intel_bounds_are_checked(coordinator, query):
    args = dict(p.split("=", 1) for p in f"lat={LAT}&lon={LON}&radius=500".split("&"))
    args.update(dict(p.split("=", 1) for p in query.split("&")))
    r = await coordinator.get("/earth/site-intel?" + "&".join(f"{k}={v}" for k, v in args.items()))
    assert r.status == 400 and set(r.json()) == {"error"} and r.json()["error"]["code"] == "bad_parameter"


async def test_the_credentialed_route_needs_its_scope_and_a_key(coordinator):
    c = coordinator
    path = f"/site-intel?lat={LAT}&lon={LON}&radius=500"
    r = await c.get("/public/v1/anon" + path)
    assert r.status == 403 and r.json()["error"]["details"]["missingScopes"] == ["earth.site-intel"]
    lacking, _ = await key(c, "Free", list(plans.ANON_SCOPES))
    r = await c.get(f"/public/v1/{lacking}" + path)
    assert r.status == 403 and r.json()["error"]["details"]["missingScopes"] == ["earth.site-intel"]
    holder, _ = await key(c, "Free")
    r = await c.get(f"/public/v1/{holder}" + path)
    assert r.status == 200 and "contributions" in r.json()
    # The plan's radius cap binds the credentialed route (Free: 1500 m) though the tool takes 3000.
    r = await c.get(f"/public/v1/{holder}/site-intel?lat={LAT}&lon={LON}&radius=2500")
    assert r.status == 400
    # The direct family stays keyless.
    assert (await c.get("/earth" + path)).status == 200


async def test_a_scan_ranks_cells_with_their_nearest_road(loaded):
    box = (LON - 0.01, LAT - 0.01, LON + 0.01, LAT + 0.01)
    r = await loaded.get("/earth/site-scan?bbox=" + ",".join(map(str, box)))
    body = r.json()
    assert r.status == 200, body
    cells = body["cells"]
    assert body["h3Resolution"] == 9 and body["count"] == len(cells) > 30 and body["scored"] == len(cells)
    scores = [c["score"] for c in cells]
    assert scores == sorted(scores, reverse=True) and [c["rank"] for c in cells] == list(range(1, len(cells) + 1))
    roads = (await loaded.get(f"/earth/road-geometry?lat={LAT}&lon={LON}&radius=1000")).json()["features"]
    near = [cl for cl in cells if grid.distance_m(LAT, LON, cl["centre"][1], cl["centre"][0]) < 600]
    assert len(near) >= 10
    for cell in near:      # the road pieces within 1000 m of the centre hold every road within 400 m of these
        lon, lat = cell["centre"]
        want = min(grid.line_distance_m(lat, lon, run) for f in roads for run in (
            [f["geometry"]["coordinates"]] if f["geometry"]["type"] == "LineString" else f["geometry"]["coordinates"]))
        assert cell["nearestRoadM"]["value"] == pytest.approx(want, abs=1.0)
        assert cell["nearestRoadM"]["confidence"] == "high" and cell["confidence"] in ("high", "low")
        assert cell["geometry"]["type"] == "Polygon"
    legacy = (await loaded.get("/legacy/site-scan?bbox=" + ",".join(map(str, box)))).json()
    assert [c["cell"] for c in legacy["cells"]] == [c["cell"] for c in cells]


async def test_a_scan_with_a_category_carries_each_cells_saturation(loaded):
    box = f"{LON - 0.004},{LAT - 0.004},{LON + 0.004},{LAT + 0.004}"
    body = (await loaded.get(f"/earth/site-scan?bbox={box}&category=school")).json()
    assert body["category"] == "school" and all(0 < c["saturation"]["value"] <= 1 for c in body["cells"])
    for cell in body["cells"]:       # a figure with its confidence: low where none of the category is mapped
        sat = cell["saturation"]
        assert sat["category"] == "school" and sat["confidence"] == ("low" if sat["sameCategoryNearby"] == 0
                                                                       else "high")


async def test_a_scan_of_unloaded_ground_declines_every_cell(coordinator):
    body = (await coordinator.get(f"/earth/site-scan?bbox={LON},{LAT},{LON + 0.005},{LAT + 0.005}")).json()
    assert body["scored"] == 0 and all(c["score"] is None and c["rank"] is None for c in body["cells"])
    assert all(c["nearestRoadM"]["value"] is None and c["nearestRoadM"]["confidence"] == "unknown"
               for c in body["cells"])
    assert body["caveats"][0].startswith("Degraded")


@pytest.mark.parametrize("box", [f"{LON},{LAT},{LON + 0.051},{LAT + 0.01}", f"{LON},{LAT},{LON + 0.01},{LAT + 0.06}",
                                 f"{LON},{LAT},{LON - 0.01},{LAT + 0.01}", "1,2,3"])
async def test_a_scan_bbox_is_at_most_005_degrees(coordinator, box):
    r = await coordinator.get(f"/earth/site-scan?bbox={box}")
    assert r.status == 400 and r.json()["error"]["code"] == "bad_parameter"


def test_a_population_grid_sums_by_the_share_of_each_cell(tmp_path):
    path = tmp_path / "g.asc"
    write_population(path, half=0.005, nodata_rows=2)
    with open(path) as f:
        head, valued, missing = population.write_npy(f, tmp_path / "g.npy")
    assert (head.ncols, head.nrows, missing, valued) == (10, 10, 20, 80)
    (tmp_path / "manifest.json").write_text(__import__("json").dumps({"header": head.as_json()}))
    (tmp_path / "population.npy").write_bytes((tmp_path / "g.npy").read_bytes())
    g = population.Grid(tmp_path)
    w, s = LON - 0.005, LAT - 0.005
    box = (w + 0.0005, s + 0.0005, w + 0.0035, s + 0.0025)      # 3 x 2 cells, cut in halves at the edges
    total = population.sum_box(g.window(box), box)
    assert total.people == pytest.approx(6 * PER_CELL) and total.no_value_km2 == 0
    top = (w, s + 0.009, w + 0.002, s + 0.010)                  # over the NODATA rows: unknown, not zero
    t2 = population.sum_box(g.window(top), top)
    assert t2.people == 0 and t2.no_value_share == pytest.approx(1)


@pytest.mark.parametrize("text, why", [("ncols 2\nnrows 1\nxllcorner 0\nyllcorner 0\ncellsize 1\n1\n", "full rows"),
                                       ("ncols 2\nnrows 1\nxllcorner 0\nyllcorner 0\ncellsize 1\n1 -3\n", "negative"),
                                       ("ncols 2\nnrows 1\nxllcorner 0\nyllcorner 0\n1 2\n", "cellsize"),
                                       ("ncols 2\nnrows 1\nxllcorner 500000\nyllcorner 0\ncellsize 30\n1 2\n",
                                        "WGS84")])
async def test_a_bad_grid_fails_its_load_saying_why(c, tmp_path, text, why):
    path = tmp_path / "bad.asc"
    path.write_text(text)
    with pytest.raises(ingest.IngestError) as err:
        await ingest.run(c.services.db, "population", path, data_dir=c.services.settings.data_dir)
    assert why in str(err.value) and err.value.version.state == "failed"
    assert not list((Path(c.services.settings.data_dir) / "population").glob("*/population.npy"))


def test_docs_scoring_states_every_weight_and_threshold_of_the_model():
    text = (Path(__file__).resolve().parents[1] / "docs" / "scoring.md").read_text()
    for f in model.FEATURES:
        assert f"| `{f.name}` | {f.weight:.2f} |" in text, f.name
    assert f"`evidenceThreshold`\n  {model.EVIDENCE_THRESHOLD}" in text and f"1 / (1 + n / {model.HALF_SATURATION})" in text
    assert f"{model.ROAD_FAR_M:g})/{model.ROAD_FAR_M:g}" in text


async def test_demo_mode_loads_a_synthetic_population_grid_once_and_marks_it_demo(tmp_path):
    from coordinator.core.db import Database, migrate
    from coordinator.datasets import versions
    from coordinator.sites.demo import SOURCE, load_demo_population
    url = f"sqlite+aiosqlite:///{tmp_path}/demo.db"
    db = Database(url)
    try:
        await migrate.upgrade_async(db.write_engine, url)
        await load_demo_population(db, (-6.9147, 107.6098), tmp_path / "data")
        await load_demo_population(db, (-6.9147, 107.6098), tmp_path / "data")
        loaded = await versions.list_versions(db)
        assert [(v.kind, v.state, v.source) for v in loaded] == [("population", "ready", SOURCE)]
        assert versions.report(loaded[0]).demo is True and loaded[0].records > 0
    finally:
        await db.close()


def test_a_score_cut_short_by_its_cold_bound_declines_in_its_own_shape():
    """Past the 60 s bound the answer is degraded and says so; its body is still a site score's:
    a null score, declined, nothing read (it held only 'pending' and 'retryAfterS')."""
    from coordinator.catalogue import default_registry
    from coordinator.core.cache import Pending
    from coordinator.core.pipeline import cut_short_answer
    reg = default_registry()
    intel = cut_short_answer(reg.get("site_intel"), {"lat": 1.0, "lon": 2.0, "radius": 1000}, 60, Pending(61))
    body = intel.body()
    assert body["score"] is None and body["confidence"] == "unknown" and body["declined"].startswith("not computed")
    assert body["contributions"] == [] and body["pending"] is True and intel.degraded
    scan_ = cut_short_answer(reg.get("site_scan"), {"bbox": (1.0, 2.0, 1.01, 2.01)}, 60, Pending(61)).body()
    assert scan_["cells"] == [] and scan_["count"] is None and scan_["scored"] is None and scan_["pending"] is True
