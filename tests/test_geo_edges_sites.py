"""Map features and site scores at the edges of the map: the poles and the antimeridian.

A circle round a pole holds every longitude (its box was lon +-103 degrees, and trees
across the pole went unlisted; the antimeridian caveat said part was not searched when
all of it was); a site near a pole is measured on the sphere (a plane of degrees scaled
by cos(lat) put a road across the pole 570 m off where it lies 222 m away); a scan's cell
across 180 degrees is cut there (it was a ring round the Earth), and the ground beyond 180
is read and counted by the scan's cells; a scan cut short by its bound does not know how
many cells it has (null, not zero). Each on a real server over data loaded from small
files written here."""
from __future__ import annotations

import json
import math
from pathlib import Path

import h3
import pytest

from coordinator.datasets import ingest
from coordinator.features import grid
from coordinator.sites import scan
from tests.support import make_settings, start_coordinator, stop_coordinator

M_PER_DEG = math.radians(1) * grid.EARTH_R


def write_osm(path: Path, nodes: list[tuple[float, float, dict]], ways: list[tuple[list[int], dict]] = (),
              bounds: tuple[float, float, float, float] | None = None) -> Path:
    """An OSM XML file: nodes (lat, lon, tags) numbered from 1, ways of those numbers."""
    out = ['<?xml version="1.0" encoding="UTF-8"?>', '<osm version="0.6" generator="test">']
    if bounds:
        w, s, e, n = bounds
        out.append(f'  <bounds minlat="{s}" minlon="{w}" maxlat="{n}" maxlon="{e}"/>')
    for i, (lat, lon, tags) in enumerate(nodes, 1):
        out.append(f'  <node id="{i}" lat="{lat}" lon="{lon}" version="1">'
                   + "".join(f'<tag k="{k}" v="{v}"/>' for k, v in tags.items()) + "</node>")
    for j, (refs, tags) in enumerate(ways, 1):
        out.append(f'  <way id="{j}" version="1">' + "".join(f'<nd ref="{r}"/>' for r in refs)
                   + "".join(f'<tag k="{k}" v="{v}"/>' for k, v in tags.items()) + "</way>")
    out.append("</osm>")
    path.write_text("\n".join(out))
    return path


def write_places(path: Path, points: list[tuple[float, float]], category: str = "restaurant") -> Path:
    with open(path, "w") as f:
        for i, (lon, lat) in enumerate(points):
            fid = f"08f-edge-{i}"
            f.write(json.dumps({"type": "Feature", "id": fid, "geometry": {"type": "Point", "coordinates": [lon, lat]},
                                "properties": {"id": fid, "names": {"primary": f"P {i}"},
                                               "categories": {"primary": category}, "confidence": 0.9,
                                               "sources": [{"property": "", "dataset": "meta",
                                                            "license": "CDLA-Permissive-2.0", "record_id": str(i)}]}})
                    + "\n")
    return path


@pytest.fixture
async def c(db_url, upstream, tmp_path):
    c = await start_coordinator(make_settings(db_url, upstream, data_dir=str(tmp_path / "data")))
    yield c
    await stop_coordinator(c)


# ---- 1. a circle round a pole ----

def test_a_circle_round_a_pole_has_a_box_of_every_longitude():
    assert grid.circle_box(-89.998, 0, 400)[::2] == (-180.0, 180.0)
    assert grid.circle_box(90, 0, 100)[::2] == (-180.0, 180.0)
    # Near (not round) a pole the box reaches the circle's tangent meridians: at 89.99 degrees
    # a 1 km circle spans 64.1 degrees either side, not the 51.5 of r/R / cos(lat).
    w, _, e, _ = grid.circle_box(89.99, 0, 1000)
    assert e == pytest.approx(64.1, abs=0.1) and w == pytest.approx(-64.1, abs=0.1)
    for lat, lon in ((90, 0), (-90, 180), (89.9999, -180), (-89.998, 0)):
        assert grid.antimeridian_caveats(lat, lon, 400) == [], (lat, lon)
    assert grid.antimeridian_caveats(-16.8, 179.999, 400) == [grid.ANTIMERIDIAN]


