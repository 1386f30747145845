"""Coverage bookkeeping on H3 cells.

Resolution 10 (hexagons about 76 m a side, about 150 m across, 0.015 km²):
a street photo measures the street it stands in out to some 50-60 m, so a cell is
about the ground that photos taken inside it can speak for. A 200 m request holds
about 10 cells and a 1000 m one about 230, small enough for plain ``IN`` lists on
both databases; resolution 9 (about 350 m across) would call a whole block swept
from one street, and resolution 11 would multiply rows sevenfold for no gain in
what a photo can see. Cells are stored as their 64-bit integer ids (indexed
``BIGINT``), so the same queries run on SQLite and PostgreSQL; shapely does the
exact geometry.

A cell is ``queued`` while jobs exist for it and ``covered`` once approved
results cover it. ``mark_cells_covered`` is the one way to cover cells: the
review workflow calls it when it approves a job, and it moves every queued
request whose sweepable cells are now all covered to ``covered``. A rejected
job's cells stay ``queued`` while a reissued job sweeps them again; past the
reissue limit (or rejected without reissue) they are ``parked`` (``park_cells``),
and a request none of whose ground is queued any more, some of it parked, is
``parked`` with the reason the public queue shows.
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from datetime import datetime
from typing import Iterable

import h3
import numpy as np
from h3.api import basic_int as h3i
from h3.api import numpy_int as h3n
from shapely.geometry import Polygon
from sqlalchemy import select, update
from sqlalchemy.ext.asyncio import AsyncSession

from coordinator.core.db.models import CoverageCell, SweepRequest, SweepRequestCell
from . import transitions as tr

RESOLUTION = 10
M_PER_DEG = 111_320.0
CHUNK = 500
EARTH_R = 6_371_008.8
EDGE_M = h3.average_hexagon_edge_length(RESOLUTION, "m")
SPACING_M = EDGE_M * math.sqrt(3)      # centre to centre of neighbouring cells
_CLEAR_M = 2 * EDGE_M                  # more than any res-10 cell's centre-to-corner distance


def offset(lat: float, lon: float, east_m: float, north_m: float) -> tuple[float, float]:
    """(lat, lon) of a point east/north of another, on a local equirectangular plane."""
    return (lat + north_m / M_PER_DEG,
            lon + east_m / (M_PER_DEG * max(math.cos(math.radians(lat)), 1e-6)))


def distances_m(lat: float, lon: float, lats: np.ndarray, lons: np.ndarray) -> np.ndarray:
    """Great-circle (haversine) distances in metres from a point. On the sphere, not a
    local plane: the same at a pole and across the antimeridian as anywhere else."""
    p1, p2 = math.radians(lat), np.radians(lats)
    dp, dl = p2 - p1, np.radians(lons - lon)
    a = np.sin(dp / 2) ** 2 + math.cos(p1) * np.cos(p2) * np.sin(dl / 2) ** 2
    return 2 * EARTH_R * np.arcsin(np.minimum(1.0, np.sqrt(a)))


def distance_m(lat1: float, lon1: float, lat2: float, lon2: float) -> float:
    """Great-circle (haversine) distance in metres between two points: across the
    antimeridian (179.9995 and -179.9995 are some 100 m apart at the equator) and at a
    pole as anywhere else."""
    p1, p2 = math.radians(lat1), math.radians(lat2)
    dp, dl = p2 - p1, math.radians(lon2 - lon1)
    a = math.sin(dp / 2) ** 2 + math.cos(p1) * math.cos(p2) * math.sin(dl / 2) ** 2
    return 2 * EARTH_R * math.asin(min(1.0, math.sqrt(a)))


def wrap_lon(lon: float) -> float:
    """A longitude in [-180, 180) (180 itself is kept: both name the same meridian)."""
    return lon if -180.0 <= lon <= 180.0 else (lon + 180.0) % 360.0 - 180.0


def unwrap_lon(lon: float, ref: float) -> float:
    """``lon`` moved by whole turns to lie within 180 degrees of ``ref``: longitudes
    continuous across the antimeridian (179.9999 beside -179.9999 reads 180.0001)."""
    return lon - 360.0 * round((lon - ref) / 360.0)


@dataclass(frozen=True)
class Box:
    """A circle's bounding box on the sphere: ``parts`` are (w, s, e, n) boxes with
    -180 <= w <= e <= 180, two when the circle crosses the antimeridian (one each side
    of it), one spanning all longitudes when the circle holds a pole. ``shift`` gives,
    for each part, the turn (0 or +-360) that puts its longitudes beside the centre's."""

    parts: tuple[tuple[float, float, float, float], ...]
    shift: tuple[float, ...]
    polar: bool                             # holds a pole: every longitude is in it


