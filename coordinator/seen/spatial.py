"""Circle lookups on H3 cell columns, the same on SQLite and PostgreSQL.

Rows carry the id of their resolution-10 cell (``coverage.RESOLUTION``, about
150 m across) in a ``BIGINT`` column, indexed with the row's position as
``(cell, lat, lon)`` (migration 0005); facts are also packed one row per cell
(``seen.tiles``, migration 0007). A circle of 100-1500 m is read as the cells whose
hexagon may reach into it (``Disc.reach``, one parameter: ``in_cells``): facts as
those cells' tiles, measured here with numpy (``query._nearest_facts``);
measurements as rows, with a bounding box and a planar distance in SQL and the exact
distance here (``query._nearest``). A large circle is read by annuli, nearest first
(``Disc.reach_between``), so that dense ground stops at the inner disc once it
holds more than may be served.

Resolution 10 for both coverage and facts: at 1500 m a circle is about 600 cells,
at 100 m about 7. Reading whole coarser cells instead (the res-10 ids of one
res-8 or res-7 cell are one contiguous integer range, so ``cell BETWEEN`` on the
same index) was measured no faster: the index seeks are not what a large circle
costs, the index entries walked, distances computed and rows sorted are, and
coarse cells walk more of them.

The candidate cells and their centres are computed once per request with numpy
(``Disc``, from ``coverage.near``): the cells whose hexagon may reach into the circle
(for facts), and the cells whose centre lies in the circle, counted by the one
function that counts a sweep request's ground (``coverage.Near.ground``, for
``covered``).
"""
from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
import orjson
from sqlalchemy import BigInteger, Text, TypeDecorator, any_, bindparam, func, select
from sqlalchemy.dialects.postgresql import ARRAY

from ..sweeps import coverage

EDGE_M = coverage.EDGE_M
EARTH_R = coverage.EARTH_R
distances_m = coverage.distances_m


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


@dataclass
class Disc:
    """The H3 cells of a circle: ``reach`` (every cell that may hold a point of the circle)
    and ``ground`` (the cells a sweep request of this circle asks for). The candidate cells
    and their centres' distances are kept, so that the cells that may hold a point of an
    annulus inside the circle come without another H3 call (``reach_between``)."""

    reach: list[int]
    ground: list[int]
    cells: np.ndarray                      # candidate cells (uint64) and their centres'
    dist: np.ndarray                       # great-circle distances from the point, metres

    MARGIN_M = 1.5 * EDGE_M                # a point of a cell lies within about an edge of its centre

    @classmethod
    def of(cls, lat: float, lon: float, radius_m: float) -> "Disc":
        near = coverage.near(lat, lon, radius_m + cls.MARGIN_M)
        return cls(near.cells.tolist(), sorted(near.ground(radius_m)), near.cells, near.dist)

    def reach_between(self, inner_m: float, outer_m: float) -> list[int]:
        """The cells that may hold a point at a distance in (inner_m, outer_m] of the centre
        (with inner_m 0: the disc of outer_m), from the cells of ``reach``."""
        m = self.MARGIN_M
        keep = self.dist <= outer_m + m
        if inner_m > 0:
            keep &= self.dist > inner_m - m
        return self.cells[keep].tolist()


def in_cells(col, postgres: bool):
    """``col`` is one of the cells bound as ``cells``, with the list as one parameter, so
    the statement's text is the same whatever the number of cells: compiled once, and
    prepared once by the driver. On PostgreSQL ``= ANY(:cells)``, an array (PostgreSQL
    then keeps a generic plan, the same index scan, instead of planning a list of
    hundreds of parameters at each read, about 1.3 ms at 1500 m); on SQLite
    ``IN (SELECT value FROM json_each(:cells))``, a JSON array, which SQLite probes the
    index with as it does an ``IN`` list (rendering an ``IN`` list of 500 parameters
    for each read cost SQLAlchemy about as much as a tenth of the read)."""
    if postgres:
        return col == any_(bindparam("cells", type_=ARRAY(BigInteger)))
    listed = func.json_each(bindparam("cells", type_=_CellList)).table_valued("value")
    return col.in_(select(listed.c.value).scalar_subquery())


class _CellList(TypeDecorator):
    """A list of cell ids bound as one JSON array (SQLite's ``json_each`` reads it)."""

    impl = Text
    cache_ok = True

    def process_bind_param(self, value, dialect):  # noqa: ANN001
        return orjson.dumps(value).decode()
