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

from coordinator.core.honesty import Confidence
from .ground import Ground, M_PER_DEG
from .model import Sites, Score, evaluate

RESOLUTION = 9
RADIUS_M = 300.0


def cells_of(box: tuple[float, float, float, float]) -> list[str]:
    """The cells whose centres lie in the bbox, in a stable order."""
    w, s, e, n = box
    return sorted(h3.h3shape_to_cells(h3.LatLngPoly([(s, w), (s, e), (n, e), (n, w)]), RESOLUTION))


def load_box(box: tuple[float, float, float, float]) -> tuple[float, float, float, float]:
    """The box the ground is read for: the bbox widened by the cells' reading radius."""
    w, s, e, n = box
    lat = (s + n) / 2
    return (
        w - RADIUS_M / (M_PER_DEG * math.cos(math.radians(lat))), s - RADIUS_M / M_PER_DEG,
        e + RADIUS_M / (M_PER_DEG * math.cos(math.radians(lat))), n + RADIUS_M / M_PER_DEG)


def _edge_m(ground: Ground, sites: Sites) -> np.ndarray:
    w, s, e, n = ground.box
    kx = M_PER_DEG * np.cos(np.radians(sites.lats))
    return np.minimum.reduce([(sites.lons - w) * kx, (e - sites.lons) * kx,
                              (sites.lats - s) * M_PER_DEG, (n - sites.lats) * M_PER_DEG])


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
            "geometry": {"type": "Polygon", "coordinates": [[[round(p[1], 7), round(p[0], 7)] for p in
                                                              (*h3.cell_to_boundary(cell), h3.cell_to_boundary(cell)[0])]]}}
        if sc.saturation is not None:    # a figure with its confidence, as site-intel gives it (no evidence)
            row["saturation"] = {k: v for k, v in sc.saturation.as_json(category or "").items() if k != "evidence"}
        if sc.declined:
            row["declined"] = sc.declined
        rows.append(row)
    rows.sort(key=lambda r: (r["score"] is None, -(r["score"] or 0), r["cell"]))
    for rank, r in enumerate(rows, 1):
        r["rank"] = rank if r["score"] is not None else None
    return rows