async def test_features_across_a_pole_are_found_and_no_far_side_is_said_unsearched(c, tmp_path):
    """Four trees 0.001 degrees from the South Pole, at longitudes 0, 120, -120 and 180: a
    point 0.002 degrees from it reaches them all (111 to 334 m), across the pole."""
    pole = write_osm(tmp_path / "pole.osm", [(-89.999, lon, {"natural": "tree"}) for lon in (0, 180, 120, -120)],
                     bounds=(-180, -90, 180, -89.9))
    await ingest.run(c.services.db, "osm", pole)
    for lat, lon in ((-89.998, 0), (-89.998, 180), (-90, 0)):
        body = (await c.get(f"/earth/environment?lat={lat}&lon={lon}&radius=400")).json()
        assert body["matched"] == 4, (lat, lon, body)
        want = sorted(grid.distance_m(lat, lon, -89.999, t) for t in (0, 180, 120, -120))
        got = [f["properties"]["distanceM"] for f in body["features"]]
        assert got == pytest.approx(want, abs=0.2)
        assert grid.ANTIMERIDIAN not in body["caveats"]
    # Where every longitude was read no answer says a far side was not: at the poles, with or
    # without data.
    for q in ("lat=90&lon=0", "lat=89.9999&lon=-180", "lat=-90&lon=180", "lat=-89.998&lon=0"):
        body = (await c.get(f"/earth/site-intel?{q}&radius=400")).json()
        assert grid.ANTIMERIDIAN not in body["caveats"], q


# ---- 4. a site near a pole, measured on the sphere ----

async def test_a_site_near_a_pole_is_measured_on_the_sphere(c, tmp_path):
    """A road on the 180th meridian 0.0015 degrees from the North Pole, a site on the
    0th 0.0005 degrees from it: across the pole they are 0.002 degrees (222.4 m) apart. The
    site's plane of degrees scaled by cos(lat) put it 570 m off (no road within 300 m), the
    road-geometry tool's 207 m."""
    north = write_osm(tmp_path / "north.osm", [(89.9985, 180.0, {}), (89.9980, 180.0, {})],
                      ways=[([1, 2], {"highway": "residential"})], bounds=(-180, 89.9, 180, 90))
    await ingest.run(c.services.db, "osm", north)
    want = 0.002 * M_PER_DEG
    body = (await c.get("/earth/site-intel?lat=89.9995&lon=0&radius=300")).json()
    road = next(cn for cn in body["contributions"] if cn["feature"] == "road_access")
    assert road["confidence"] == "high" and road["value"] == pytest.approx(want, abs=0.2), road
    assert grid.ANTIMERIDIAN not in body["caveats"]
    geo = (await c.get("/earth/road-geometry?lat=89.9995&lon=0&radius=300")).json()
    assert [f["properties"]["distanceM"] for f in geo["features"]] == [pytest.approx(want, abs=0.2)]
    assert grid.line_distance_m(89.9995, 0, [[180, 89.9985], [180, 89.998]]) == pytest.approx(want, abs=0.01)


# ---- 2. a scan's cells across the antimeridian ----

def _rings(geometry: dict) -> list[list[list[float]]]:
    return [geometry["coordinates"][0]] if geometry["type"] == "Polygon" else [p[0] for p in geometry["coordinates"]]


def _signed_area(ring: list[list[float]]) -> float:
    return sum(a[0] * b[1] - b[0] * a[1] for a, b in zip(ring, ring[1:])) / 2


async def test_a_scan_cell_across_the_antimeridian_is_cut_there(c):
    body = (await c.get("/earth/site-scan?bbox=179.96,0,180,0.04")).json()
    assert body["count"] == len(body["cells"]) == 251
    cut = [cl for cl in body["cells"] if cl["geometry"]["type"] == "MultiPolygon"]
    assert len(cut) == 8
    for cell in body["cells"]:
        for ring in _rings(cell["geometry"]):
            lons = [p[0] for p in ring]
            assert ring[0] == ring[-1] and -180 <= min(lons) and max(lons) <= 180
            assert max(lons) - min(lons) < 0.01, cell["cell"]         # no ring round the Earth
            assert _signed_area(ring) > 0                             # anticlockwise
    for cell in cut:
        east, west = _rings(cell["geometry"])
        assert max(p[0] for p in east) == 180 and min(p[0] for p in west) == -180
        # The two sides hold the cell's area between them.
        area = sum(_signed_area(r) for r in (east, west))
        whole = h3.cell_area(cell["cell"], "km^2") / (M_PER_DEG / 1000) ** 2
        assert area == pytest.approx(whole, rel=0.01)


