"""A site scan: the H3 cells of a small bbox, each scored by the site model at its centre.

Resolution 9 (hexagons about 174 m a side, 0.1 km2): a 0.05-degree bbox (the contract's
largest) is about 300 cells, few enough to rank in one answer, and a cell is about a
block, the ground one site choice stands for. Each cell is read as a site of
``RADIUS_M`` around its centre, a little more than the cell itself so that a cell's
score says something of its surroundings. The ground is read once for the bbox widened
by that radius (``ground.load``), and every cell measured from it with array operations.

The nearest-road distance is measured from the road geometry to the cell centre; it is
known only when the nearest road found is no farther than the loaded box's edge from the
centre (a nearer road outside the box could not have been seen), else unknown.
"""
from __future__ import annotations

import math
from typing import Any

import h3
import numpy as np
import shapely
import shapely.affinity

from coordinator.core.honesty import Confidence
from .ground import EARTH_R, Ground, M_PER_DEG
from .model import Sites, Score, evaluate

RESOLUTION = 9
RADIUS_M = 300.0


def cells_of(box: tuple[float, float, float, float]) -> list[str]:
    """The cells whose centres lie in the bbox, in a stable order."""
    w, s, e, n = box
    return sorted(h3.h3shape_to_cells(h3.LatLngPoly([(s, w), (s, e), (n, e), (n, w)]), RESOLUTION))


def load_box(box: tuple[float, float, float, float]) -> tuple[float, float, float, float]:
    """The box the ground is read for: the bbox widened by the cells' reading radius. At the
    antimeridian it runs on past 180 degrees (an east above 180, a west below -180), and
    ``ground.load`` reads the ground beyond as well; where the widened box reaches a pole, or
    its longitudes would go round the Earth, it holds every longitude."""
    w, s, e, n = box
    d = RADIUS_M / EARTH_R
    dlat = math.degrees(d)
    s2, n2 = max(-90.0, s - dlat), min(90.0, n + dlat)
    far = max(abs(s), abs(n))           # a circle is widest in longitude on the poleward edge
    if s2 <= -90.0 or n2 >= 90.0 or math.sin(d) >= math.cos(math.radians(far)):
        return (-180.0, s2, 180.0, n2)
    dlon = math.degrees(math.asin(math.sin(d) / math.cos(math.radians(far))))
    if e - w + 2 * dlon >= 360.0:
        return (-180.0, s2, 180.0, n2)
    return (w - dlon, s2, e + dlon, n2)


def _edge_m(ground: Ground, sites: Sites) -> np.ndarray:
    """Each site's distance to the loaded box's edge, on the sphere: to its bounding
    parallels, and to its bounding meridians unless it holds every longitude (a parallel at a
    pole and the meridians of a box round the Earth are no edge)."""
    w, s, e, n = ground.box
    inf = np.full(len(sites), np.inf)
    lat = np.radians(sites.lats)
    edges = [(sites.lats - s) * M_PER_DEG if s > -90.0 else inf, (n - sites.lats) * M_PER_DEG if n < 90.0 else inf]
    if e - w < 360.0:
        for dl in (sites.lons - w, e - sites.lons):
            edges.append(EARTH_R * np.arcsin(np.cos(lat) * np.sin(np.radians(np.clip(dl, 0.0, 90.0)))))
    return np.minimum.reduce(edges)


def nearest_roads(ground: Ground, sites: Sites) -> list[dict[str, Any]]:
    """Each cell's nearest-road distance as a figure."""
    src = "dataset:osm"
    if ground.roads is None:
        return [{"value": None, "confidence": Confidence.UNKNOWN.value, "source": src}] * len(sites)
    idx, dist = ground.roads.nearest(sites.x, sites.y)
    edge = _edge_m(ground, sites)
    out = []
    for i, d, lim in zip(idx.tolist(), dist.tolist(), edge.tolist()):
        if i < 0 or d > lim:
            out.append({"value": None, "confidence": Confidence.UNKNOWN.value, "source": src,
                        "note": f"no road mapped within {max(lim, 0):.0f} m (the scanned ground's edge)"})
        else:
            row = ground.roads.rows[i]
            out.append({"value": round(d, 1), "confidence": Confidence.HIGH.value, "source": src,
                        "road": {"id": row["fid"], "highway": row["props"].get("highway")}})
    return out


