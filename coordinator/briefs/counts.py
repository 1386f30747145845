"""Counts of mapped features in an area, grouped in the database: what a brief needs of a
box up to a degree wide, where reading every row (as the site model does for its small
circles) would cost more than the brief's budget. These are queries the map-data store does
not ask, so they live here over its table (``map_features``, one dataset version each).

Line classes are stored as chunks, so a line is counted once by its feature id, and counted
when a chunk's centre lies in the box (a line that only grazes the box by less than half a
chunk, about 275 m, is not counted). A place's category and a road's class are read from the
row's JSON properties, which both databases extract in SQL.
"""
from __future__ import annotations

from typing import Sequence

import sqlalchemy as sa

from coordinator.core.db import Database
from coordinator.core.db.models import MapFeature
from coordinator.features import grid

C = MapFeature.__table__.c


def _where(version_id: int, classes: Sequence[str], box: grid.BBox) -> sa.ColumnElement[bool]:
    w, s, e, n = box
    tiles = [k for a, b in grid.tile_ranges(box) for k in range(a, b + 1)]
    return sa.and_(C.version_id == version_id, C.cls.in_(list(classes)), C.tile.in_(tiles),
                   C.lon.between(w, e), C.lat.between(s, n))


async def _grouped(db: Database, key: sa.ColumnElement, version_id: int, classes: Sequence[str],
                   box: grid.BBox) -> dict[str, int]:
    q = (sa.select(key.label("k"), sa.func.count(sa.distinct(C.fid)))
         .where(_where(version_id, classes, box)).group_by(key))
    async with db.engine.connect() as conn:
        return {(k if k is not None else "unknown"): int(n) for k, n in await conn.execute(q)}


async def by_class(db: Database, version_id: int, classes: Sequence[str], box: grid.BBox) -> dict[str, int]:
    """Features per class (each line once)."""
    return await _grouped(db, C.cls, version_id, classes, box)


async def by_prop(db: Database, version_id: int, cls: str, prop: str, box: grid.BBox) -> dict[str, int]:
    """Features of one class per value of one property (places by ``category``, roads by
    ``highway``)."""
    return await _grouped(db, MapFeature.props[prop].as_string(), version_id, (cls,), box)
