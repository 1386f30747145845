"""Circle lookups on H3 cell columns, the same on SQLite and PostgreSQL.

Rows carry the id of their resolution-10 cell (``coverage.RESOLUTION``, about
150 m across) in an indexed ``BIGINT`` column. A circle of 100-1500 m is read as
the cells around its centre, nearest first, in a few ``cell IN (...)`` queries of
growing size; the exact distance filter is then done here. Reading nearest first
lets an answer stop once it holds as many rows as it may serve (the cap), so the
work per request stays bounded whatever the density, and what is served under the
cap is the nearest ground.

Resolution 10 for both coverage and facts: at 1500 m a circle is about 600 cells
(a few ``IN`` lists), at 100 m about 7; a coarser column would read up to 20
times the rows needed for small circles, a finer one multiplies the cells of
large ones.

The candidate cells and their centres are computed once per request with numpy
(``Disc``): the cells whose hexagon may reach into the circle (for facts), and the
cells whose centre lies in the circle's 64-gon, exactly as
``coverage.circle_cells`` counts a sweep request's ground (for ``covered``).
"""
from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
import shapely
from h3.api import basic_int as h3i

from ..sweeps import coverage

EDGE_M = h3i.average_hexagon_edge_length(coverage.RESOLUTION, "m")
SPACING_M = EDGE_M * math.sqrt(3)      # centre to centre of neighbouring cells
EARTH_R = 6_371_008.8
FIRST_BATCH = 7


def distance_m(lat1: float, lon1: float, lat2: float, lon2: float) -> float:
    """Great-circle (haversine) distance in metres."""
    p1, p2 = math.radians(lat1), math.radians(lat2)
    dp, dl = p2 - p1, math.radians(lon2 - lon1)
    a = math.sin(dp / 2) ** 2 + math.cos(p1) * math.cos(p2) * math.sin(dl / 2) ** 2
    return 2 * EARTH_R * math.asin(min(1.0, math.sqrt(a)))


def distances_m(lat: float, lon: float, lats: np.ndarray, lons: np.ndarray) -> np.ndarray:
    p1, p2 = math.radians(lat), np.radians(lats)
    dp, dl = p2 - p1, np.radians(lons - lon)
    a = np.sin(dp / 2) ** 2 + math.cos(p1) * np.cos(p2) * np.sin(dl / 2) ** 2
    return 2 * EARTH_R * np.arcsin(np.minimum(1.0, np.sqrt(a)))


def bearing_deg(lat1: float, lon1: float, lat2: float, lon2: float) -> float:
    p1, p2, dl = math.radians(lat1), math.radians(lat2), math.radians(lon2 - lon1)
    y = math.sin(dl) * math.cos(p2)
    x = math.cos(p1) * math.sin(p2) - math.sin(p1) * math.cos(p2) * math.cos(dl)
    return (math.degrees(math.atan2(y, x)) + 360.0) % 360.0


@dataclass
class Disc:
    """The H3 cells of a circle: ``reach`` (every cell that may hold a point of the circle,
    nearest centre first) and ``ground`` (the cells a sweep request of this circle asks for)."""

    reach: list[int]
    ground: list[int]

    @classmethod
    def of(cls, lat: float, lon: float, radius_m: float) -> "Disc":
        centre = h3i.latlng_to_cell(lat, lon, coverage.RESOLUTION)
        margin = 1.5 * EDGE_M          # a point of a cell lies within about an edge of its centre
        k = int(math.ceil((radius_m + margin) / (SPACING_M * 0.8))) + 1
        cells = np.array(h3i.grid_disk(centre, k), dtype=np.uint64)
        ll = np.array([h3i.cell_to_latlng(int(c)) for c in cells])
        d = distances_m(lat, lon, ll[:, 0], ll[:, 1])
        near = d <= radius_m + margin
        order = np.argsort(d[near], kind="stable")
        reach = [int(c) for c in cells[near][order]]
        ring = coverage.circle_ring(lat, lon, radius_m)
        inside = shapely.contains_xy(shapely.Polygon(ring), ll[:, 1], ll[:, 0])
        ground = {int(c) for c in cells[inside]}
        ground.add(int(centre))
        return cls(reach, sorted(ground))

    def batches(self):
        """``reach`` in batches that grow fourfold (7, 28, 112, ...): small circles and dense
        ground stop after one or two small queries, sparse large circles need few queries."""
        i, size = 0, FIRST_BATCH
        while i < len(self.reach):
            yield self.reach[i:i + size]
            i += size
            size *= 4
