"""Splitting discovered photos into jobs (work units), and a job as the data a node gets.

Photos are grouped by their H3 cell; cells are packed in a row-by-row order into
jobs of at most ``job_max_photos`` photos, so that a job is a compact patch of
ground. A cell holding more photos than that is split over several jobs with the
same area. A job's area is the convex hull of its cells' hexagons: always one
polygon, and the ground its photos can speak for. Its longitudes are continuous
across the antimeridian (past +-180 where it crosses it, beside a centre in
[-180, 180]); the validator reads facts against it the same way.

A rejected job's ground is swept again by a new job (``reissue``): the same photos,
cells and area, linked to the rejected one (``sweep_reissues``, its generation) and
closed to the nodes whose results were rejected (``sweep_job_exclusions``), which the
claims in ``leases`` honour (``not_excluded``, ``excluded_pairs``).

The jobs over one split cell decide it together (``coverage.settle``): every verdict and
requeue on a job first locks its request (``lock_request``), so that two of them on
sibling jobs never decide the cell each without seeing the other.
"""
from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime

import h3
import shapely.affinity
from shapely.geometry import MultiPolygon, mapping
from shapely.ops import unary_union
from sqlalchemy import exists, insert, select, update

from sweep_engine.schema import Job, PhotoRef

from coordinator.core.db.models import SweepJob, SweepJobExclusion, SweepReissue, SweepRequest, SweepResult
from coordinator.core.db.transactions import for_update, retrying
from coordinator.core.errors import Conflict, NotFound
from . import coverage
from . import transitions as tr

WIRE_PREFIX = "job-"


@dataclass
class JobPlan:
    cells: list[int]
    photos: list[PhotoRef]
    area: dict
    center_lat: float
    center_lon: float
    radius_m: float


def wire_id(job_id: int) -> str:
    return f"{WIRE_PREFIX}{job_id}"


MAX_ID = 2 ** 63 - 1                    # a BIGINT row id, on SQLite and PostgreSQL alike


def parse_job_id(text: str) -> int | None:
    """A job id as a route takes it, ``job-<n>`` or ``<n>``: ValueError when it is not one
    (ASCII digits only), None when no row can have it (0, or past a 64-bit row id, which
    the databases refuse to compare with rather than find nothing), so that the route
    answers 404 and never hands the database a number it overflows on."""
    digits = text[len(WIRE_PREFIX):] if text.startswith(WIRE_PREFIX) else text
    if not digits or not digits.isascii() or not digits.isdigit():
        raise ValueError(f"{text!r} is not a job id")
    if len(digits.lstrip("0")) > len(str(MAX_ID)):
        return None
    n = int(digits)
    return n if 1 <= n <= MAX_ID else None


async def locked_job(s, db, job_id: int, state: str, conflict: str) -> SweepJob:
    """The job, row-locked in the caller's write transaction where the database locks rows:
    ``NotFound`` when there is none, ``Conflict`` (``conflict``, with the job's state) when it
    is not in ``state``. Every verdict and operator command on one job starts here."""
    job = await s.get(SweepJob, job_id, with_for_update=for_update(db))
    if job is None:
        raise NotFound("no such job", {"jobId": job_id})
    if job.state != state:
        raise Conflict(conflict.format(job=wire_id(job_id), state=job.state), {"jobId": job_id, "state": job.state})
    return job


async def lock_request(s, db, sweep_id: str) -> None:
    """Row-lock the job's sweep request in the caller's write transaction, after the job's own
    lock (always that order): on PostgreSQL, under READ COMMITTED, two verdicts on the last
    two open jobs of a split cell each read the other still in review and left the cell
    queued for ever; locked, the second waits and then reads the first's outcome. SQLite's
    write transaction (``BEGIN IMMEDIATE``) already holds the whole database."""
    if not db.is_sqlite:
        await s.execute(select(SweepRequest.id).where(SweepRequest.id == sweep_id).with_for_update())


