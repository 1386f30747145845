"""Sweeps and the seen layer across the antimeridian and near a pole: the provider is asked
on both sides of 180 (and at every longitude round a pole), distances are great-circle
ones, a job over a cell straddling 180 keeps a small area, facts are checked against it,
measurements across 180 or a pole are found at their true distance, covered ground across
180 is served cut there, and a fact time without an offset is UTC."""
from __future__ import annotations

import json
from datetime import datetime, timezone
from types import SimpleNamespace

import h3
from sqlalchemy import insert, select

from coordinator.core.db.models import CoverageCell, SeenMeasurement, SweepRequestCell
from coordinator.core.settings import Settings
from coordinator.demo.photos import DEV_ENGINE_BUILD, FakePhoto, honest_result
from coordinator.sweeps import coverage, jobs, requests, validation
from tests.test_review_kit import reviewer, rich_result
from tests.test_sweeps_kit import enrolled, photos, request_sweep, sweeps_db  # noqa: F401

TAVEUNI = -16.85                        # Taveuni, Fiji: the island lies across 180
AT = datetime(2026, 11, 1, tzinfo=timezone.utc)


def add(photos, pid: str, lat: float, lon: float, seed: int = 0) -> FakePhoto:
    return photos.add(FakePhoto(id=pid, lat=lat, lon=lon, heading=90.0, captured_at="2026-06-01T08:00:00+00:00",
                                road_width_m=7.0, seed=seed))


def test_distances_are_on_the_sphere_and_boxes_wrap_at_180_and_span_a_pole():
    # 0.002 degrees of longitude at Taveuni is some 213 m, not a turn of the earth.
    assert requests._within(TAVEUNI, 180.0, 250, TAVEUNI, -179.998)
    assert requests._within(TAVEUNI, -179.9995, 250, TAVEUNI, 179.9990)
    assert not requests._within(TAVEUNI, 180.0, 150, TAVEUNI, -179.998)
    # Across the North Pole: 333.6 m apart, which the local plane called 525 m.
    assert requests._within(89.9985, 0.0, 400, 89.9985, 180.0)
    parts = requests._boxes(TAVEUNI, 180.0, 200)
    assert len(parts) == 2 and {p[2] for p in parts} >= {180.0} and {p[0] for p in parts} >= {-180.0}
    assert all(-180.0 <= p[0] < p[2] <= 180.0 and p[2] - p[0] < 0.01 for p in parts)
    rounded = [tuple(round(v, 9) for v in p) for p in parts]
    assert sorted(tuple(round(v, 9) for v in p) for p in requests._boxes(TAVEUNI, -180.0, 200)) == sorted(rounded)
    assert requests._boxes(89.9985, 0.0, 400) == ((-180.0, requests._boxes(89.9985, 0.0, 400)[0][1], 180.0, 90.0),)
    assert len(requests._boxes(TAVEUNI, 178.0, 200)) == 1


async def test_a_sweep_at_180_asks_the_provider_on_both_sides_and_never_calls_the_far_side_bare(sweeps_db, photos):
    """A request at lon 180 searched a box clamped at 180: the photos east of it were never
    listed, their cells were marked swept with no imagery, and a request written -180 was
    then answered 'already covered' without asking the provider."""
    shots = [add(photos, f"tav-{k}", TAVEUNI, lon, k)
             for k, lon in enumerate([179.9990, 179.9995, -179.9995, -179.9990])]
    truth = {p.id: p for p in shots}
    body = (await request_sweep(sweeps_db, TAVEUNI, 180.0, 200)).json()
    assert body["queued"] is True and body["photos"] == 4, body
    east = {coverage.point_cell(p.lat, p.lon) for p in shots if p.lon < 0}
    async with sweeps_db.services.db.read() as s:
        sweepable = set((await s.execute(select(SweepRequestCell.cell).where(
            SweepRequestCell.sweepable.is_(True)))).scalars())
    assert east <= sweepable

    again = (await request_sweep(sweeps_db, TAVEUNI, -180.0, 200)).json()
    assert again["queued"] is True and again["merged"] is True, again

    a, = await enrolled(sweeps_db, 1, trusted=True)
    while (lease := await a.lease()) is not None:
        job = lease["job"]
        xs = [x for x, _ in job["area"]["coordinates"][0]]
        assert max(xs) - min(xs) < 0.01 and job["radiusM"] < 500 and -180 <= job["centerLon"] <= 180
        r = await a.submit(lease["lease"]["leaseId"], rich_result(a, lease, truth))
        assert r.status == 200 and r.json()["accepted"] is True, r.body
    auth = await reviewer(sweeps_db)
    listed = {p["jobId"] for p in (await sweeps_db.get("/review/v1/pending", headers=auth)).json()["pending"]}
    # A reviewer's box on either side of 180 finds the ground that reaches across it (one on the far side
    # from a job's centre found none of it).
    for box in ("179.99,-16.86,180,-16.84", "-180,-16.86,-179.99,-16.84"):
        near = (await sweeps_db.get(f"/review/v1/pending?bbox={box}", headers=auth)).json()["pending"]
        assert {p["jobId"] for p in near} == listed, box
    for p in (await sweeps_db.get("/review/v1/pending", headers=auth)).json()["pending"]:
        r = await sweeps_db.post(f"/review/v1/jobs/{p['jobId']}/approve", {"reason": "ok"}, headers=auth)
        assert r.status == 200, r.body
    async with sweeps_db.services.db.read() as s:
        states = {c.cell: c.state for c in (await s.execute(select(CoverageCell))).scalars()}
    assert all(states[c] == "covered" for c in east), states
    seen = (await sweeps_db.get(f"/earth/seen?lat={TAVEUNI}&lon=-179.9993&radius=100")).json()
    assert seen["count"] >= 2