def test_a_cell_round_a_pole_is_closed_along_the_pole():
    for lat in (90, -90):
        geometry = scan.cell_geometry(h3.latlng_to_cell(lat, 0, scan.RESOLUTION))
        assert geometry["type"] == "Polygon"
        ring = geometry["coordinates"][0]
        lons, lats = [p[0] for p in ring], [p[1] for p in ring]
        assert min(lons) == -180 and max(lons) == 180 and lat in lats and _signed_area(ring) > 0


# ---- 3. a scan at the antimeridian counts the ground beyond it ----

NEAR = [(179.9995, -16.85), (179.9992, -16.8505)]
FAR = [(-179.9995, -16.85), (-179.9992, -16.8495), (-179.999, -16.8502), (-179.9993, -16.8508)]
EDGES = [(179.95, -16.9), (-179.95, -16.8)]          # the places' extent: across 180 degrees


async def test_a_scan_at_the_antimeridian_counts_the_places_and_roads_beyond_it(c, tmp_path):
    places = NEAR + FAR + EDGES
    await ingest.run(c.services.db, "places", write_places(tmp_path / "am.geojsonl", places))
    far_road = [(-16.87, -179.999), (-16.83, -179.999)]
    osm = write_osm(tmp_path / "am.osm", [(lat, lon, {}) for lat, lon in far_road]          # extent: across 180
                    + [(-16.9, 179.95, {"natural": "tree"}), (-16.8, -179.95, {"natural": "tree"})],
                    ways=[([1, 2], {"highway": "primary"})])
    await ingest.run(c.services.db, "osm", osm)
    for bbox in ("179.97,-16.87,180,-16.84", "-180,-16.87,-179.97,-16.84"):
        body = (await c.get(f"/earth/site-scan?bbox={bbox}&category=restaurant")).json()
        assert body["count"] > 50 and grid.ANTIMERIDIAN not in body["caveats"], body["caveats"]
        across = 0
        for cell in body["cells"]:
            lon, lat = cell["centre"]
            want = sum(1 for plon, plat in places if grid.distance_m(lat, lon, plat, plon) <= scan.RADIUS_M)
            assert cell["saturation"]["sameCategoryNearby"] == want, (bbox, cell["cell"])
            sides = {plon > 0 for plon, plat in places if grid.distance_m(lat, lon, plat, plon) <= scan.RADIUS_M}
            across += sides == {True, False}
            road = cell["nearestRoadM"]
            d = grid.line_distance_m(lat, lon, [[lo, la] for la, lo in far_road])
            if road["value"] is not None:
                assert road["road"]["id"] == "osm:way/1" and road["value"] == pytest.approx(d, abs=0.5), cell
        assert across >= 1          # a cell whose circle holds places on both sides of 180
        near_180 = [cl for cl in body["cells"] if abs(abs(cl["centre"][0]) - 180) < 0.002]
        assert near_180 and all(cl["nearestRoadM"]["value"] is not None for cl in near_180)


# ---- 5. a scan cut short ----

def test_a_scan_cut_short_does_not_know_how_many_cells_it_has():
    from coordinator.catalogue import default_registry
    from coordinator.core.cache import Pending
    from coordinator.core.pipeline import cut_short_answer
    answer = cut_short_answer(default_registry().get("site_scan"), {"bbox": (1.0, 2.0, 1.01, 2.01)}, 60, Pending(61))
    body = answer.body()
    assert body["pending"] is True and answer.degraded and body["cells"] == []
    assert body["count"] is None and body["scored"] is None
