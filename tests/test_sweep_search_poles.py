"""The sweep search near a pole: circles at latitude 89.99 and -89.99 (boxes of some tens of
degrees of longitude), circles whose box passes a pole (one box of every longitude up to
it), and circles at a pole. Their boxes stay within the valid latitudes and longitudes and
hold the whole circle; the quadtree splits a finite number of times, never below a cell
across; no cell a cut box may reach is called listed completely; and boxes are ordered by
their true distance from the centre, which near a pole is not the distance to the box's
point nearest in latitude and longitude."""
from __future__ import annotations

import math
import random
from types import SimpleNamespace

import numpy as np
import pytest
from sqlalchemy import select

from coordinator.core.db.models import CoverageCell, SweepJob
from coordinator.demo.photos import FakePhoto, FakePhotoProvider
from coordinator.sweeps import coverage, requests, search
from tests.support import stop_coordinator
from tests.test_sweeps_kit import request_sweep, start


def destination(lat: float, lon: float, dist_m: float, bearing: float) -> tuple[float, float]:
    """The point ``dist_m`` from (lat, lon) along ``bearing`` (radians from north), on the sphere."""
    p1, d = math.radians(lat), dist_m / coverage.EARTH_R
    p2 = math.asin(min(1.0, max(-1.0, math.sin(p1) * math.cos(d) + math.cos(p1) * math.sin(d) * math.cos(bearing))))
    dl = math.atan2(math.sin(bearing) * math.sin(d) * math.cos(p1), math.cos(d) - math.sin(p1) * math.sin(p2))
    return math.degrees(p2), coverage.wrap_lon(lon + math.degrees(dl))


def disc(lat: float, lon: float, radius_m: float, n: int, seed: int) -> list[tuple[float, float]]:
    """``n`` points spread uniformly over the disc on the sphere, about a pole too (a plane's
    offsets put points at a pole on a single meridian, or past 90)."""
    rng = random.Random(seed)
    out = []
    for _ in range(n):
        la, lo = destination(lat, lon, radius_m * math.sqrt(rng.random()), rng.uniform(0, 2 * math.pi))
        if abs(la) > 89.9999999:          # at the pole itself a photo's longitude is any: move it off
            la = math.copysign(89.9999999, la)
        out.append((round(la, 7), round(lo, 7)))
    return out


class Listed:
    """A provider in process answering a box as the STAC search does: the photos in it, in
    the order given, one page of ``limit``, cut while more remain; every box it was asked."""

    def __init__(self, points: list[tuple[float, float]]) -> None:
        self.photos = [SimpleNamespace(id=f"p{i}", lat=la, lon=lo) for i, (la, lo) in enumerate(points)]
        self.boxes: list[tuple[float, float, float, float]] = []

    async def search(self, bbox, limit):
        w, s, e, n = bbox
        self.boxes.append(bbox)
        inside = [p for p in self.photos if s <= p.lat <= n and w <= p.lon <= e]
        return SimpleNamespace(photos=inside[:limit], truncated=len(inside) > limit, skipped={})


NEAR_POLES = [(89.99, 0.0), (-89.99, 179.9999), (89.99, -180.0), (-89.99, 45.0),    # boxes of tens of degrees
              (89.999, 0.0), (-89.9995, 120.0), (89.995, 179.9999),                  # boxes that pass the pole
              (90.0, 0.0), (-90.0, 0.0)]                                             # at a pole


@pytest.mark.parametrize("radius_m", [200, 1000])
@pytest.mark.parametrize("centre", NEAR_POLES)
async def test_near_a_pole_boxes_stay_valid_hold_the_circle_and_split_finitely(centre, radius_m):
    lat, lon = centre
    points = disc(lat, lon, radius_m, 2500, seed=int(abs(lat) * 1000 + radius_m))
    provider = Listed(points)
    roots = requests._boxes(lat, lon, radius_m)
    ground = coverage.circle_cells(lat, lon, radius_m)
    assert ground and coverage.point_cell(lat, lon) in ground
    # The roots hold every point of the circle: its rim, all round, lies in one of them.
    for k in range(720):
        la, lo = destination(lat, lon, radius_m, math.radians(k / 2))
        assert any(s - 1e-9 <= la <= n + 1e-9 and w - 1e-9 <= lo <= e + 1e-9 for w, s, e, n in roots), (la, lo, roots)
    holds_pole = coverage.distance_m(lat, lon, math.copysign(90.0, lat), 0.0) <= radius_m * 1.001 + 1.0
    if holds_pole:
        assert len(roots) == 1 and roots[0][0] == -180.0 and roots[0][2] == 180.0
        assert roots[0][3 if lat > 0 else 1] == math.copysign(90.0, lat)
    else:
        # Not every longitude: a circle 1112 m from the pole and 1000 m across spans some 128 degrees.
        assert sum(e - w for w, _, e, _ in roots) < 180.0

    listing = await search.search(provider, lat, lon, radius_m, roots, max_photos=3000, ground=ground, known=set(),
                                  taken=set(), max_searches=32, at_once=4)
    assert 1 <= listing.calls == len(provider.boxes) <= 32
    for w, s, e, n in provider.boxes:
        assert -90.0 <= s < n <= 90.0 and -180.0 <= w < e <= 180.0, (w, s, e, n)
    leaves = listing.complete + listing.dense + listing.unsearched + listing.skipped
    assert max(b.depth for b in leaves) <= 8          # a quadtree of boxes a cell across, not a spiral into the pole
    for b in leaves:
        if b.depth:
            assert (b.n - b.s) * coverage.M_PER_DEG >= search.MIN_BOX_M * 0.999
            assert (b.e - b.w) * coverage.M_PER_DEG * b._widest_cos() >= search.MIN_BOX_M * 0.999
    for b in listing.dense:
        assert not b.halves()

    found = search.keep(listing, lat, lon, radius_m, max_photos=3000, ground=ground, known=set(), taken=set())
    with_photos = {coverage.point_cell(p.lat, p.lon) for p in provider.photos
                   if coverage.distance_m(lat, lon, p.lat, p.lon) <= radius_m}
    assert not found.known_empty & with_photos      # no photo hidden under ground called listed completely
    kept = {p.id for p in found.photos}
    assert len(kept) == len(found.photos) <= 3000
    if not listing.cut:                             # all listed: every photo of the circle kept
        assert kept == {p.id for p in provider.photos if coverage.distance_m(lat, lon, p.lat, p.lon) <= radius_m}


