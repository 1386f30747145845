"""Circle lookups on H3 cell columns, the same on SQLite and PostgreSQL.

Rows carry the id of their resolution-10 cell (``coverage.RESOLUTION``, about
150 m across) in an indexed ``BIGINT`` column. A circle of 100-1500 m is read as
the rings of cells around its centre's cell, nearest rings first, in a few
``cell IN (...)`` queries of bounded size; the exact distance filter is then done
here. Reading ring by ring lets an answer stop once it holds as many rows as it
may serve (the cap), so the work per request stays bounded whatever the density,
and what is served under the cap is the nearest ground.

Resolution 10 for both coverage and facts: at 1500 m a circle is about 530 cells
(a few ``IN`` lists), at 100 m about 7; a coarser column would read up to 20
times the rows needed for small circles, a finer one multiplies the cells of
large ones.
"""
from __future__ import annotations

import math
from typing import Iterator

import h3

from ..sweeps import coverage

EDGE_M = h3.average_hexagon_edge_length(coverage.RESOLUTION, "m")
SPACING_M = EDGE_M * math.sqrt(3)      # centre to centre of neighbouring cells
EARTH_R = 6_371_008.8
BATCH_CELLS = 200


def distance_m(lat1: float, lon1: float, lat2: float, lon2: float) -> float:
    """Great-circle (haversine) distance in metres."""
    p1, p2 = math.radians(lat1), math.radians(lat2)
    dp, dl = p2 - p1, math.radians(lon2 - lon1)
    a = math.sin(dp / 2) ** 2 + math.cos(p1) * math.cos(p2) * math.sin(dl / 2) ** 2
    return 2 * EARTH_R * math.asin(min(1.0, math.sqrt(a)))


def bearing_deg(lat1: float, lon1: float, lat2: float, lon2: float) -> float:
    p1, p2, dl = math.radians(lat1), math.radians(lat2), math.radians(lon2 - lon1)
    y = math.sin(dl) * math.cos(p2)
    x = math.cos(p1) * math.sin(p2) - math.sin(p1) * math.cos(p2) * math.cos(dl)
    return (math.degrees(math.atan2(y, x)) + 360.0) % 360.0


def ring_batches(lat: float, lon: float, radius_m: float) -> Iterator[list[int]]:
    """Cell ids whose hexagon may reach into the circle, nearest rings first, in batches.

    A point of a cell lies at most about one edge from the cell's centre (H3 cells
    vary in size over the globe, hence the margin of 1.5 edges)."""
    centre = h3.latlng_to_cell(lat, lon, coverage.RESOLUTION)
    reach = radius_m + 1.5 * EDGE_M
    k_max = int(math.ceil(reach / (SPACING_M * 0.8))) + 1
    batch: list[int] = []
    for k in range(k_max + 1):
        try:
            ring = [centre] if k == 0 else h3.grid_ring(centre, k)
        except Exception:  # near one of the 12 pentagons rings are undefined: take the disk
            ring = [c for c in h3.grid_disk(centre, k) if h3.grid_distance(centre, c) == k]
        kept = []
        for c in ring:
            la, lo = h3.cell_to_latlng(c)
            if distance_m(lat, lon, la, lo) <= reach:
                kept.append(h3.str_to_int(c))
        if not kept and k > 0:
            break
        batch.extend(kept)
        if len(batch) >= BATCH_CELLS:
            yield batch
            batch = []
    if batch:
        yield batch
