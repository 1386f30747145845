"""A circle's ground (issue 31, items 2 and 14): every circle the API accepts has cells,
at the poles and across the antimeridian too, and a sweep request's answer and the seen
layer count the same cells for the same circle."""
from __future__ import annotations

import math
import random

import h3
import pytest

from coordinator.seen.spatial import Disc, distance_m
from coordinator.sweeps import coverage
from tests.test_sweeps_kit import CENTRE, photos, request_sweep, sweeps_db, sweeps_sqlite  # noqa: F401

# At and next to both poles, across the antimeridian from either side, and both at once.
AWKWARD = [(90.0, -1.1, 1000), (-90.0, 0.0, 1500), (89.995, 120.0, 1500), (-89.99, -60.0, 800),
           (0.0, 179.999, 1500), (12.5, -179.9995, 700), (-40.0, 180.0, 450), (89.999, 180.0, 100),
           (65.0, -180.0, 1500)]


def brute_ground(lat: float, lon: float, radius_m: float) -> set[int]:
    """Every cell whose centre is within the radius, from a disk far larger than needed."""
    centre = h3.latlng_to_cell(lat, lon, coverage.RESOLUTION)
    out = {h3.str_to_int(centre)}
    for c in h3.grid_disk(centre, int(radius_m / 60) + 6):
        if distance_m(lat, lon, *h3.cell_to_latlng(c)) <= radius_m:
            out.add(h3.str_to_int(c))
    return out


@pytest.mark.parametrize("lat,lon,radius", AWKWARD)
def test_a_circle_at_a_pole_or_across_the_antimeridian_has_all_its_cells(lat, lon, radius):
    cells = coverage.circle_cells(lat, lon, radius)
    assert cells == brute_ground(lat, lon, radius)
    # About the disc's area in cells, wherever it lies: nothing lost over the pole or the antimeridian.
    area = math.pi * radius ** 2 / (h3.average_hexagon_area(coverage.RESOLUTION, "m^2"))
    assert 0.6 * area - 2 < len(cells) < 1.6 * area + 3


def test_a_circle_across_the_antimeridian_takes_cells_on_both_sides():
    lons = [h3.cell_to_latlng(h3.int_to_str(c))[1] for c in coverage.circle_cells(10.0, 179.995, 1500)]
    assert min(lons) < -179.9 and max(lons) > 179.9


@pytest.mark.parametrize("lat,lon,radius", [(la, lo, min(max(r, 200), 1000)) for la, lo, r in AWKWARD])
async def test_a_sweep_request_at_a_pole_or_across_the_antimeridian_is_answered(sweeps_sqlite, photos, lat, lon,
                                                                                radius):
    r = await sweeps_sqlite.post(f"/earth/sweep-request?lat={lat}&lon={lon}&radius={radius}")
    assert r.status == 200, r.body
    body = r.json()
    assert body["queued"] is False and body["reasonCode"] == "no_photos"
    assert body["ground"]["cells"] == len(coverage.circle_cells(lat, lon, radius))
    seen = await sweeps_sqlite.get(f"/earth/seen?lat={lat}&lon={lon}&radius={radius}")
    assert seen.status == 200, seen.body
    assert seen.json()["coverage"]["cells"] == body["ground"]["cells"]


def test_the_seen_layer_and_a_sweep_request_count_a_circle_by_one_function():
    rng = random.Random(31)
    circles = AWKWARD + [(rng.uniform(-89.9, 89.9), rng.uniform(-180, 180), rng.choice([100, 450, 999, 1500]))
                         for _ in range(300)]
    for lat, lon, r in circles:
        assert set(Disc.of(lat, lon, r).ground) == coverage.circle_cells(lat, lon, r), (lat, lon, r)


async def test_a_sweep_requests_ground_is_the_seen_layers_ground_with_photos_at_its_edge(sweeps_db, photos):
    """Photos inside the circle that stand in edge cells (their centre outside the circle) are
    swept, but the ground both faces count is the circle's own cells."""
    for i, (radius, n) in enumerate([(450, 60), (300, 40), (1000, 150)]):
        lat, lon = coverage.offset(*CENTRE, 4000 * i, 0)
        photos.scatter(lat, lon, radius_m=radius, n=n, seed=40 + i)
        edge = {coverage.point_cell(p.lat, p.lon) for p in photos.photos[-n:]} - coverage.circle_cells(lat, lon, radius)
        assert edge, "the scatter should put photos in edge cells"
        body = (await request_sweep(sweeps_db, lat, lon, radius)).json()
        assert body["queued"] is True, body
        seen = (await sweeps_db.get(f"/earth/seen?lat={lat}&lon={lon}&radius={radius}")).json()
        assert body["ground"]["cells"] == seen["coverage"]["cells"] == len(coverage.circle_cells(lat, lon, radius))
