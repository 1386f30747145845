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

A cell holding more photos than a job takes is split over several jobs of that one
cell ("siblings", ``jobs.split``; an approved job's unread photos also go to a job of
their own, ``jobs.sweep_again``). A verdict on one job therefore never decides its
cells alone: ``settle`` decides each cell by every job of the request holding its
photos (``ground``), a rejected job standing for the ground of the reissue that
replaced it. While any of them is open the cell stays ``queued``; once none is, it is
``covered`` if every one ended approved and ``parked`` if any ended parked, part of
its photos then never measured. Before this, rejecting one sibling parked the cell
while the others were still swept, and approving one covered the cell (and its
request) while another was still leased.
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

from coordinator.core.db.models import CoverageCell, SweepJob, SweepReissue, SweepRequest, SweepRequestCell
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
    transaction; returns the ids of the requests it moved. It covers what it is given:
    which cells an approval covers is ``settle``'s to say (every job holding their
    photos approved)."""
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
                     public_reason: str, at: datetime, request_id: str | None = None) -> list[int]:
    """Park the queued ones of these cells (a rejected job's ground past its reissue limit,
    or rejected without reissue: ``settle`` says which, once no other job holding their
    photos is open): they are not swept again by themselves. The request owning each such
    cell, and ``request_id`` (the request whose ground a verdict parked, though its cells
    may still wait for other jobs holding their photos), takes ``public_reason`` (what the
    public queue shows: the why, never who asked or who decided) and is moved to
    ``parked`` when none of its ground is queued any more. ``reason`` (with the actor)
    goes to the log. Runs in the caller's write transaction; returns the cells parked."""
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
    owners = {known[c].request_id for c in parked if known[c].request_id} | ({request_id} if request_id else set())
    for owner in sorted(owners):
        await session.execute(update(SweepRequest).where(SweepRequest.id == owner)
                              .values(reason=public_reason, updated_at=at))
        q = (select(SweepRequestCell.cell).where(SweepRequestCell.request_id == owner,
                                                 SweepRequestCell.sweepable.is_(True)))
        states = await cell_states(session, set((await session.execute(q)).scalars()))
        logs += await _settle_parked(session, owner, states, actor, reason, at)
    await tr.record(session, *logs)
    return parked


async def unpark_cells(session: AsyncSession, cells: Iterable[int], *, actor: str, reason: str,
                       at: datetime, request_id: str | None = None) -> list[int]:
    """Put the parked ones of these cells back in the queue (an operator requeues rejected
    ground: ``jobs.requeue_rejected``), and each ``parked`` request owning them back to
    ``queued``, its reason cleared. ``request_id``, the request whose ground is requeued,
    has its reason cleared too where none of its cells was parked yet (they waited for
    other jobs holding their photos, ``settle``). The cells are queued whatever the
    other jobs over them say: the requeued ground is open again, and ``settle`` decides
    them once it is. Runs in the caller's write transaction; returns the cells put back."""
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
    owners = {known[c].request_id for c in back if known[c].request_id} | ({request_id} if request_id else set())
    for owner in sorted(owners):
        res = await session.execute(update(SweepRequest).where(SweepRequest.id == owner,
                                                               SweepRequest.state == tr.REQUEST_PARKED)
                                    .values(state=tr.REQUEST_QUEUED, reason=None, updated_at=at))
        if res.rowcount:
            logs.append(tr.row("request", owner, tr.REQUEST_PARKED, tr.REQUEST_QUEUED, actor, reason, at))
        else:
            await session.execute(update(SweepRequest).where(SweepRequest.id == owner)
                                  .values(reason=None, updated_at=at))
    await tr.record(session, *logs)
    return back


# ---- a cell decided by every job holding its photos ----

# Jobs still to be decided: a failed job (parked for its failures) waits for an operator's
# ``sis jobs requeue`` and holds its cells queued, as it does those of a job of its own.
OPEN_JOBS = (tr.JOB_QUEUED, tr.JOB_LEASED, tr.JOB_IN_REVIEW, tr.JOB_FAILED)
# What the review workflow writes in a rejected job's reason before the public why of
# parking its ground (``review.workflow._send_again``); what follows the last one is public.
PARKED_MARK = "; ground parked: "


def _n_cells(n: int) -> str:
    return f"{n} cell{'' if n == 1 else 's'}"


def _public_why(job_reason: str | None) -> str:
    """The public why of a parked job's ground, from its reason: what follows the last
    ``PARKED_MARK``, which never holds who decided (that comes before the first)."""
    if job_reason and PARKED_MARK in job_reason:
        return job_reason.rsplit(PARKED_MARK, 1)[1]
    return "rejected in review"