async def test_a_sweep_near_the_pole_asks_for_every_longitude(sweeps_db, photos):
    """The box was clamped to some 137 degrees either side of the centre's meridian, and the
    planar distance put a photo across the pole 525 m away: it was never swept."""
    for k, lon in enumerate([0.0, 90.0, 180.0]):
        add(photos, f"pole-{k}", 89.9985, lon, k)
    body = (await request_sweep(sweeps_db, 89.9985, 0.0, 400)).json()
    assert body["queued"] is True and body["photos"] == 3, body


def _job(cells: list[int], photo: dict):
    plan = jobs._plan(cells, [])
    return plan, SimpleNamespace(id=1, photos=[photo], area=plan.area, center_lat=plan.center_lat,
                                 center_lon=plan.center_lon, radius_m=plan.radius_m, cells=[])


def _photo(lat: float, lon: float) -> dict:
    return {"id": "p1", "lat": lat, "lon": lon, "capturedAt": "2026-06-01T08:00:00Z", "width": 256, "height": 192,
            "url": "http://x/p1", "license": "CC-BY-SA-4.0", "provider": "test"}


def _validate(job, photo: dict, **fact) -> list[str]:
    body = honest_result({"jobId": jobs.wire_id(1), "photos": [photo]}, "node-1")
    body["facts"][0].update(fact)
    now = datetime.now(timezone.utc)
    _, reasons = validation.validate_result(json.dumps(body).encode(), job, "node-1", now, now,
                                            Settings(engine_builds=DEV_ENGINE_BUILD))
    return reasons


def test_a_job_over_a_cell_straddling_180_keeps_a_small_area_and_its_facts_are_held_to_it():
    """The hull of H3's raw corners (179.9998 and -179.9997) spanned the latitude band: a
    centre at lon -20, a radius of 21,308 km, and facts anywhere in the band accepted."""
    cell = coverage.point_cell(TAVEUNI, 179.99995)
    lons = [lo for _, lo in h3.cell_to_boundary(coverage.cell_text(cell))]
    assert min(lons) < -179.9 and max(lons) > 179.9            # the cell does straddle 180
    photo = _photo(TAVEUNI, 179.99995)
    plan, job = _job([cell], photo)
    xs = [x for x, _ in plan.area["coordinates"][0]]
    assert plan.radius_m < 150 and abs(abs(plan.center_lon) - 180) < 0.002 and -180 <= plan.center_lon <= 180
    assert max(xs) - min(xs) < 0.005 and plan.area["type"] == "Polygon"
    assert _validate(job, photo, lon=179.99995, lat=TAVEUNI) == []
    assert _validate(job, photo, lon=-179.9999, lat=TAVEUNI) == []
    for far in (0.0, 100.0, -100.0):
        assert any("outside the job's area" in r for r in _validate(job, photo, lon=far, lat=TAVEUNI + 0.0001))
    # Cells either side of 180 in one job: one small area across it.
    plan, job = _job([coverage.point_cell(TAVEUNI, 179.999), coverage.point_cell(TAVEUNI, -179.999)], photo)
    xs = [x for x, _ in plan.area["coordinates"][0]]
    assert plan.radius_m < 400 and max(xs) - min(xs) < 0.01
    assert _validate(job, photo, lon=-179.999, lat=TAVEUNI) == [] and _validate(job, photo, lon=179.999,
                                                                                 lat=TAVEUNI) == []


