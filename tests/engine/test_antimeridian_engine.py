"""A job whose ground crosses the antimeridian, as the coordinator now sends it.

The coordinator gives such a job one Polygon ``area`` whose longitudes run on
continuously across 180 (179.9990 .. 180.0007 at Taveuni, Fiji), a ``centerLon``
in [-180, 180], and photos with longitudes in [-180, 180] (179.9995 on one side,
-179.9996 on the other). The engine must take the job, test its photos and facts
against that area on the centre's scale, and write every longitude back in
[-180, 180], each fact metres from where the street has it, not a globe away.

The networks are replaced by an oracle giving the synthetic truth (as in
``test_pipeline``), on untrained weights built in a tmp dir: what is tested is
everything around them, from the job's schema to the facts' longitudes.
"""
from __future__ import annotations

import dataclasses
import math

import pytest

from sweep_engine import schema
from sweep_engine.config import EngineConfig
from sweep_engine.models import random_weights
from sweep_engine.pipeline import Engine, ModelOutput, inside
from sweep_engine.synth import drive, render, street_scene
from sweep_engine.synth.provider import FakeProvider, jpeg, photo_ref

TINY = dict(backbone="mobilenetv3_small_100", detector="ssdlite320_mobilenet_v3_large", batch_size=4,
            fetch_timeout_s=2.0)

TAVEUNI_LAT = -16.85
WEST, EAST = 179.9990, 180.0007          # the area's longitudes, continuous across 180
SOUTH, NORTH = -16.8515, -16.8485
CENTRE_LON = 179.99985                   # in [-180, 180]; the area runs on past 180 from it


def great_circle_m(lon1: float, lat1: float, lon2: float, lat2: float) -> float:
    p1, p2 = math.radians(lat1), math.radians(lat2)
    dp, dl = p2 - p1, math.radians(lon2 - lon1)
    a = math.sin(dp / 2) ** 2 + math.cos(p1) * math.cos(p2) * math.sin(dl / 2) ** 2
    return 2 * 6_371_008.8 * math.asin(min(1.0, math.sqrt(a)))


def wrap(lon: float) -> float:
    return (lon + 180.0) % 360.0 - 180.0 if not -180.0 <= lon <= 180.0 else lon


def area(west: float = WEST, east: float = EAST) -> dict:
    ring = [[west, SOUTH], [east, SOUTH], [east, NORTH], [west, NORTH], [west, SOUTH]]
    return {"type": "Polygon", "coordinates": [ring]}


def job_doc(photos: list[schema.PhotoRef] | None = None, **changes) -> dict:
    radius = max(great_circle_m(CENTRE_LON, TAVEUNI_LAT, lo, la) for lo, la in area()["coordinates"][0])
    doc = {"schemaVersion": 1, "jobId": "job-taveuni", "sweepId": "sweep-fiji", "area": area(),
           "centerLon": CENTRE_LON, "centerLat": TAVEUNI_LAT, "radiusM": round(radius, 1),
           "photos": [p.to_dict() for p in photos or []], "params": {}}
    doc.update(changes)
    return doc


def test_a_job_whose_area_runs_on_past_180_parses():
    job = schema.Job.from_dict(job_doc())
    assert job.area["coordinates"][0][1] == [EAST, SOUTH] and job.center_lon == CENTRE_LON
    # The same ground about a centre east of the meridian (-179.9999): the area runs on past -180 to its west.
    east = schema.Job.from_dict(job_doc(centerLon=-179.9999, area=area(WEST - 360, EAST - 360)))
    assert east.area["coordinates"][0][0] == [WEST - 360, SOUTH]
    for lon in (179.9995, -179.9996):
        assert inside(lon, TAVEUNI_LAT, east.area, east.center_lon)
    assert schema.Job.from_json(job.to_json()).to_dict() == job.to_dict()


def test_an_area_longitude_more_than_180_degrees_from_the_centre_is_refused_clearly():
    # The area of the ground west of 180 with a centre named on the east side: 359.99 degrees apart.
    with pytest.raises(schema.SchemaError) as err:
        schema.Job.from_dict(job_doc(centerLon=-179.99985))
    assert any(r.startswith("area: longitude 179.999 lies 359.99") and "within 180" in r and "centerLon" in r
               for r in err.value.reasons), err.value.reasons
    # Past the turn either way, even with the centre on its own side.
    with pytest.raises(schema.SchemaError, match=r"area: longitude 360\.5 lies 180\.5"):
        schema.Job.from_dict(job_doc(centerLon=180.0, area=area(179.999, 360.5)))


@pytest.mark.parametrize("bad", [math.nan, math.inf, -math.inf, True, "180"])
def test_an_area_longitude_that_is_not_a_finite_number_is_still_refused(bad):
    doc = job_doc()
    doc["area"]["coordinates"][0][2] = [bad, NORTH]
    with pytest.raises(schema.SchemaError, match="area: must be a GeoJSON Polygon"):
        schema.Job.from_dict(doc)