@dataclass
class Ground:
    """What the jobs of one request holding some cells' photos say of each cell: the ids of
    its open jobs (``OPEN_JOBS``), of those approved, and of those whose ground ended
    parked (rejected and not reissued: past the reissue limit or without reissue). A
    rejected job that was reissued (or requeued) is none of them: its reissue, a job of
    the same request with the same cells, stands for its ground."""

    open: dict[int, list[int]]
    approved: dict[int, list[int]]
    parked: dict[int, list[int]]
    whys: dict[int, str]                    # parked job id -> the public why

    def state(self, cell: int) -> str | None:
        """``queued`` while a job holding its photos is open; then ``parked`` if one ended
        parked, ``covered`` if all ended approved; None where no job holds it."""
        if self.open.get(cell):
            return tr.CELL_QUEUED
        if self.parked.get(cell):
            return tr.CELL_PARKED
        if self.approved.get(cell):
            return tr.CELL_COVERED
        return None

    def why(self, cells: Iterable[int]) -> str:
        """The public why of the latest parked job over these cells."""
        jobs = [j for c in cells for j in self.parked.get(c, ())]
        return self.whys[max(jobs)] if jobs else "rejected in review"

    def public_reason(self, cells: Iterable[int], why: str | None = None) -> str:
        """What the public queue says of parked ground: ``parked: <why>``, and for a cell
        whose other photos other jobs swept (approved) or still sweep, that part of its
        photos was not measured, so it is not covered."""
        cells = sorted(set(cells))
        text = f"parked: {why or self.why(cells)}"
        partial = [c for c in cells if self.state(c) == tr.CELL_PARKED and self.approved.get(c)]
        waiting = [c for c in cells if self.state(c) == tr.CELL_QUEUED]
        if partial:
            text += (f"; {_n_cells(len(partial))} of it had their photos split over several jobs: the others "
                     "were approved, but the photos of the rejected one were not measured, so that ground is "
                     "not covered")
        if waiting:
            text += (f"; {_n_cells(len(waiting))} of it have their photos split over several jobs: the photos "
                     "of the rejected one are not measured, and that ground is parked once the others are "
                     "decided")
        return text


async def ground(session: AsyncSession, sweep_id: str, cells: Iterable[int]) -> Ground:
    """The jobs of request ``sweep_id`` holding these cells' photos (``Ground``), read in the
    caller's write transaction after flushing its changes (the verdict's own job among
    them). Two statements: the request's jobs (by its indexed ``sweep_id``; a cell's jobs
    are all of the request owning it, ``requests._queue`` making jobs only for ground no
    other request holds), and which of their rejected ones were reissued. The caller holds
    the request's row lock (``jobs.lock_request``), so that a verdict on a sibling decided
    at the same time is seen."""
    want = set(cells)
    out = Ground({}, {}, {}, {})
    if not want:
        return out
    await session.flush()
    rows = (await session.execute(select(SweepJob.id, SweepJob.state, SweepJob.cells, SweepJob.reason)
                                  .where(SweepJob.sweep_id == sweep_id))).all()
    held = [(r, {int(c, 16) for c in r.cells} & want) for r in rows]
    held = [(r, mine) for r, mine in held if mine]
    rejected = [r.id for r, _ in held if r.state == tr.JOB_REJECTED]
    replaced: set[int] = set()
    for part in chunks(rejected):
        replaced |= set((await session.execute(select(SweepReissue.parent_id)
                                               .where(SweepReissue.parent_id.in_(part)))).scalars())
    for r, mine in held:
        if r.state in OPEN_JOBS:
            into = out.open
        elif r.state == tr.JOB_APPROVED:
            into = out.approved
        elif r.state == tr.JOB_REJECTED and r.id not in replaced:
            into = out.parked
            out.whys[r.id] = _public_why(r.reason)
        else:
            continue
        for c in mine:
            into.setdefault(c, []).append(r.id)
    return out


@dataclass
class Settled:
    """What ``settle`` did with a verdict's cells."""

    covered: list[int]
    parked: list[int]
    waiting: list[int]                      # left queued: another job holding their photos is open
    requests_covered: list[str]
    public_reason: str | None               # what the request says of its parked ground, where any


async def settle(session: AsyncSession, sweep_id: str, cells: Iterable[int], *, actor: str, reason: str,
                 at: datetime, why: str | None = None) -> Settled:
    """Decide the cells of a job of request ``sweep_id`` just decided (approved: the cells its
    result read; rejected and not reissued: all of them) by every job holding their photos
    (``ground``): covered where all those jobs are approved (``mark_cells_covered``),
    parked where none is open and one ended parked (``park_cells``), left queued where one
    is still open. ``reason`` goes to the log; ``why`` is the public why of a rejection
    that parks the ground: the request takes it at once, even while its cells wait for
    the other jobs, as a request does whose other ground is still queued. Where an
    approval parks cells, the why is the parked sibling's. Runs in the caller's write
    transaction, which holds the request's lock (``jobs.lock_request``)."""
    cells = sorted(set(cells))
    g = await ground(session, sweep_id, cells)
    by_state: dict[str | None, list[int]] = {}
    for c in cells:
        by_state.setdefault(g.state(c), []).append(c)
    cover, park, waiting = (by_state.get(k, []) for k in (tr.CELL_COVERED, tr.CELL_PARKED, tr.CELL_QUEUED))
    moved = await mark_cells_covered(session, cover, actor=actor, reason=reason, at=at) if cover else []
    parked: list[int] = []
    public = None
    if park or (why is not None and waiting):
        public = g.public_reason(park + waiting if why is not None else park, why)
        log = reason if why is not None else (
            f"{reason}; job {max(j for c in park for j in g.parked[c])} holding the rest of its photos "
            f"was {g.why(park)}: they were not measured")
        parked = await park_cells(session, park, actor=actor, reason=log, public_reason=public, at=at,
                                  request_id=sweep_id if why is not None else None)
    return Settled(cover, parked, waiting, moved, public)