def _plan(cells: list[int], photos: list[PhotoRef]) -> JobPlan:
    """A job over ``cells``: its area the convex hull of their hexagons, its centre the
    hull's centroid, its radius the farthest corner's great-circle distance from it.
    Longitudes are unwrapped first (``coverage.cell_polygon``), continuous across
    the antimeridian: H3 gives a hexagon straddling 180 with corners at 179.9998 and
    -179.9997, and a hull of those spanned the whole latitude band (a centre at -20, a
    radius of 21,000 km). The centre's longitude is in [-180, 180]; the area's are
    continuous with it, so past +-180 where the area crosses the antimeridian."""
    ref = h3.cell_to_latlng(coverage.cell_text(cells[0]))[1]
    hull = unary_union([coverage.cell_polygon(c, ref) for c in cells]).convex_hull
    if isinstance(hull, MultiPolygon):  # pragma: no cover - a hull is one polygon
        hull = max(hull.geoms, key=lambda g: g.area)
    c = hull.centroid
    turn = c.x - coverage.wrap_lon(c.x)          # 0, or +-360 when the centroid fell past +-180
    if turn:
        hull = shapely.affinity.translate(hull, xoff=-turn)
        c = hull.centroid
    radius = max(coverage.distance_m(c.y, c.x, la, lo) for lo, la in hull.exterior.coords)
    area = mapping(hull)
    area = {"type": "Polygon", "coordinates": [[[round(x, 7), round(y, 7)] for x, y in ring]
                                               for ring in area["coordinates"]]}
    return JobPlan(cells=sorted(cells), photos=photos, area=area, center_lat=c.y, center_lon=c.x,
                   radius_m=max(1.0, round(radius, 1)))


def split(photos_by_cell: dict[int, list[PhotoRef]], max_photos: int) -> list[JobPlan]:
    """Jobs of at most ``max_photos`` photos, cells packed row by row. A cell holding more is
    split over several jobs of that one cell: none of them alone speaks for the cell, which
    review covers or parks only once all of them are decided (``coverage.settle``)."""
    def order(cell: int) -> tuple[float, float]:
        la, lo = h3.cell_to_latlng(coverage.cell_text(cell))
        return (round(la, 3), lo)

    plans: list[JobPlan] = []
    cells: list[int] = []
    batch: list[PhotoRef] = []
    for cell in sorted(photos_by_cell, key=order):
        photos = sorted(photos_by_cell[cell], key=lambda p: (p.captured_at, p.id))
        if len(photos) > max_photos:
            for i in range(0, len(photos), max_photos):
                plans.append(_plan([cell], photos[i:i + max_photos]))
            continue
        if len(batch) + len(photos) > max_photos:
            plans.append(_plan(cells, batch))
            cells, batch = [], []
        cells.append(cell)
        batch.extend(photos)
    if batch:
        plans.append(_plan(cells, batch))
    return plans


def job_document(job: SweepJob) -> Job:
    """The job as a node receives it: data only (photo references and parameters)."""
    return Job(job_id=wire_id(job.id), sweep_id=job.sweep_id, area=job.area, center_lon=job.center_lon,
               center_lat=job.center_lat, radius_m=job.radius_m,
               photos=[PhotoRef.from_dict(p) for p in job.photos],
               params={"h3Resolution": coverage.RESOLUTION, "cells": list(job.cells)})


# ---- rejected ground swept again ----

EXCLUSIONS = SweepJobExclusion.__table__


def not_excluded(job_id_column, node_id: str):
    """A claim's condition: the job is not closed to this node (``sweep_job_exclusions``)."""
    return ~exists().where(EXCLUSIONS.c.job_id == job_id_column, EXCLUSIONS.c.node_id == node_id)


def excluded_pairs(job_ids, node_ids):
    """The (job, node) pairs among these that a claim must skip, the job being closed to the
    node: a select of two columns, which a claim batch reads in one statement with the
    pairs it skips for other reasons (``leases.claim_in``). Lists of ids, or expanding bind
    parameters standing for them (a statement made once)."""
    return select(EXCLUSIONS.c.job_id, EXCLUSIONS.c.node_id).where(
        EXCLUSIONS.c.job_id.in_(job_ids), EXCLUSIONS.c.node_id.in_(node_ids))


@dataclass
class Lineage:
    """Where a job comes from: ``generation`` 0 for an original, n for the n-th reissue of
    its ground; ``parent`` the rejected job it was made from; ``excluded`` the nodes it is
    never offered to."""

    generation: int
    parent: int | None
    excluded: set[str]


async def lineage(session, job_id: int) -> Lineage:
    row = (await session.execute(select(SweepReissue.generation, SweepReissue.parent_id)
                                 .where(SweepReissue.job_id == job_id))).first()
    excluded = set((await session.execute(select(EXCLUSIONS.c.node_id)
                                          .where(EXCLUSIONS.c.job_id == job_id))).scalars())
    return Lineage(row.generation if row else 0, row.parent_id if row else None, excluded)


