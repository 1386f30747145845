"""Map features in the database: the rows a load writes, and the queries the tools ask.

Every query names one dataset version (the newest ready one that covers the request,
``covering``), so a load in progress or a failed one is never read, and two versions of
the same ground (the place-trends archive) never mix. A bbox is a set of key ranges on
the grid (``grid.tile_ranges``) plus the exact ``lon``/``lat`` test, both answered from
the covering index; line chunks are found by their centres in the box widened by half a
chunk and tested exactly here.
"""
from __future__ import annotations

import operator
import zlib
from dataclasses import dataclass
from typing import Any, Iterable, Sequence

import numpy as np
import orjson
import sqlalchemy as sa
from sqlalchemy.dialects import postgresql
from sqlalchemy.ext.asyncio import AsyncConnection

from coordinator.core.db import Database
from coordinator.core.db.models import (INFRA_POINT_CLASSES, INFRA_POINTS_SQL, LEAD_LEVEL, DatasetVersion,
                                        MapFeature, MapFeatureLoad)
from coordinator.datasets import versions
from coordinator.datasets.rows import delete_version_rows
from . import geojson, grid
from .classes import ROADS, is_line
from .widths import directions, functional_class, ruas_width_m

TABLE = MapFeature.__table__
C = TABLE.c
LOAD_TABLE = MapFeatureLoad.__table__
L = LOAD_TABLE.c
MOVED = [c.name for c in TABLE.c if c.name != "id"]
OSM_KIND = "osm"
PLACES_KIND = "places"
BATCH = 2000


def sample_key(fid: str) -> int:
    """A feature's place in every sample: a hash of its id, so a sample is the same on
    every call and across versions of the same ground."""
    return zlib.crc32(fid.encode()) & 0x7FFFFFFF


MAX_LEVEL = 15


def level_of(sample: int) -> int:
    """A feature's sampling level: the trailing zero bits of its sample key, at most 15, so
    a feature is at level k or above with probability 2^-k, independently of where it is."""
    return min(MAX_LEVEL, (sample & -sample).bit_length() - 1) if sample else MAX_LEVEL


def rows_for(version_id: int, fid: str, classes: Iterable[str], *, license: str,
             point: tuple[float, float] | None = None, line: Sequence[Sequence[float]] | None = None,
             name: str | None = None, brand: str | None = None, props: dict[str, Any] | None = None) -> list[dict]:
    """The rows one mapped object becomes: one per point class, one per chunk of a line
    class. A way served as a point (a substation, a gated entrance, an outlet) stands at
    its nodes' mean."""
    out: list[dict] = []
    base = {"version_id": version_id, "fid": fid, "name": name, "license": license, "brand": None,
            "props": props or {}, "sample": sample_key(fid), "level": level_of(sample_key(fid))}
    for cls in classes:
        if is_line(cls):
            if not line or len(line) < 2:
                continue
            for piece in grid.chunks(line):
                lon, lat = grid.centre(piece)
                out.append({**base, "cls": cls, "lon": lon, "lat": lat, "tile": grid.tile_of(lon, lat), "geom": piece,
                            "doc": None})
        else:
            if point is None and line:
                point = (sum(c[0] for c in line) / len(line), sum(c[1] for c in line) / len(line))
            if point is None:
                continue
            lon, lat = point
            row = {**base, "cls": cls, "lon": lon, "lat": lat, "tile": grid.tile_of(lon, lat), "geom": None,
                   "brand": brand if cls == "brand" else None}
            row["doc"] = geojson.doc_of(row)
            out.append(row)
    return out


MOVE_ROWS = 50_000   # rows moved into map_features per transaction (a few seconds of write lock at most)


class Writer:
    """A load's rows: batched inserts into the staging table as the extract is read, then
    ``close`` moves them into ``map_features`` in the order the queries read them, a few
    tiles per transaction.

    Why the detour: rows written as an extract lists them scatter a bbox sample's 2,000
    rows over 2,000 pages, and reading them was most of a large bbox's time; in (cls,
    tile, level descending, sample) order the rows a sample reads lie together, a few
    pages per tile (bench/features.py). Moving a few tiles per transaction keeps the write
    lock short on SQLite, where the queue writes too."""

    def __init__(self, db: Database, version_id: int) -> None:
        self.db = db
        self.version_id = version_id
        self.batch: list[dict] = []

    async def add(self, rows: list[dict]) -> None:
        self.batch.extend(rows)
        if len(self.batch) >= BATCH:
            await self.flush()

    async def flush(self) -> None:
        if self.batch:
            async with self.db.write_core() as conn:
                await conn.execute(sa.insert(LOAD_TABLE), self.batch)
            self.batch = []

    async def close(self) -> None:
        await self.flush()
        v = self.version_id
        async with self.db.engine.connect() as conn:
            runs = (await conn.execute(sa.select(L.cls, L.tile, sa.func.count()).where(L.version_id == v)
                                       .group_by(L.cls, L.tile).order_by(L.cls, L.tile))).all()
        for cls, first, last in _move_chunks(runs):
            where = sa.and_(L.version_id == v, L.cls == cls, L.tile.between(first, last))
            ordered = (sa.select(*(L[name] for name in MOVED)).where(where)
                       .order_by(L.tile, L.level.desc(), L.sample))
            async with self.db.write_core() as conn:
                await conn.execute(sa.insert(TABLE).from_select(MOVED, ordered))
                await conn.execute(sa.delete(LOAD_TABLE).where(where))


