"""Shared pieces of the review and seen-layer tests (no tests of its own): ground with a
street photo in every H3 cell, nodes that sweep it honestly, and a reviewer key."""
from __future__ import annotations

from datetime import datetime, timedelta, timezone
from typing import Any, AsyncIterator, Callable

import h3
import pytest

from coordinator.demo.photos import FakePhoto, FakePhotoProvider
from coordinator.review import keys
from coordinator.sweeps import coverage
from tests.support import Coordinator, stop_coordinator
from tests.test_sweeps_kit import CENTRE, SimNode, enrolled, request_sweep, start

RADIUS = 200


def photo_in_every_cell(photos: FakePhotoProvider, lat: float = CENTRE[0], lon: float = CENTRE[1],
                        radius_m: float = RADIUS) -> list[FakePhoto]:
    """One photo at the centre of each cell of the circle, so that sweeping it can cover it all."""
    t0 = datetime(2026, 6, 1, 8, tzinfo=timezone.utc)
    out = []
    for i, cell in enumerate(sorted(coverage.circle_cells(lat, lon, radius_m))):
        la, lo = h3.cell_to_latlng(coverage.cell_text(cell))
        out.append(photos.add(FakePhoto(id=f"cell-{len(photos.photos)}", lat=round(la, 7), lon=round(lo, 7),
                                        heading=90.0, captured_at=(t0 + timedelta(seconds=i)).isoformat(),
                                        road_width_m=6.0 + (i % 5), seed=i)))
    return out


def rich_result(node: SimNode, lease: dict, truth: dict[str, FakePhoto]) -> dict[str, Any]:
    """An honest result with a pole per photo and one measured object, so that every part
    of the seen layer and of street_measure has something to show."""
    body = node.honest(lease, truth=truth)
    for m, p in zip(body["measurements"], lease["job"]["photos"]):
        m["objects"].append({"label": "pole", "distanceM": 6.5, "size": {"widthM": 0.3, "heightM": 7.2},
                             "bearingDeg": 90.0, "lon": p["lon"] + 0.00008, "lat": p["lat"],
                             "heightIsLowerBound": True, "widthIsLowerBound": False, "score": 0.9})
        body["facts"].append({"kind": "poles", "lon": p["lon"] + 0.00008, "lat": p["lat"],
                              "value": {"heightM": 7.2}, "unit": "m", "confidence": "low", "basis": "measured",
                              "source": [p["id"]], "timestamp": p["capturedAt"]})
    return body


_ENGINE_READS: dict[str, Any] = {}


def engine_reading(p: FakePhoto, ref: dict):
    """The sweep engine's own geometry on the photo the fake provider serves: its synthetic scene (the
    provider renders the same one) read with that scene's exact depth, classes and boxes, the camera
    placed at the photo's position and heading. The measurement carries the engine's image evidence in
    the photo's listed pixels. Cached per photo: both replicas read the same photo alike."""
    if p.id not in _ENGINE_READS:
        from sweep_engine.geometry import measure_photo, to_schema
        from sweep_engine.synth import render, street_scene
        f = render(street_scene(p.seed, width=p.width, height=p.height, focal_px=p.focal_px,
                                road_width_m=p.road_width_m))
        cam = f.camera.with_(lon=p.lon, lat=p.lat, heading_deg=p.heading)
        pm, evidence = measure_photo(p.id, p.captured_at, cam, f.depth, f.seg, f.detections())
        _ENGINE_READS[p.id] = (pm, to_schema(pm, evidence, image_size=(ref["width"], ref["height"])))
    return _ENGINE_READS[p.id]


def engine_result(node: SimNode, lease: dict, truth: dict[str, FakePhoto]) -> dict[str, Any]:
    """A result whose measurements and facts are the engine's geometry and aggregation on the job's
    photos (``engine_reading``), facts outside the job's area dropped as the engine drops them."""
    import shapely
    from sweep_engine.aggregate import aggregate

    job = lease["job"]
    body = node.honest(lease, truth=truth)
    reads = [engine_reading(truth[p["id"]], p) for p in job["photos"]]
    area = shapely.Polygon(job["area"]["coordinates"][0])
    facts = aggregate([pm for pm, _ in reads], origin=(job["centerLon"], job["centerLat"]))
    body["measurements"] = [m.to_dict() for _, m in reads]
    body["facts"] = [f.to_dict() for f in facts if area.contains(shapely.Point(f.lon, f.lat))]
    return body


async def sweep_to_review(c: Coordinator, photos: FakePhotoProvider, radius: float = RADIUS,
                          dissent_first: bool = False,
                          first_job: Callable[..., dict[str, Any]] = rich_result) -> dict:
    """Request a sweep, and let two untrusted nodes sweep every job of it honestly, so that
    every job waits in review with two agreeing replicas. With ``dissent_first`` the second
    replica of the first job is wrong, a third node is called, and the wrong one is outvoted.
    ``first_job`` makes the first job's results (``engine_result``: the engine's own geometry,
    with its image evidence). Returns the sweep request."""
    truth = {p.id: p for p in photos.photos}
    r = await request_sweep(c, radius=radius)
    assert r.status == 200 and r.json()["queued"] is True, r.body
    a, b, third = await enrolled(c, 3)
    first = True
    while True:
        la = await a.lease()
        if la is None:
            break
        lb = await b.lease()
        assert lb is not None and lb["job"]["jobId"] == la["job"]["jobId"]
        make = first_job if first else rich_result
        assert (await a.submit(la["lease"]["leaseId"], make(a, la, truth))).status == 200
        if dissent_first and first:
            wrong = rich_result(b, lb, truth)
            for f in wrong["facts"]:
                f["value"] = {k: round(v * 1.6, 2) for k, v in f["value"].items()}
            out = await b.submit(lb["lease"]["leaseId"], wrong)
            assert out.status == 200 and out.json()["jobState"] == "queued", out.body
            lc = await third.lease()
            assert lc["job"]["jobId"] == la["job"]["jobId"]
            out = await third.submit(lc["lease"]["leaseId"], rich_result(third, lc, truth))
        else:
            out = await b.submit(lb["lease"]["leaseId"], make(b, lb, truth))
        assert out.status == 200 and out.json()["jobState"] == "in_review", out.body
        first = False
    return r.json()["request"]


async def reviewer(c: Coordinator, name: str = "Rita Reviewer") -> dict[str, str]:
    _, token = await keys.create(c.services.db, name)
    return {"Authorization": f"Bearer {token}"}


@pytest.fixture
async def review_db(db_url, photos) -> AsyncIterator[Coordinator]:
    """A coordinator on each database backend whose jobs hold at most 3 photos, so that
    one sweep makes several jobs to decide on."""
    c = await start(db_url, photos, job_max_photos=3)
    yield c
    await stop_coordinator(c)


@pytest.fixture
async def review_sqlite(sqlite_url, photos) -> AsyncIterator[Coordinator]:
    c = await start(sqlite_url, photos, job_max_photos=3)
    yield c
    await stop_coordinator(c)