def test_photos_either_side_of_180_are_inside_the_area():
    job = schema.Job.from_dict(job_doc())
    for lon in (179.9995, -179.9996, 180.0, -180.0):
        assert inside(lon, TAVEUNI_LAT, job.area, job.center_lon), lon
        assert inside(lon, TAVEUNI_LAT, job.area), lon    # the area's own longitudes give the scale
    for lon in (179.9985, -179.9990, 0.0, 90.0, -179.9985):
        assert inside(lon, TAVEUNI_LAT, job.area, job.center_lon) is False, lon
    assert not inside(179.9995, NORTH + 0.001, job.area, job.center_lon)


def test_positions_are_placed_the_short_way_round_and_written_in_minus_180_to_180():
    from sweep_engine.camera import Camera, lonlat_offset, wrap_lon
    east, north = lonlat_offset(179.9995, TAVEUNI_LAT, -179.9996, TAVEUNI_LAT)
    # ~96 m east (the engine's plane takes the equatorial radius, the sphere here the mean: 0.1 % apart)
    assert float(east) == pytest.approx(great_circle_m(179.9995, TAVEUNI_LAT, -179.9996, TAVEUNI_LAT), rel=2e-3)
    assert float(east) > 0 and float(north) == 0.0
    assert [float(wrap_lon(x)) for x in (180.0, -180.0, 179.9995, 180.0004, -180.0005)] == \
        [180.0, -180.0, 179.9995, pytest.approx(-179.9996, abs=1e-9), pytest.approx(179.9995, abs=1e-9)]
    cam = Camera.simple(256, 192, 200.0, heading_deg=90.0, lon=179.9999, lat=TAVEUNI_LAT)
    lon, lat = cam.to_lonlat(50.0, 0.0)       # 50 m east of a camera 10 m west of 180
    assert -180 <= float(lon) < -179.999 and great_circle_m(179.9999, TAVEUNI_LAT, float(lon), float(lat)) == \
        pytest.approx(50.0, abs=0.2)


@pytest.fixture(scope="module")
def engine(tmp_path_factory):
    manifest = random_weights(EngineConfig(**TINY), tmp_path_factory.mktemp("weights"), seed=7)
    return Engine(EngineConfig(**TINY, weights_manifest=str(manifest)))


async def test_facts_of_a_street_across_180_lie_by_their_photos_in_minus_180_to_180(engine):
    # An east-west street through Taveuni's 180th meridian: the camera drives east from 179.99992 across it.
    scene = street_scene(3, width=640, height=480, road_azimuth_deg=90.0)
    scene = dataclasses.replace(scene, street=dataclasses.replace(scene.street, lon=179.99992, lat=TAVEUNI_LAT))
    big = [render(s) for s in drive(scene, 5, spacing_m=3.0)]
    cfg = engine.config
    small = [render(f.scene.moved(width=cfg.input_width, height=cfg.input_height,
                                  focal_px=f.scene.focal_px * cfg.input_width / 640)) for f in big]
    # The provider lists each photo's longitude in [-180, 180], as the coordinator gives them.
    photos = [photo_ref(f"p{i}", f, "", i) for i, f in enumerate(big)]
    photos = [dataclasses.replace(p, lon=wrap(p.lon)) for p in photos]
    assert {p.lon > 0 for p in photos} == {True, False} and all(abs(p.lon) > 179.9999 for p in photos)  # both sides
    provider = FakeProvider({f"p{i}": jpeg(f) for i, f in enumerate(big)})
    await provider.start()
    try:
        photos = [dataclasses.replace(p, url=f"{provider.base_url}/photos/{p.id}.jpg") for p in photos]
        job = schema.Job.from_dict(job_doc(photos))
        queue = list(small)

        def oracle(batch):
            frames, queue[:] = queue[:len(batch)], queue[len(batch):]
            return [ModelOutput(depth=f.depth, seg=f.seg, detections=f.detections()) for f in frames]

        engine.forward = oracle
        try:
            result = await engine.run_job(job)
        finally:
            del engine.forward
    finally:
        await provider.stop()

    again = schema.Result.from_json(result.to_json())         # what the coordinator parses
    assert [m.photo_id for m in again.measurements] == [p.id for p in photos] and not again.skipped
    where = {p.id: (p.lon, p.lat) for p in photos}
    assert again.facts
    for f in again.facts:
        assert -180 <= f.lon <= 180
        assert inside(f.lon, f.lat, job.area, job.center_lon)
        for pid in f.source:   # a fact lies metres from each photo it rests on, not round the globe
            assert great_circle_m(f.lon, f.lat, *where[pid]) < 80, (f.kind, f.lon, where[pid])
    assert {f.lon > 0 for f in again.facts} == {True, False}   # facts on both sides of 180
    for m in again.measurements:
        for o in m.objects:
            assert -180 <= o.lon <= 180 and great_circle_m(o.lon, o.lat, *where[m.photo_id]) < 80
    # The street's poles, where the scene has them: within half a metre, measured on the sphere.
    poles = [b for b in scene.boxes if b.det == "pole"]
    pole_facts = [f for f in again.facts if f.kind == "poles"]
    assert poles and len(pole_facts) == len(poles)
    for box in poles:
        lon, lat = scene.street.to_lonlat(*box.centre)
        assert min(great_circle_m(f.lon, f.lat, float(lon), float(lat)) for f in pole_facts) < 0.5
    roads = [f for f in again.facts if f.kind == "roadway"]
    assert roads and all(abs(f.value["widthM"] / scene.street.road_width_m - 1) < 0.015 for f in roads)