def _move_chunks(runs: Sequence[tuple[str, int, int]]) -> list[tuple[str, int, int]]:
    """(cls, first tile, last tile) spans of about ``MOVE_ROWS`` rows from per-(cls, tile)
    counts in key order; a span never crosses a class."""
    chunks: list[tuple[str, int, int]] = []
    held = 0
    for cls, tile, n in runs:
        if chunks and chunks[-1][0] == cls and held + n <= MOVE_ROWS:
            chunks[-1] = (cls, chunks[-1][1], tile)
            held += n
        else:
            chunks.append((cls, tile, tile))
            held = n
    return chunks


async def analyze(db: Database) -> None:
    """Refresh PostgreSQL's statistics and visibility map of the table after a load:
    planned on a freshly filled table's empty statistics, a bbox query read hundreds of
    thousands of rows, and without the visibility map an index-only scan still visits the
    heap (bench/features.py). SQLite plans from the index shape alone."""
    if not db.is_sqlite:
        async with db.engine.connect() as conn:
            conn = await conn.execution_options(isolation_level="AUTOCOMMIT")
            await conn.execute(sa.text("VACUUM ANALYZE map_features"))
            await conn.execute(sa.text("VACUUM map_features_load"))     # emptied by the move: its space back


async def discard(db: Database, version_id: int) -> None:
    """Delete the rows of a dropped version or a failed load, in batches (``datasets.rows``)."""
    await delete_version_rows(db, TABLE, version_id)
    await delete_version_rows(db, LOAD_TABLE, version_id)


# ---- which version answers ----

SLACK_DEG = 1e-6      # extents are stored at OSM's 7 decimals; a request on the very border is inside


def holds(v: DatasetVersion, box: grid.BBox) -> bool:
    """Whether a version's extent holds the whole box (an extent across 180 too: ``versions.Extent``)."""
    return (v.west is not None and v.south <= box[1] + SLACK_DEG and v.north >= box[3] - SLACK_DEG
            and versions.arc_holds(v.west, v.east, box[0], box[2], SLACK_DEG))


def _meets(v: DatasetVersion, box: grid.BBox) -> bool:
    return (v.west is not None and v.south <= box[3] and v.north >= box[1]
            and versions.arc_meets(v.west, v.east, box[0], box[2]))


async def covering(db: Database, kind: str, box: grid.BBox, n: int = 1, *, partial: bool = False) -> list[DatasetVersion]:
    """The ``n`` newest ready versions of ``kind`` whose extent holds the whole box (an
    extract's declared bounds where it has them, else its data's extent). Where a live
    source can answer instead (Overpass), a half-covered box is not covered: half an
    answer would read as the whole. Where none can (places), ``partial`` lets a version
    that meets the box answer, after every one that holds it; the caller says which
    (``holds``) so the answer can say the rest of the box is unknown."""
    ready = await versions.newest_ready(db, kind, 50)
    found = [v for v in ready if holds(v, box)]
    if partial:
        found += [v for v in ready if not holds(v, box) and _meets(v, box)]
    return found[:n]


# ---- queries ----

@dataclass
class Found:
    total: int                     # features matching in all
    rows: list[dict]               # those returned (a sample, or the nearest)
    truncated: bool = False
    total_estimated: bool = False  # ``total`` estimated from a sampling level (``sample_box``)
    margin: int = 0                # about two standard errors of an estimated total


SEEK_COST = 20      # an index seek costs about as much as reading this many index entries
# The level index (migration 0016) holds the rows at LEAD_LEVEL or above, the infra index
# (migration 0017) the rows of INFRA_POINTS at every level; a query names an index's
# condition as written (models.INFRA_POINTS_SQL) for either database to use it.
INFRA_POINTS = frozenset(INFRA_POINT_CLASSES)


