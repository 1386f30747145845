"""How much of an area the seen layer covers: its swept H3 cells (resolution 10) whose
centres lie in the area.

An area a brief reads is up to a degree wide, hundreds of thousands of resolution-10 cells,
too many to list. The res-10 descendants of one resolution-5 cell are one contiguous range of
cell ids (the digits below resolution 5 run from 0 to 6), so the area is covered by a few dozen
resolution-5 cells and the swept cells are read as that many ranges of the coverage table's
primary key; each one found is then tested against the area exactly.
"""
from __future__ import annotations

import math
from dataclasses import dataclass

import h3
import numpy as np
from h3.api import basic_int as h3i
from sqlalchemy import and_, or_, select

from coordinator.core.db import Database
from coordinator.core.db.models import CoverageCell
from coordinator.sweeps import coverage as sweeps_coverage
from coordinator.sweeps import transitions as tr

PARENT_RES = 5
RES = sweeps_coverage.RESOLUTION
STEP_DEG = 0.05              # sample spacing: well inside a resolution-5 cell (about 8 km across its inner circle)


@dataclass(frozen=True)
class Covered:
    cells: int               # swept cells whose centre lies in the area
    area_km2: float
    covered_km2: float       # cells times the average cell area at this resolution


def parents(box: tuple[float, float, float, float]) -> set[int]:
    """Resolution-5 cells covering the box: those of a grid of sample points and their neighbours."""
    w, s, e, n = box
    found = set()
    for lat in np.linspace(s, n, max(2, int(math.ceil((n - s) / STEP_DEG)) + 1)):
        for lon in np.linspace(w, e, max(2, int(math.ceil((e - w) / STEP_DEG)) + 1)):
            found.add(h3i.latlng_to_cell(float(lat), float(lon), PARENT_RES))
    return {c for p in found for c in h3i.grid_disk(p, 1)}


def id_range(parent: int) -> tuple[int, int]:
    lo = h3i.cell_to_center_child(parent, RES)
    hi = lo
    for r in range(PARENT_RES + 1, RES + 1):
        hi |= 6 << (3 * (15 - r))
    return lo, hi


async def covered(db: Database, box: tuple[float, float, float, float]) -> Covered:
    ranges = [CoverageCell.cell.between(*id_range(p)) for p in sorted(parents(box))]
    q = select(CoverageCell.cell).where(and_(CoverageCell.state.in_(tr.SWEPT), or_(*ranges)))
    async with db.read() as s:
        cells = list((await s.scalars(q)).all())
    w, s_, e, n = box
    inside = 0
    for c in cells:
        lat, lon = h3i.cell_to_latlng(c)
        inside += w <= lon <= e and s_ <= lat <= n
    m = math.radians(1) * sweeps_coverage.EARTH_R
    area = (e - w) * (n - s_) * m * m * math.cos(math.radians((s_ + n) / 2)) / 1e6
    return Covered(inside, area, inside * h3.average_hexagon_area(RES, "km^2"))