def test_a_fact_time_without_an_offset_is_utc_and_refused_in_the_future():
    lat, lon = 48.8566, 2.3522
    photo = _photo(lat, lon)
    _, job = _job([coverage.point_cell(lat, lon)], photo)
    for ts in ("2099-01-01T00:00:00Z", "2099-01-01T00:00:00"):
        assert [r for r in _validate(job, photo, timestamp=ts) if "timestamp" in r] == \
            [f"facts[0].timestamp: {ts} is in the future"]
    assert _validate(job, photo, timestamp="2026-06-01T08:00:00") == []


async def _measurements(c, points: list[tuple[str, float, float]]) -> None:
    cal = {"scaleTrust": "high", "focalPx": 1000, "focalBasis": "exif", "cameraHeightM": 2.5, "pitchDeg": 0}
    rw = {"widthM": 7.0, "spreadM": 0.3, "method": "kerb-to-kerb", "samples": 5}
    async with c.services.db.write() as s:
        await s.execute(insert(SeenMeasurement), [
            {"cell": coverage.point_cell(la, lo), "photo_id": pid, "lat": la, "lon": lo, "heading": 0.0,
             "captured_at": "2026-06-01T08:00:00Z", "provider": "test", "license": "CC-BY-SA-4.0",
             "photo_url": f"http://x/{pid}", "road_width": rw, "calibration": cal, "objects": [], "job_id": 1,
             "approved_at": AT} for pid, la, lo in points])


async def test_street_measure_finds_measurements_across_180(sweeps_db):
    """The SQL box was lon +- dlon without wrap: the measurement across 180 was never read."""
    await _measurements(sweeps_db, [("am-west", 0.0001, 179.9995), ("am-east", 0.0001, -179.9995)])
    for lon in (179.9999, -179.9999, 180.0):
        m = (await sweeps_db.get(f"/earth/street-measure?lat=0&lon={lon}&maxM=175")).json()
        assert {x["photoId"] for x in m["scenes"]} == {"am-west", "am-east"}, (lon, m["scenes"])
    m = (await sweeps_db.get("/earth/street-measure?lat=0&lon=179.9999&maxM=175")).json()
    got = {x["photoId"]: x["distanceM"] for x in m["scenes"]}
    assert abs(got["am-east"] - coverage.distance_m(0, 179.9999, 0.0001, -179.9995)) <= 0.1


async def test_street_measure_near_the_pole_reads_great_circle_distances(sweeps_db):
    """Near a pole the planar distance was trusted: a measurement 166.8 m away across the
    pole read 183.3 m and was dropped at maxM=175, as was one 170.4 m away beside it."""
    await _measurements(sweeps_db, [("pole-far", 89.9990, 180.0), ("pole-side", 89.9990, 100.0)])
    m = (await sweeps_db.get("/earth/street-measure?lat=89.9995&lon=0&maxM=175")).json()
    got = {x["photoId"]: x["distanceM"] for x in m["scenes"]}
    assert got["pole-far"] == 166.8, got
    m = (await sweeps_db.get("/earth/street-measure?lat=89.999&lon=0&maxM=175")).json()
    got = {x["photoId"]: x["distanceM"] for x in m["scenes"]}
    assert got == {"pole-side": round(coverage.distance_m(89.999, 0, 89.999, 100.0), 1)}, got   # 170.4 m


async def test_covered_ground_across_180_is_served_cut_there(sweeps_db):
    """H3 gave the group as one ring jumping from 179.9995 to -179.9999: served as written,
    a Polygon round the whole latitude band."""
    cells = coverage.circle_cells(TAVEUNI, 180.0, 200)
    async with sweeps_db.services.db.write() as s:
        await s.execute(insert(CoverageCell), [{"cell": x, "state": "covered", "request_id": None,
                                                "updated_at": AT, "covered_at": AT} for x in cells])
    body = (await sweeps_db.get("/public/v1/anon/seen-areas")).json()
    feature, = body["features"]
    geo = feature["geometry"]
    assert geo["type"] == "MultiPolygon" and len(geo["coordinates"]) == 2
    spans = sorted((min(x for r in p for x, _ in r), max(x for r in p for x, _ in r)) for p in geo["coordinates"])
    assert spans[0][0] >= -180.0 and spans[0][1] < -179.99 and spans[1][0] > 179.99 and spans[1][1] <= 180.0
    assert {spans[0][0], spans[1][1]} == {-180.0, 180.0}
    assert feature["properties"]["cells"] == len(cells)