def _level_index(classes: Sequence[str], min_level: int) -> sa.ColumnElement[bool] | sa.TextClause | None:
    """The condition of a partial index holding every row of ``classes`` at ``min_level``
    or above, in (class, level, sample) order: the infra index for the infrastructure
    tool's point classes, the level index from ``LEAD_LEVEL`` up; None where neither does.
    Written as the index's own condition: a partial index is used only where the query's
    terms imply it, which neither database proves of a bound parameter."""
    if classes and set(classes) <= INFRA_POINTS:
        return sa.text(INFRA_POINTS_SQL)
    if min_level >= LEAD_LEVEL:
        return C.level >= sa.literal_column(str(LEAD_LEVEL))
    return None


def _in_tiles(db: Database, tiles: list[int]) -> sa.ColumnElement[bool]:
    """``tile`` among ``tiles``, sent as one parameter (a JSON array SQLite reads with
    ``json_each``, an array PostgreSQL matches with ``ANY``): an IN list of a 0.6-degree
    box's 169 tiles was 169 parameters, each expanded into the statement and bound on
    every query, about 1.5 ms of SQLAlchemy's time a statement where the database took
    five (bench/features.py). Both databases still seek the index once per tile."""
    if db.is_sqlite:
        listed = sa.func.json_each(sa.bindparam(None, orjson.dumps(tiles).decode(), type_=sa.Text)).table_valued("value")
        return C.tile.in_(sa.select(listed.c.value))
    return C.tile == sa.any_(sa.bindparam(None, tiles, type_=postgresql.ARRAY(sa.Integer)))


def _box_clause(db: Database, classes: Sequence[str], box: grid.BBox, version_id: int,
                totals: dict[str, int] | None = None, min_level: int = 0, *,
                levels: Levels | None = None, max_level: int = MAX_LEVEL, in_box: float = 0.5) -> sa.ColumnElement[bool]:
    """The rows of ``classes`` in ``box`` (at ``min_level`` or above, at ``max_level`` or
    below), read the cheapest of three ways, estimated in index entries:

    - by tile: a seek of the query index per 0.05-degree tile (169 at 0.6 degrees, 1,600
      at 2), then the box's entries at those levels;
    - whole classes: with the version's class ``totals``, classes so sparse that reading
      all their entries costs less than one seek per tile (a few thousand towers against a
      2-degree box's 1,600 tiles) are read whole and filtered by position;
    - by level (with the version's per-level counts ``levels``; from ``LEAD_LEVEL`` up in
      the level index, at any level for the infrastructure tool's point classes in the
      infra index): those indexes' entries at those levels in the whole version, one range
      per class, where the box holds so much of them (``in_box``, the share the box's
      counts showed, a half before any) that the entries outside it cost less than the
      seeks or the whole classes.

    Each way matches the same rows; only the time differs (bench/features.py)."""
    w, s, e, n = box
    ntiles = sum(b - a + 1 for a, b in grid.tile_ranges(box))   # listed only where read by tile (1,600 at 2 degrees)
    total = sum(totals.get(c, 0) for c in classes) if totals is not None else None
    sparse = total is not None and total < ntiles * len(classes) * SEEK_COST
    clauses = [C.version_id == version_id, C.cls.in_(list(classes))]
    index = _level_index(classes, min_level) if levels is not None else None
    if index is not None:
        at = sum(sum(levels.get(c, ())[min_level:max_level + 1]) for c in classes)
        other = total if sparse else ntiles * len(classes) * SEEK_COST + in_box * at
        if at < other:
            # The index's own condition first, then the levels asked.
            clauses += [index, C.level.between(min_level, max_level)]
            return sa.and_(*clauses, C.lon.between(w, e), C.lat.between(s, n))
    if not sparse:
        clauses.append(_in_tiles(db, grid.tiles(box)))
    if min_level:
        clauses.append(C.level >= min_level)
    if max_level < MAX_LEVEL:
        clauses.append(C.level <= max_level)
    return sa.and_(*clauses, C.lon.between(w, e), C.lat.between(s, n))


Levels = dict[str, list[int]]           # rows per class and sampling level (0 to MAX_LEVEL)


async def level_totals(db: Database, version_id: int) -> Levels:
    """Rows per class and sampling level of a version (ready versions never change, so each
    process counts them once, on the first query that plans with them; ``Database.memo``)."""
    counted: dict[int, Levels] = db.memo.setdefault("map_levels", {})
    if version_id not in counted:
        got: Levels = {}
        async with db.engine.connect() as conn:
            for cls, level, n in await conn.execute(sa.select(C.cls, C.level, sa.func.count())
                                                    .where(C.version_id == version_id).group_by(C.cls, C.level)):
                got.setdefault(cls, [0] * (MAX_LEVEL + 1))[level] = n
        counted[version_id] = got
    return counted[version_id]