def brute_distance(b: search.Box, lat: float, lon: float, n: int = 300) -> float:
    """The distance from the point to the nearest of n x n points over the box (its edges included)."""
    la, lo = np.meshgrid(np.linspace(b.s, b.n, n), np.linspace(b.w, b.e, n))
    return float(coverage.distances_m(lat, lon, la.ravel(), lo.ravel()).min())


@pytest.mark.parametrize("point", [(89.999, 0.0), (89.99, 179.9), (-89.995, 30.0), (89.9, 0.0),
                                   (48.8566, 2.3522), (-16.78, 179.9996)])
def test_a_boxs_distance_is_to_its_nearest_point_on_the_sphere(point):
    """The search lists the nearest boxes first. Near a pole the point of a box nearest in
    latitude and longitude is not its nearest: from (89.99, 179.9), a box from 89.995 to the
    pole over longitudes 2.36-2.4 read 1668 m away, though it holds the pole, 1112 m away;
    one reaching the pole on the far side, 170-180 from 30, read 1045 m for 556."""
    lat, lon = point
    boxes = [(w, s, e, n) for s, n in [(89.98, 89.99), (89.985, 89.995), (89.995, 90.0), (89.9, 89.95),
                                      (-90.0, -89.995), (-89.99, -89.98), (48.84, 48.86), (-16.79, -16.77)]
             for w, e in [(90.0, 180.0), (170.0, 180.0), (-180.0, -90.0), (45.0, 90.0), (2.36, 2.4),
                          (-100.0, -60.0), (100.0, 120.0), (-180.0, -179.999), (-180.0, 180.0)]]
    for bbox in boxes:
        b = search.Box(*bbox)
        want = brute_distance(b, lat, lon)
        got = b.distance_m(lat, lon)
        # never more than the nearest point sampled, and never less than it by more than the sampling's step
        step = max((b.n - b.s) * coverage.M_PER_DEG, (b.e - b.w) * coverage.M_PER_DEG * b._widest_cos()) / 299
        assert want - step - 0.5 <= got <= want + 0.5, (point, bbox, got, want)


def pole_photos(fake: FakePhotoProvider, centre: tuple[float, float], radius_m: float, n: int,
                seed: int) -> list[FakePhoto]:
    t = "2026-06-01T08:00:00+00:00"
    return [fake.add(FakePhoto(id=f"pole-{seed}-{i}", lat=la, lon=lo, heading=90.0, captured_at=t, road_width_m=7.0,
                               seed=seed * 100_000 + i))
            for i, (la, lo) in enumerate(disc(*centre, radius_m, n, seed))]


@pytest.fixture
async def provider():
    fake = await FakePhotoProvider().start()
    yield fake
    await fake.stop()


@pytest.mark.parametrize("centre", [(89.9995, 0.0), (-89.99, 179.9999)])
async def test_a_circle_at_a_pole_asked_again_queues_its_ground_once_and_then_merges(db_url, provider, monkeypatch,
                                                                                    centre):
    """400 photos, pages of 100, 40 photos a request: the circle about the North Pole (one box
    of every longitude) and the one beside the South Pole across 180 (a box each side) are
    asked until every cell of their ground with photos is queued, once, with all its photos
    in the circle, and the next ask is merged."""
    from coordinator.sources import panoramax
    monkeypatch.setattr(panoramax, "PAGE_LIMIT", 100)
    radius = 300
    shot = pole_photos(provider, centre, radius, 400, seed=41)
    ground = coverage.circle_cells(*centre, radius)
    on_ground = [p for p in shot if coverage.distance_m(*centre, p.lat, p.lon) <= radius
                 and coverage.point_cell(p.lat, p.lon) in ground]
    c = await start(db_url, provider, sweep_max_photos=40, sweep_max_queued_per_requester=100)
    try:
        made = 0
        for _ in range(40):
            body = (await request_sweep(c, *centre, radius=radius)).json()
            if not body["queued"] or body["merged"]:
                break
            assert 0 < body["photos"] <= 40, body
            made += 1
        else:
            raise AssertionError("the circle asked 40 times still queued new ground each time")
        assert made >= 2 and body["queued"] is True and body["merged"] is True, (made, body)
        assert provider.searches > made + 1          # the boxes were split where their pages were cut
        async with c.services.db.read() as s:
            states = dict((await s.execute(select(CoverageCell.cell, CoverageCell.state))).all())
            jobs = list((await s.execute(select(SweepJob))).scalars())
        ids = [p["id"] for j in jobs for p in j.photos]
        assert len(ids) == len(set(ids))
        assert {p.id for p in on_ground} <= set(ids)
        assert {coverage.point_cell(p.lat, p.lon) for p in on_ground} <= {k for k, v in states.items() if v == "queued"}
        for j in jobs:
            assert -180.0 <= j.center_lon <= 180.0 and -90.0 <= j.center_lat <= 90.0
    finally:
        await stop_coordinator(c)