def box(lat: float, lon: float, radius_m: float) -> Box:
    """The box of every point within ``radius_m`` (great-circle) of the point: its
    latitudes are the centre's +- the radius's angle, its longitudes +- asin(sin r / cos
    lat) (the widest the circle reaches), cut at the antimeridian into two parts, and
    all longitudes (to the pole) when the circle holds a pole."""
    rho = radius_m / EARTH_R
    dlat = math.degrees(rho)
    s, n = lat - dlat, lat + dlat
    if n >= 90.0 or s <= -90.0 or rho >= math.pi / 2:
        return Box(((-180.0, max(-90.0, s), 180.0, min(90.0, n)),), (0.0,), True)
    ratio = math.sin(rho) / math.cos(math.radians(lat))
    dlon = 180.0 if ratio >= 1.0 else math.degrees(math.asin(ratio))
    lon = wrap_lon(lon)
    w, e = lon - dlon, lon + dlon
    if dlon >= 180.0 or e - w >= 360.0:
        return Box(((-180.0, s, 180.0, n),), (0.0,), False)
    if w < -180.0:
        return Box(((-180.0, s, e, n), (w + 360.0, s, 180.0, n)), (0.0, -360.0), False)
    if e > 180.0:
        return Box(((w, s, 180.0, n), (-180.0, s, e - 360.0, n)), (0.0, 360.0), False)
    return Box(((w, s, e, n),), (0.0,), False)


@dataclass(frozen=True)
class Near:
    """The cells whose centres lie within some distance of a point, with those distances.

    A circle's ground (``ground``) is counted from it, by the sweep request
    (``circle_cells``) and by the seen layer (``seen.spatial.Disc``) alike, so both
    faces count the same cells for the same circle."""

    centre: int
    cells: np.ndarray                       # uint64 cell ids
    dist: np.ndarray                        # their centres' great-circle distances, metres

    def ground(self, radius_m: float) -> set[int]:
        """The cells whose centres lie in the circle of ``radius_m`` (at most the distance
        this was made for), and always the point's own cell."""
        out = set(self.cells[self.dist <= radius_m].tolist())
        out.add(self.centre)
        return out