async def class_totals(db: Database, version_id: int) -> dict[str, int]:
    """Rows per class of a version (from ``level_totals``)."""
    return _class_totals(await level_totals(db, version_id))


def _class_totals(levels: Levels) -> dict[str, int]:
    return {cls: sum(per) for cls, per in levels.items()}


# ``props`` and ``geom`` are read as text and decoded with orjson: SQLAlchemy's JSON type
# (the standard library's decoder, per row) was most of the cost of a 2,000-row sample.
COLUMNS = (C.fid, C.cls, C.lon, C.lat, C.name, C.license, C.brand, C.sample,
           sa.type_coerce(C.props, sa.Text).label("props"), sa.type_coerce(C.geom, sa.Text).label("geom"))
# What a bbox answer needs of a point that has its encoding stored (``geojson.doc_of``): the
# order (the sample key, then, between rows of one key, the class and position:
# ``_in_order``), the license it is counted under, and the encoded feature; all of them in
# the level index.
DOC_COLUMNS = (C.sample, C.cls, C.lon, C.lat, C.license, C.doc)


def _json(v: Any) -> Any:
    """A JSON column read as text (SQLite), or already decoded by the driver (asyncpg)."""
    if isinstance(v, (str, bytes)):
        return None if v == "null" else orjson.loads(v)
    return v


def _row(r: sa.Row) -> dict:
    fid, cls, lon, lat, name, license, brand, sample, props, geom = r   # unpacked: a Row's attributes cost more
    return {"fid": fid, "cls": cls, "lon": lon, "lat": lat, "name": name, "license": license,
            "brand": brand, "sample": sample, "props": _json(props) or {}, "geom": _json(geom)}


STAGE_ENTRIES = 4000   # index entries a count may read where fewer would do: about two round trips' worth


def _first_level(total: int, limit: int) -> int:
    """The lowest level the first count reads: the highest whose entries in the whole version
    are expected to hold ``limit`` (2^-k of ``total``), so that count reads about 2 *
    ``limit`` entries at most, however large the box; no box needs a level above it unless
    the hash drew unusually many there, and then the count at or above it already holds
    the sample."""
    level = 0
    while level < MAX_LEVEL and total >> (level + 1) >= limit:
        level += 1
    return level


def _next_level(held: int, lo: int) -> int:
    """The lowest level the next count reads, below ``lo``: as low as the box's entries,
    estimated from the ``held`` counted at ``lo`` or above (each stands for 2^lo of them;
    one more, so that none counted is not taken for an empty box), let it read about
    ``STAGE_ENTRIES``. A small box is then counted in one more query, where fixed stages
    took up to five (a 0.01-degree box of 300 places), and a large one reads no level it
    does not need."""
    h = held + 1
    level = lo - 1
    while level > 0 and h * ((1 << (lo - level + 1)) - 1) <= STAGE_ENTRIES:
        level -= 1
    return level


BUCKET_SHIFT = 25     # the counts are kept per sampling level and per 1/64 of the sample keys' range
BUCKET = C.sample.op(">>")(sa.literal_column(str(BUCKET_SHIFT)))   # inline: grouped by as selected
TOP_ENTRIES = 1 << 16  # the most entries of a version's top levels a process keeps to count from


@dataclass
class _Top:
    """A version's point entries of some classes at level ``low`` or above, held in memory
    (``_top``), highest level first: what a bbox's counts read from the database, counted
    here instead. Ready versions never change, so the same rows give the same counts."""
    low: int
    above: list[int]        # above[k]: how many entries are at level k or above (k >= low)
    lon: np.ndarray
    lat: np.ndarray
    level: np.ndarray
    sample: np.ndarray

    def _in(self, box: grid.BBox, lo: int, hi: int) -> tuple[slice, np.ndarray]:
        """The entries at levels ``lo`` to ``hi`` and which of them are in the box, tested
        as the query's ``BETWEEN`` tests them (the same doubles, ends included)."""
        w, s, e, n = box
        part = slice(self.above[hi + 1] if hi < MAX_LEVEL else 0, self.above[lo])
        lon, lat = self.lon[part], self.lat[part]
        return part, (lon >= w) & (lon <= e) & (lat >= s) & (lat <= n)

    def count(self, box: grid.BBox, lo: int, hi: int) -> list[tuple[int, int, int]]:
        """(level, bucket, entries) in the box at levels ``lo`` to ``hi``, as the count query
        groups them."""
        part, inside = self._in(box, lo, hi)
        keys = (self.level[part][inside].astype(np.int64) << 6) | (self.sample[part][inside] >> BUCKET_SHIFT)
        found, n = np.unique(keys, return_counts=True)
        return [(int(k >> 6), int(k & 63), int(c)) for k, c in zip(found, n)]

    def last(self, box: grid.BBox, k: int, limit: int) -> int | None:
        """The ``limit``-th lowest sample key in the box at level ``k`` or above; None where
        there are no more than ``limit``."""
        part, inside = self._in(box, k, MAX_LEVEL)
        keys = self.sample[part][inside]
        if len(keys) <= limit:
            return None
        return int(np.partition(keys, limit - 1)[limit - 1])