def _ring(poly: shapely.Polygon) -> list[list[list[float]]]:
    poly = shapely.orient_polygons(poly)           # exterior anticlockwise (RFC 7946 section 3.1.6)
    ring: list[list[float]] = []
    for x, y in poly.exterior.coords:
        p = [round(x, 7), round(y, 7)]
        if not ring or p != ring[-1]:
            ring.append(p)
    return [ring]


def cell_geometry(cell: str) -> dict[str, Any]:
    """A cell's outline as GeoJSON. A cell across the antimeridian is cut there into a
    MultiPolygon of its two sides (RFC 7946 section 3.1.9), as ``hazards.feed.box_geometry``
    writes a box: read as written, its vertices either side of 180 made a ring round the
    Earth. A cell holding a pole is the ring from -180 to 180 closed along the pole."""
    b = h3.cell_to_boundary(cell)                   # (lat, lng) pairs, anticlockwise
    lons = [b[0][1]]
    for _, lng in b[1:]:                            # unwrapped: each step the short way round
        d = lng - lons[-1]
        lons.append(lons[-1] + d - 360.0 * round(d / 360.0))
    d = b[0][1] - lons[-1]
    drift = lons[-1] + d - 360.0 * round(d / 360.0) - lons[0]      # 0, or +-360 round a pole
    lats = [p[0] for p in b]
    if abs(drift) < 1.0 and -180.0 <= min(lons) and max(lons) <= 180.0:
        return {"type": "Polygon", "coordinates": [[[round(lng, 7), round(lat, 7)]
                                                    for lat, lng in (*b, b[0])]]}
    ring = list(zip(lons, lats))
    if abs(drift) >= 1.0:
        pole = 90.0 if sum(lats) > 0 else -90.0
        ring += [(lons[0] + drift, lats[0]), (lons[0] + drift, pole), (lons[0], pole)]
    poly = shapely.Polygon(ring)
    pieces = [shapely.affinity.translate(shapely.clip_by_rect(poly, -180.0 + k, -90.0, 180.0 + k, 90.0), xoff=-k)
              for k in (-360.0, 0.0, 360.0)]
    merged = shapely.union_all([p for p in pieces if not p.is_empty])
    polys = list(merged.geoms) if hasattr(merged, "geoms") else [merged]
    polys = sorted((p for p in polys if isinstance(p, shapely.Polygon) and p.area > 0), key=lambda p: -p.bounds[0])
    if len(polys) == 1:
        return {"type": "Polygon", "coordinates": _ring(polys[0])}
    return {"type": "MultiPolygon", "coordinates": [_ring(p) for p in polys]}


def scan(ground: Ground, box: tuple[float, float, float, float], category: str | None) -> list[dict[str, Any]]:
    """The ranked cells: best score first, then the cells the model declined to score."""
    cells = cells_of(box)
    if not cells:
        return []
    centres = [h3.cell_to_latlng(c) for c in cells]
    sites = Sites.at(ground, [c[0] for c in centres], [c[1] for c in centres], RADIUS_M, evidence=False)
    scores: list[Score] = evaluate(ground, sites, category)
    roads = nearest_roads(ground, sites)
    rows = []
    for cell, (lat, lon), sc, road in zip(cells, centres, scores, roads):
        row: dict[str, Any] = {
            "cell": cell, "centre": [round(lon, 7), round(lat, 7)], "score": sc.value,
            "confidence": sc.confidence.value, "knownWeight": round(sc.known_weight, 3), "nearestRoadM": road,
            "geometry": cell_geometry(cell)}
        if sc.saturation is not None:    # a figure with its confidence, as site-intel gives it (no evidence)
            row["saturation"] = {k: v for k, v in sc.saturation.as_json(category or "").items() if k != "evidence"}
        if sc.declined:
            row["declined"] = sc.declined
        rows.append(row)
    rows.sort(key=lambda r: (r["score"] is None, -(r["score"] or 0), r["cell"]))
    for rank, r in enumerate(rows, 1):
        r["rank"] = rank if r["score"] is not None else None
    return rows