async def reissue(session, job: SweepJob, generation: int, exclude: set[str], at: datetime) -> int:
    """A new queued job for a rejected job's photos, cells and area, under the same sweep
    request, closed to the nodes in ``exclude``; returns its id. Its counters start
    afresh (quorum one; an untrusted node's claim raises it to two). The caller records
    the transitions, in the same transaction."""
    new_id = (await session.execute(insert(SweepJob).values(
        sweep_id=job.sweep_id, state=tr.JOB_QUEUED, area=job.area, center_lat=job.center_lat, center_lon=job.center_lon,
        radius_m=job.radius_m, cells=list(job.cells), photos=list(job.photos), quorum=1, active_leases=0,
        valid_results=0, failures=0, canonical_lease_id=None, reason=None, created_at=at, updated_at=at)
        .returning(SweepJob.id))).scalar_one()
    session.add(SweepReissue(job_id=new_id, parent_id=job.id, generation=generation, created_at=at))
    if exclude:
        await session.execute(insert(EXCLUSIONS), [{"job_id": new_id, "node_id": n} for n in sorted(exclude)])
    await session.flush()
    return new_id


def read_cells(job: SweepJob, measured: set[str]) -> set[int]:
    """The job's cells (ints) holding at least one of its photos that a result measured."""
    return {coverage.point_cell(p["lat"], p["lon"]) for p in job.photos if p["id"] in measured}


async def sweep_again(session, job: SweepJob, cells: set[int], at: datetime) -> int:
    """A new queued job for the photos of ``cells``: ground of an approved job whose result
    read none of its photos there (skipped: the provider did not answer them), which is
    therefore not covered but swept again. Its counters start afresh and no node is
    excluded (a photo not read is not a node's fault). The caller records the transitions."""
    photos = [p for p in job.photos if coverage.point_cell(p["lat"], p["lon"]) in cells]
    plan = _plan(sorted(cells), [PhotoRef.from_dict(p) for p in photos])
    # The request's work grew by a job: counted, its progress would read 8 jobs done of 7.
    await session.execute(update(SweepRequest).where(SweepRequest.id == job.sweep_id)
                          .values(jobs_total=SweepRequest.jobs_total + 1))
    return (await session.execute(insert(SweepJob).values(
        sweep_id=job.sweep_id, state=tr.JOB_QUEUED, area=plan.area, center_lat=plan.center_lat,
        center_lon=plan.center_lon, radius_m=plan.radius_m, cells=[coverage.cell_text(c) for c in plan.cells],
        photos=photos, quorum=1, active_leases=0, valid_results=0, failures=0, canonical_lease_id=None,
        reason=None, created_at=at, updated_at=at).returning(SweepJob.id))).scalar_one()


async def requeue_rejected(db, job_id: int, actor: str, why: str) -> int:
    """An operator puts a rejected job's parked ground back in the queue (``sis jobs requeue``
    on a rejected job): a new job for its photos, closed to the same nodes as a reissue
    would be, its cells and request queued again. The reissue count starts again from 0
    (the new job's generation), so reviewers get ``reissue_max`` more reissues of it.
    A rejected job not reissued is parked ground even while the cells it shares with
    other jobs (a split cell) are still queued, waiting for those jobs
    (``coverage.settle``): it is requeued all the same, so that once they are decided the
    cell follows the requeued job rather than being parked.
    Returns the new job's id. ``NotFound`` for no such job; ``Conflict`` for a job that is
    not rejected, whose ground was already reissued, or none of whose cells is parked or
    still queued (all swept since)."""
    async def run() -> int:
        now = tr.utcnow()
        async with db.write() as s:
            job = await locked_job(s, db, job_id, tr.JOB_REJECTED, "job {job} is {state}, not rejected")
            await lock_request(s, db, job.sweep_id)
            child = (await s.execute(select(SweepReissue.job_id).where(SweepReissue.parent_id == job_id))).first()
            if child is not None:
                raise Conflict(f"the ground of job {wire_id(job_id)} was already reissued as {wire_id(child[0])}",
                               {"jobId": job_id, "reissuedAs": child[0]})
            cells = [int(c, 16) for c in job.cells]
            states = await coverage.cell_states(s, cells)
            if not any(c in states and states[c].state in tr.HELD for c in cells):
                raise Conflict(f"none of the ground of job {wire_id(job_id)} is parked", {"jobId": job_id})
            await coverage.unpark_cells(s, cells, actor=actor, reason=f"requeued from rejected job {job.id}: {why}",
                                        at=now, request_id=job.sweep_id)
            line = await lineage(s, job.id)
            rejected = set((await s.execute(select(SweepResult.node_id).where(
                SweepResult.job_id == job.id, SweepResult.state == tr.RESULT_ACCEPTED))).scalars())
            exclude = line.excluded | rejected
            new_id = await reissue(s, job, 0, exclude, now)
            closed = ", ".join(f"node:{n}" for n in sorted(exclude)) or "no node"
            await tr.record(s, tr.row("job", new_id, None, tr.JOB_QUEUED, actor,
                                      f"requeued from rejected job {job.id} (reissue count starts again), "
                                      f"not offered to {closed}: {why}", now))
            return new_id

    return await retrying(run)