TOPS_KEPT = 16        # versions and class sets held at once (at most some 1.6 MB each), the oldest read let go


async def _top(db: Database, conn: AsyncConnection, version_id: int, classes: Sequence[str],
               levels: Levels) -> _Top | None:
    """The entries of ``classes`` at the levels a large box counts, in memory: from the
    lowest level whose entries and those above it number at most ``TOP_ENTRIES`` (level 4
    of a million places: 62,500 entries, 1.3 MB), read once per process and version. A
    large box's counts then cost no query (the 0.6-degree box's count was a third of its
    time), and the sample's last key is known exactly, not to within a bucket."""
    tops: dict[tuple[int, tuple[str, ...]], _Top | None] = db.memo.setdefault("map_tops", {})
    key = (version_id, tuple(sorted(classes)))
    top = tops.get(key, False)
    if top is False:
        per = [sum(levels.get(c, [0] * (MAX_LEVEL + 1))[k] for c in classes) for k in range(MAX_LEVEL + 1)]
        low = MAX_LEVEL + 1
        while low > 0 and sum(per[low - 1:]) <= TOP_ENTRIES:
            low -= 1
        top = None
        if low <= MAX_LEVEL:
            where = [C.version_id == version_id, C.cls.in_(list(classes)), C.level >= low]
            index = _level_index(classes, low)
            if index is not None:
                where.append(index)             # the level index or the infra index
            got = (await conn.execute(sa.select(C.lon, C.lat, C.level, C.sample).where(*where))).all()
            got.sort(key=lambda r: -r[2])
            above = [0] * (MAX_LEVEL + 2)
            for k in range(MAX_LEVEL, -1, -1):
                above[k] = above[k + 1] + (per[k] if k >= low else 0)
            top = _Top(low, above, np.array([r[0] for r in got], dtype=np.float64),
                       np.array([r[1] for r in got], dtype=np.float64), np.array([r[2] for r in got], dtype=np.int64),
                       np.array([r[3] for r in got], dtype=np.int64))
        while len(tops) >= TOPS_KEPT:
            del tops[next(iter(tops))]
        tops[key] = top
    return top