def near(lat: float, lon: float, within_m: float) -> Near:
    """Every cell whose centre is within ``within_m`` of the point, found by walking the
    grid out from the point's cell rather than by filling a lat/lon polygon: a polygon
    cannot hold a pole (its ring leaves the valid latitudes) and splits at the
    antimeridian, the grid has neither edge. The walk is wide enough when every cell of
    its outermost ring lies beyond ``within_m`` by more than a cell's own size: a cell
    outside the walk is then farther still (a path to it crosses that ring)."""
    centre = h3i.latlng_to_cell(lat, lon, RESOLUTION)
    k = int(math.ceil((within_m + _CLEAR_M) / (SPACING_M * 0.8))) + 1
    while True:
        ring = h3i.grid_ring(centre, k)
        ll = np.array(list(map(h3i.cell_to_latlng, ring)))
        if distances_m(lat, lon, ll[:, 0], ll[:, 1]).min() > within_m + _CLEAR_M:
            break
        k += max(1, k // 4)
    cells = np.asarray(h3n.grid_disk(centre, k), dtype=np.uint64)
    ll = np.array(list(map(h3i.cell_to_latlng, cells.tolist())))
    d = distances_m(lat, lon, ll[:, 0], ll[:, 1])
    keep = d <= within_m
    return Near(int(centre), cells[keep], d[keep])


def circle_cells(lat: float, lon: float, radius_m: float) -> set[int]:
    """The circle's ground: cells whose centres lie in the circle, and always the centre's
    own cell (``Near.ground``)."""
    return near(lat, lon, radius_m).ground(radius_m)


def point_cell(lat: float, lon: float) -> int:
    return h3.str_to_int(h3.latlng_to_cell(lat, lon, RESOLUTION))


def cell_polygon(cell: int, near_lon: float | None = None) -> Polygon:
    """The cell's hexagon in [lon, lat], its longitudes continuous beside ``near_lon`` (the
    cell's own centre's when None; ``unwrap_lon``): H3 gives the corners of a hexagon
    straddling 180 as 179.9998 and -179.9997, and read as they come they make a polygon
    around the globe. Hexagons made beside one longitude join across the antimeridian."""
    text = h3.int_to_str(cell)
    ref = h3.cell_to_latlng(text)[1] if near_lon is None else near_lon
    return Polygon([(unwrap_lon(lo, ref), la) for la, lo in h3.cell_to_boundary(text)])


def cell_text(cell: int) -> str:
    return h3.int_to_str(cell)


def chunks(items: Iterable[int], size: int = CHUNK) -> Iterable[list[int]]:
    items = list(items)
    for i in range(0, len(items), size):
        yield items[i:i + size]


async def cell_states(session: AsyncSession, cells: Iterable[int]) -> dict[int, CoverageCell]:
    out: dict[int, CoverageCell] = {}
    for part in chunks(cells):
        rows = await session.execute(select(CoverageCell).where(CoverageCell.cell.in_(part)))
        out.update({c.cell: c for c in rows.scalars()})
    return out


async def _mark_swept_without_imagery(session: AsyncSession, request_id: str, actor: str,
                                      at: datetime) -> list[dict]:
    """A covered request's cells where the provider listed no usable photo are swept ground
    too: marked ``no_imagery``, so that the seen layer calls the circle covered when the
    queue does (a cell already covered or queued by another request keeps its state)."""
    q = select(SweepRequestCell.cell).where(SweepRequestCell.request_id == request_id,
                                            SweepRequestCell.sweepable.is_(False))
    bare = set((await session.execute(q)).scalars())
    known = await cell_states(session, bare)
    logs = []
    for cell in sorted(bare - set(known)):
        session.add(CoverageCell(cell=cell, state=tr.CELL_NO_IMAGERY, request_id=request_id, updated_at=at,
                                 covered_at=at))
        logs.append(tr.row("cell", cell, None, tr.CELL_NO_IMAGERY, actor,
                           f"swept with {request_id}: the provider listed no usable photo here", at))
    await session.flush()
    return logs


async def mark_cells_covered(session: AsyncSession, cells: Iterable[int], *, actor: str, reason: str,
                             at: datetime | None = None) -> list[str]:
    """Mark cells covered (approved results cover them) and move each queued request whose
    sweepable cells are now all covered to ``covered``. Runs in the caller's write
    transaction; returns the ids of the requests it moved."""
    at = at or tr.utcnow()
    cells = set(cells)
    known = await cell_states(session, cells)
    logs = []
    for cell in sorted(cells):
        existing = known.get(cell)
        if existing is None:
            session.add(CoverageCell(cell=cell, state=tr.CELL_COVERED, request_id=None, updated_at=at,
                                     covered_at=at))
            logs.append(tr.row("cell", cell, None, tr.CELL_COVERED, actor, reason, at))
        elif existing.state != tr.CELL_COVERED:
            logs.append(tr.row("cell", cell, existing.state, tr.CELL_COVERED, actor, reason, at))
            existing.state, existing.updated_at, existing.covered_at = tr.CELL_COVERED, at, at
    await session.flush()
    moved: list[str] = []
    candidates: dict[str, str] = {}
    for part in chunks(cells):
        q = (select(SweepRequestCell.request_id, SweepRequest.state)
             .join(SweepRequest, SweepRequest.id == SweepRequestCell.request_id)
             .where(SweepRequestCell.cell.in_(part), SweepRequest.state.in_((tr.REQUEST_QUEUED, tr.REQUEST_PARKED))))
        candidates.update(dict((await session.execute(q)).all()))
    for request_id, before in sorted(candidates.items()):
        q = (select(SweepRequestCell.cell).where(SweepRequestCell.request_id == request_id,
                                                 SweepRequestCell.sweepable.is_(True)))
        wanted = set((await session.execute(q)).scalars())
        states = await cell_states(session, wanted)
        if all(states.get(c) is not None and states[c].state == tr.CELL_COVERED for c in wanted):
            await session.execute(update(SweepRequest).where(SweepRequest.id == request_id)
                                  .values(state=tr.REQUEST_COVERED, updated_at=at))
            logs.append(tr.row("request", request_id, before, tr.REQUEST_COVERED, actor,
                               f"every sweepable cell is covered ({reason})", at))
            logs += await _mark_swept_without_imagery(session, request_id, actor, at)
            moved.append(request_id)
        else:
            logs += await _settle_parked(session, request_id, states, actor, reason, at)
    await tr.record(session, *logs)
    return moved


async def _settle_parked(session: AsyncSession, request_id: str, states: dict[int, CoverageCell], actor: str,
                         reason: str, at: datetime) -> list[dict]:
    """Move a queued request to ``parked`` when none of its sweepable cells (``states``) is
    queued any more and some are parked: nothing will sweep the rest by itself."""
    values = [st.state for st in states.values()]
    if tr.CELL_QUEUED in values or tr.CELL_PARKED not in values:
        return []
    res = await session.execute(update(SweepRequest).where(SweepRequest.id == request_id,
                                                           SweepRequest.state == tr.REQUEST_QUEUED)
                                .values(state=tr.REQUEST_PARKED, updated_at=at))
    if not res.rowcount:
        return []
    return [tr.row("request", request_id, tr.REQUEST_QUEUED, tr.REQUEST_PARKED, actor,
                   f"no cell of it is queued any more and some are parked ({reason})", at)]


async def park_cells(session: AsyncSession, cells: Iterable[int], *, actor: str, reason: str,
                     public_reason: str, at: datetime) -> list[int]:
    """Park the queued ones of these cells (a rejected job's ground past its reissue limit,
    or rejected without reissue): they are not swept again by themselves. The request
    owning each such cell takes ``public_reason`` (what the public queue shows: the why,
    never who asked or who decided) and is moved to ``parked`` when none of its ground is
    queued any more. ``reason`` (with the actor) goes to the log. Runs in the caller's
    write transaction; returns the cells parked."""
    cells = set(cells)
    known = await cell_states(session, cells)
    logs, parked = [], []
    for cell in sorted(cells):
        st = known.get(cell)
        if st is not None and st.state == tr.CELL_QUEUED:
            logs.append(tr.row("cell", cell, tr.CELL_QUEUED, tr.CELL_PARKED, actor, reason, at))
            st.state, st.updated_at = tr.CELL_PARKED, at
            parked.append(cell)
    await session.flush()
    owners = sorted({known[c].request_id for c in parked if known[c].request_id})
    for request_id in owners:
        await session.execute(update(SweepRequest).where(SweepRequest.id == request_id)
                              .values(reason=public_reason, updated_at=at))
        q = (select(SweepRequestCell.cell).where(SweepRequestCell.request_id == request_id,
                                                 SweepRequestCell.sweepable.is_(True)))
        states = await cell_states(session, set((await session.execute(q)).scalars()))
        logs += await _settle_parked(session, request_id, states, actor, reason, at)
    await tr.record(session, *logs)
    return parked


async def unpark_cells(session: AsyncSession, cells: Iterable[int], *, actor: str, reason: str,
                       at: datetime) -> list[int]:
    """Put the parked ones of these cells back in the queue (an operator requeues rejected
    ground: ``jobs.requeue_rejected``), and each ``parked`` request owning them back to
    ``queued``, its reason cleared. Runs in the caller's write transaction; returns the
    cells put back."""
    cells = set(cells)
    known = await cell_states(session, cells)
    logs, back = [], []
    for cell in sorted(cells):
        st = known.get(cell)
        if st is not None and st.state == tr.CELL_PARKED:
            logs.append(tr.row("cell", cell, tr.CELL_PARKED, tr.CELL_QUEUED, actor, reason, at))
            st.state, st.updated_at = tr.CELL_QUEUED, at
            back.append(cell)
    await session.flush()
    for request_id in sorted({known[c].request_id for c in back if known[c].request_id}):
        res = await session.execute(update(SweepRequest).where(SweepRequest.id == request_id,
                                                               SweepRequest.state == tr.REQUEST_PARKED)
                                    .values(state=tr.REQUEST_QUEUED, reason=None, updated_at=at))
        if res.rowcount:
            logs.append(tr.row("request", request_id, tr.REQUEST_PARKED, tr.REQUEST_QUEUED, actor, reason, at))
        else:
            await session.execute(update(SweepRequest).where(SweepRequest.id == request_id)
                                  .values(reason=None, updated_at=at))
    await tr.record(session, *logs)
    return back