async def sample_box(db: Database, version_id: int, classes: Sequence[str], box: grid.BBox, limit: int,
                     *, docs: bool = False) -> Found:
    """Point features in a bbox: how many in all, and a uniform sample of ``limit`` of them
    (the lowest ``sample`` keys, the same on every call). Line classes are counted by
    feature and matched exactly (``lines_in_box``).

    The sample reads about ``limit`` index entries however many match: the box's entries
    are counted per sampling level from the top (``_first_level``, ``_next_level``) until
    the levels at or above some k hold ``limit``; the sample is then drawn from those alone.
    When k is 0 the count is exact; above, it is the count at level k or above times 2^k
    (``total_estimated``, with ``margin``, about two standard errors). Which levels each
    count reads changes the cost alone: k, the count and the sample are the same.

    The levels a large box counts (its top levels in the whole version, at most
    ``TOP_ENTRIES`` entries) are counted in memory (``_top``), which also gives the
    sample's last key exactly; the levels below them are counted by the database, each
    count read by tile, whole classes or by level, whichever reads least (``_box_clause``).
    The database's counts are also kept per bucket of sample keys (``BUCKET_SHIFT``),
    which bounds the sample's last key to within a bucket. Either way the rows are then
    read in one pass over an index, at most a bucket's worth more than the sample (some 60
    of 2,000), where finding the last key itself took a pass and a sort of its own
    (``_sampled``).

    With ``docs``, a point that has its feature stored encoded (every point a bbox tool
    serves, loaded since migration 0015) comes as ``sample``, ``license`` and ``doc`` alone
    (``geojson.bbox_feature``); lines, and points of older loads, as full rows."""
    points = [c for c in classes if not is_line(c)]
    lines = [c for c in classes if is_line(c)]
    total, rows, estimated, margin = 0, [], False, 0
    if points:
        levels = await level_totals(db, version_id)
        totals = _class_totals(levels)
        counts: list[tuple[int, int, int]] = []       # (level, bucket, entries)
        async with db.engine.connect() as conn:
            top = await _top(db, conn, version_id, points, levels)
            hi, lo = MAX_LEVEL, _first_level(sum(totals.get(c, 0) for c in points), limit)
            in_box = 0.5
            while True:
                if top is not None and lo >= top.low:
                    counts += top.count(box, lo, hi)
                else:
                    where = _box_clause(db, points, box, version_id, totals, min_level=lo, levels=levels,
                                        max_level=hi, in_box=in_box)
                    counts += (await conn.execute(sa.select(C.level, BUCKET, sa.func.count()).where(where)
                                                  .group_by(C.level, BUCKET))).all()
                held = sum(n for _, _, n in counts)
                in_box = _share(held, levels, points, lo)
                if held >= limit or lo == 0:
                    break
                hi, lo = lo - 1, _next_level(held, lo)
            per_level = [0] * (MAX_LEVEL + 1)
            for level, _, n in counts:
                per_level[level] += n
            k, held = 0, 0
            for level in range(MAX_LEVEL, -1, -1):
                held += per_level[level]
                k = level
                if held >= limit:
                    break
            if k == 0:
                total = held
            else:
                total = held << k
                estimated, margin = True, int(2 * (held ** 0.5) * (1 << k))
            bound = top.last(box, k, limit) if top is not None and k >= top.low else _last_bound(counts, k, limit)
            rows = await _sampled(conn, _box_clause(db, points, box, version_id, totals, min_level=k, levels=levels,
                                                    in_box=in_box),
                                  bound, limit, docs)
            if lines:
                found = select_box(await _line_chunks(db, version_id, lines, box, conn), box, limit)
    elif lines:
        found = await lines_in_box(db, version_id, lines, box, limit)
    if lines:
        total += found.total
        rows = sorted(rows + found.rows, key=_by_sample)[:limit]
    return Found(total, rows, truncated=total > len(rows), total_estimated=estimated, margin=margin)


def _share(held: int, levels: Levels, classes: Sequence[str], lo: int) -> float:
    """The share of the version's rows at level ``lo`` or above that the box's count
    ``held`` found in the box (what reading by level would read beside the box's own)."""
    at = sum(sum(levels.get(c, ())[lo:]) for c in classes)
    return min(1.0, held / at) if at else 1.0


def _last_bound(counts: list[tuple[int, int, int]], k: int, limit: int) -> int | None:
    """The end of the bucket holding the sample's last key (the ``limit``-th lowest at level
    ``k`` or above); None where those levels hold no more than the sample."""
    per_bucket: dict[int, int] = {}
    for level, bucket, n in counts:
        if level >= k:
            per_bucket[bucket] = per_bucket.get(bucket, 0) + n
    held = 0
    for bucket in sorted(per_bucket):
        held += per_bucket[bucket]
        if held >= limit:
            return ((bucket + 1) << BUCKET_SHIFT) - 1
    return None


async def _sampled(conn: AsyncConnection, where: sa.ColumnElement[bool], bound: int | None, limit: int,
                   docs: bool) -> list[dict]:
    """The ``limit`` rows of lowest ``sample`` matching ``where``: those up to ``bound`` (the
    end of the last key's bucket, so only a bucket's worth more than the sample is read),
    put in order here, not by the database: sorting 2,000 rows that carry their encoded
    features cost SQLite more than reading them (bench/features.py). Rows of equal
    ``sample`` (two ids of one hash) keep the index's order, as the database's sort did not
    promise them any."""
    if bound is not None:
        where = sa.and_(where, C.sample <= bound)
    if docs:
        got = _in_order((await conn.execute(sa.select(*DOC_COLUMNS).where(where))).all(), _first, _doc_tie)[:limit]
        if None not in [r[5] for r in got]:     # by identity, in C: a third of the time of any() over dicts
            return [{"sample": sample, "license": license, "doc": doc} for sample, _, _, _, license, doc in got]
    rows = _in_order([_row(r) for r in await conn.execute(sa.select(*COLUMNS).where(where))], _by_sample, _row_tie)
    return rows[:limit]


_first = operator.itemgetter(0)
_by_sample = operator.itemgetter("sample")


def _doc_tie(r: sa.Row) -> tuple:
    return r[1], grid.tile_of(r[2], r[3]), r[2], r[3]


def _row_tie(r: dict) -> tuple:
    return r["cls"], grid.tile_of(r["lon"], r["lat"]), r["lon"], r["lat"]


def _in_order(rows: list, by_sample: Any, tie: Any) -> list:
    """Rows in ``sample`` order, and rows of one sample key (one feature in two classes, or
    two ids of one hash) in the query index's order (class, tile, position), whichever
    index read them, so an answer is the same bytes however its rows were found."""
    rows.sort(key=by_sample)
    samples = [by_sample(r) for r in rows]
    if len(set(samples)) < len(samples):
        rows.sort(key=lambda r: (by_sample(r), *tie(r)))
    return rows


async def _line_chunks(db: Database, version_id: int, classes: Sequence[str], box: grid.BBox,
                       conn: AsyncConnection | None = None) -> list[dict]:
    """The chunks of line ``classes`` whose centres are in the box widened by half a chunk,
    by id (the move's order: by tile, a line's chunks of one tile in an order of the
    database's own, which ``_merge`` does not depend on); on ``conn`` where the caller holds one."""
    totals = await class_totals(db, version_id)
    stmt = sa.select(*COLUMNS).where(_box_clause(db, classes, grid.widen(box, grid.CHUNK_DEG / 2 + 1e-9),
                                                 version_id, totals)).order_by(C.id)
    if conn is not None:
        return [_row(r) for r in await conn.execute(stmt)]
    async with db.engine.connect() as own:
        return [_row(r) for r in await own.execute(stmt)]


def _runs(chunks: list[dict]) -> list[list[list[float]]]:
    """A line's chunks joined end to end into runs, whatever order they came in.

    The rows carry no place in their line: the load's move writes a version's rows in
    (class, tile, level, sample) order, so a line's chunks come tile by tile, and those of
    one tile (one feature, so one level and sample) are ties the database puts in an order
    of its own (SQLite kept the extract's, PostgreSQL's sort did not: the same files gave a
    LineString on one and a MultiLineString of the same points on the other, issue 22).
    So the chunks are put in an order of their own (by coordinates) and chained by their
    shared end points: from each chunk no other ends where it starts (a start of the line,
    or of a piece after a gap), in that order, then any left (a closed ring). Chunks that
    come already chained from the one start, no two starting at one point, are that chain:
    joined as they come, without the sort (a 2-degree box's 150 chunks of a power line)."""
    heads = [(ch["geom"][0][0], ch["geom"][0][1]) for ch in chunks]
    tails = [(ch["geom"][-1][0], ch["geom"][-1][1]) for ch in chunks]
    if heads[1:] == tails[:-1] and heads[0] not in tails and len(set(heads)) == len(heads):
        run = [list(p) for p in chunks[0]["geom"]]
        for ch in chunks[1:]:
            run.extend(list(p) for p in ch["geom"][1:])
        return [run]
    order = sorted(range(len(chunks)), key=lambda i: chunks[i]["geom"])
    firsts: dict[tuple[float, float], list[int]] = {}
    for i in order:
        firsts.setdefault(heads[i], []).append(i)
    lasts = set(tails)
    starts = [i for i in order if heads[i] not in lasts]
    used = [False] * len(chunks)
    runs: list[list[list[float]]] = []
    for i in starts + order:
        if used[i]:
            continue
        used[i] = True
        run = [list(p) for p in chunks[i]["geom"]]
        while True:
            nxt = next((j for j in firsts.get((run[-1][0], run[-1][1]), ()) if not used[j]), None)
            if nxt is None:
                break
            used[nxt] = True
            run.extend(list(p) for p in chunks[nxt]["geom"][1:])
        runs.append(run)
    return runs


def _merge(chunks: list[dict]) -> dict:
    """One feature from its chunks: a LineString where they join end to end, else a
    MultiLineString of the runs that do (``_runs``: the same whichever order the database
    returned them in)."""
    runs = _runs(chunks)
    geometry = ({"type": "LineString", "coordinates": runs[0]} if len(runs) == 1
                else {"type": "MultiLineString", "coordinates": runs})
    first = chunks[0]
    xs = [p[0] for run in runs for p in run]
    ys = [p[1] for run in runs for p in run]
    return {**first, "geom": geometry, "lon": (min(xs) + max(xs)) / 2, "lat": (min(ys) + max(ys)) / 2}


async def lines_in_box(db: Database, version_id: int, classes: Sequence[str], box: grid.BBox, limit: int) -> Found:
    """Line features touching a bbox: the pieces of each inside the widened box, merged."""
    return select_box(await _line_chunks(db, version_id, classes, box), box, limit)


def select_near(candidates: Iterable[dict], lat: float, lon: float, radius_m: float, limit: int) -> Found:
    """Of candidate rows (points, and line chunks in any order), the features within
    ``radius_m`` of a point, nearest first, each with ``distanceM`` (to the nearest point
    of a line). Shared by the loaded extracts and the live Overpass answer."""
    hits: list[dict] = []
    by_fid: dict[tuple[str, str], list[dict]] = {}
    for r in candidates:
        if r["geom"] is None:
            d = grid.distance_m(lat, lon, r["lat"], r["lon"])
            if d <= radius_m:
                hits.append({**r, "distanceM": d})
        else:
            d = grid.line_distance_m(lat, lon, r["geom"])
            if d <= radius_m:
                by_fid.setdefault((r["fid"], r["cls"]), []).append({**r, "distanceM": d})
    for chs in by_fid.values():
        hits.append({**_merge(chs), "distanceM": min(ch["distanceM"] for ch in chs)})
    hits.sort(key=lambda h: (h["distanceM"], h["fid"], h["cls"]))    # ties: not in the database's row order
    return Found(len(hits), hits[:limit], truncated=len(hits) > limit)


def select_box(candidates: Iterable[dict], box: grid.BBox, limit: int) -> Found:
    """Of candidate rows, the features touching a bbox, sampled by ``sample`` key."""
    w, s, e, n = box
    points: list[dict] = []
    by_fid: dict[tuple[str, str], list[dict]] = {}
    for r in candidates:
        if r["geom"] is None:
            if w <= r["lon"] <= e and s <= r["lat"] <= n:
                points.append(r)
        elif grid.line_meets_box(r["geom"], box):
            by_fid.setdefault((r["fid"], r["cls"]), []).append(r)
    feats = sorted(points + [_merge(v) for v in by_fid.values()],
                   key=lambda r: (sample_key(r["fid"]), r["fid"], r["cls"]))     # ties: not in the rows' order
    return Found(len(feats), feats[:limit], truncated=len(feats) > limit)


async def near(db: Database, version_id: int, classes: Sequence[str], lat: float, lon: float,
               radius_m: float, limit: int) -> Found:
    """Features of one version within ``radius_m`` of a point, nearest first."""
    box = grid.circle_box(lat, lon, radius_m)
    points = [c for c in classes if not is_line(c)]
    lines = [c for c in classes if is_line(c)]
    candidates: list[dict] = []
    if points:
        totals = await class_totals(db, version_id)
        async with db.engine.connect() as conn:
            candidates = [_row(r) for r in await conn.execute(
                sa.select(*COLUMNS).where(_box_clause(db, points, box, version_id, totals)))]
    if lines:
        candidates += await _line_chunks(db, version_id, lines, box)
    return select_near(candidates, lat, lon, radius_m, limit)


def road_props(row: dict) -> dict:
    """A road as the road-geometry tool and its callers see it."""
    tags = row["props"]
    hw = tags.get("highway", "")
    return {"id": row["fid"], "highway": hw, "functionalClass": functional_class(hw),
            "ruasWidthM": ruas_width_m(hw, tags), "directions": directions(tags),
            "name": row["name"], "ref": tags.get("ref"), "license": row["license"]}


async def roads_near(db: Database, lat: float, lon: float, radius_m: float, limit: int = 500) -> list[dict]:
    """Roads within ``radius_m`` of a point from the newest loaded extract covering it,
    nearest first: ``id``, ``highway``, ``ruasWidthM``, ``distanceM``, ``license``,
    ``geometry``. Empty when no extract covers the point (callers that must tell "no
    extract" from "no road" use ``covering`` themselves)."""
    cover = await covering(db, OSM_KIND, grid.circle_box(lat, lon, radius_m))
    if not cover:
        return []
    found = await near(db, cover[0].id, ROADS, lat, lon, radius_m, limit)
    return [{**road_props(r), "distanceM": round(r["distanceM"], 1), "geometry": r["geom"]} for r in found.rows]


async def fids_in_box(db: Database, version_id: int, classes: Sequence[str], box: grid.BBox) -> dict[str, str | None]:
    """Every feature id (and name) of one version in a bbox: the place-trends diff."""
    async with db.engine.connect() as conn:
        return {r.fid: r.name for r in await conn.execute(
            sa.select(C.fid, C.name).where(_box_clause(db, classes, box, version_id)))}


async def brand_points(db: Database, version_id: int, brand: str, box: grid.BBox) -> list[tuple[str, float, float]]:
    """(id, lon, lat) of a brand's outlets in a bbox, for a count inside a shape; callers
    never serve them."""
    w, s, e, n = box
    where = sa.and_(C.version_id == version_id, C.brand == brand, _in_tiles(db, grid.tiles(box)),
                    C.lon.between(w, e), C.lat.between(s, n))
    async with db.engine.connect() as conn:
        return [(r.fid, r.lon, r.lat) for r in await conn.execute(sa.select(C.fid, C.lon, C.lat).where(where))]
