"""Sweep requests: ground asked for, answered as covered, merged or queued.

``covered`` and ``pending`` are read from the H3 coverage table. Ground that is
all covered is answered ``queued: false`` with its reason. Ground already
queued by an earlier request merges into that request (its ``asked`` count
grows) instead of doubling the work. Otherwise the photo provider is asked for
photo references in the circle (on the sphere: a circle across the antimeridian is
searched on both sides of it, one holding a pole at every longitude), box by box where
its listing is cut, ground already known skipped (``search``), and jobs are made for
the cells that hold photos and are neither covered nor queued, at most
``SIS_SWEEP_MAX_PHOTOS`` photos of them nearest the centre; the same circle asked
again goes on with its ground not yet listed. Two requests racing for the same
ground claim its cells in ``coverage_cells`` (primary key) one after the other: on
PostgreSQL each takes transaction advisory locks on the ground (``_lock_ground``)
before it reads the cells' states, so the second waits for the first to commit and
then merges into it, or queues only the rest (SQLite's write transaction holds the
whole database). A claim that still fails on the key is tried again, and answered 503
with Retry-After when it fails every time. Parked ground (rejected past the reissue
limit, or rejected without reissue) is held like queued ground: a request over
it merges into the request that parked it, whose state and reason say so, so
asking again is no way around a reviewer's verdict.
"""
from __future__ import annotations

import asyncio
import hashlib
import hmac
import logging
import os
import random
from collections import defaultdict
from dataclasses import dataclass, field
from typing import Any, NamedTuple

import h3
from sqlalchemy import bindparam, func, insert, select, text, update
from sqlalchemy.dialects.postgresql import ARRAY
from sqlalchemy.exc import DBAPIError, IntegrityError
from sqlalchemy.types import BigInteger

from coordinator.core.db.models import CoverageCell, SweepJob, SweepRequest, SweepRequestCell
from coordinator.core.errors import RateLimited, Unavailable
from coordinator.core.honesty import Health, SourceReport
from ..sources.base import SourceError
from . import coverage, jobs, search
from . import transitions as tr

ACTOR_API = "api:sweep_request"
PHOTO_LICENSE = "per photo (each reference carries its own)"
QUEUE_ATTEMPTS = 3
RETRY_AFTER_S = 2
LOCK_RESOLUTION = 7
"""The H3 resolution of the ground's advisory locks (``_lock_ground``): the cells' parents, a
few a circle (about 5 km2 each; a circle of the largest radius, 1 km, touches 1 to 7, mostly 3 or 4), where
one lock a cell took over 200 a request out of PostgreSQL's shared lock table
(``max_locks_per_transaction`` times the connections: 6,400 by default) and a burst of
requests filled it. Two requests sharing a cell share its parent; requests a few km apart
queue one after the other, each transaction a few milliseconds long."""

log = logging.getLogger("sis.sweeps")


@dataclass
class Outcome:
    queued: bool
    reason_code: str | None = None
    reason: str | None = None
    merged: bool = False
    request: dict[str, Any] | None = None
    cells: int = 0
    covered_cells: int = 0
    photos: int = 0
    jobs: int = 0
    caveats: list[str] = field(default_factory=list)
    health: Health | None = None        # set when the photo provider was asked

    def as_json(self) -> dict[str, Any]:
        out: dict[str, Any] = {"queued": self.queued}
        if self.reason is not None:
            out["reason"] = self.reason
            out["reasonCode"] = self.reason_code
        out["merged"] = self.merged
        out["request"] = self.request
        out["ground"] = {"h3Resolution": coverage.RESOLUTION, "cells": self.cells,
                         "coveredCells": self.covered_cells}
        if self.queued and not self.merged:
            out["photos"] = self.photos
            out["jobs"] = self.jobs
        return out


_PROCESS_KEY = os.urandom(32)


def requester_hash(ip: str | None, key: str = "") -> str | None:
    """Kept for abuse handling only; never served. A keyed hash (HMAC-SHA-256): a plain
    hash of an address is undone by hashing every IPv4 address, a keyed one is not
    without the key. ``key`` is ``requester_hash_key``; without it a random key of this
    process, so that requests compare within one run only."""
    if not ip:
        return None
    return hmac.new(key.encode() if key else _PROCESS_KEY, ip.encode(), hashlib.sha256).hexdigest()


class Progress(NamedTuple):
    """A request's jobs by where they stand. ``in_review`` is the part of ``done`` still waiting
    for a reviewer: a request whose every job is swept stays ``queued`` until they are
    approved, and without the count the queue showed all jobs done and nothing said why."""
    done: int = 0
    failed: int = 0
    in_review: int = 0


def public_request(req: SweepRequest, prog: Progress = Progress()) -> dict[str, Any]:
    """What the public queue shows of a request: never who asked. ``reason`` is there once
    some of its ground was parked (``coverage.park_cells``): why, never who decided."""
    out = {"id": req.id, "center": {"type": "Point", "coordinates": [req.lon, req.lat]},
           "radiusM": req.radius_m, "state": req.state, "requestedAt": tr.iso(req.requested_at),
           "updatedAt": tr.iso(req.updated_at), "timesRequested": req.asked,
           "progress": {"jobsDone": prog.done, "jobsInReview": prog.in_review, "jobsTotal": req.jobs_total,
                        "jobsFailed": prog.failed}}
    if req.reason:
        out["reason"] = req.reason
    return out


def _parked_caveat(request: dict[str, Any]) -> list[str]:
    if request.get("state") != tr.REQUEST_PARKED and not request.get("reason"):
        return []
    return [f"Some of this ground is parked and is not swept again by itself: {request.get('reason')}"]


async def progress(session, request_ids: list[str]) -> dict[str, Progress]:
    if not request_ids:
        return {}
    q = (select(SweepJob.sweep_id, SweepJob.state, func.count()).where(SweepJob.sweep_id.in_(request_ids))
         .group_by(SweepJob.sweep_id, SweepJob.state))
    out: dict[str, list[int]] = defaultdict(lambda: [0, 0, 0])
    for sid, state, n in (await session.execute(q)).all():
        if state in tr.JOB_DONE:
            out[sid][0] += n
        elif state == tr.JOB_FAILED:
            out[sid][1] += n
        if state == tr.JOB_IN_REVIEW:
            out[sid][2] += n
    return {k: Progress(*v) for k, v in out.items()}


async def request_json(session, req: SweepRequest) -> dict[str, Any]:
    return public_request(req, (await progress(session, [req.id])).get(req.id, Progress()))


def _within(lat: float, lon: float, radius_m: float, plat: float, plon: float) -> bool:
    """The photo lies in the circle: the great-circle distance, so a photo across the
    antimeridian (or across a pole) is as near as it is, not a turn of the earth away."""
    return coverage.distance_m(lat, lon, plat, plon) <= radius_m


def _boxes(lat: float, lon: float, radius_m: float) -> tuple[tuple[float, float, float, float], ...]:
    """The provider's search boxes (w, s, e, n) for the circle (``coverage.box``): one, or
    one each side of the antimeridian when the circle crosses it (a box clamped at 180
    left the ground past it unsearched, and its cells were then called swept with no
    photo), all longitudes when it holds a pole. A little wider than the circle: a
    photo on its edge is in the box."""
    return coverage.box(lat, lon, radius_m * 1.001 + 1.0).parts


async def _listed_empty(session, cells: set[int]) -> set[int]:
    """Of these cells, those a queued (or parked) request listed completely and found no
    usable photo in: they are called swept without imagery once it is covered, and until
    then they are known ground its listing speaks for (``sweepable`` false)."""
    out: set[int] = set()
    for part in coverage.chunks(cells):
        q = (select(SweepRequestCell.cell).join(SweepRequest, SweepRequest.id == SweepRequestCell.request_id)
             .where(SweepRequestCell.cell.in_(part), SweepRequestCell.sweepable.is_(False),
                    SweepRequest.state.in_((tr.REQUEST_QUEUED, tr.REQUEST_PARKED))))
        out |= set((await session.execute(q)).scalars())
    return out


async def _search(sweeps, lat: float, lon: float, radius_m: float, max_photos: int, ground: set[int],
                  known: set[int], taken: set[int]) -> search.Found:
    """The provider's photos for the circle (``search``): its boxes (``_boxes``) always
    searched, split where cut, ground already known skipped; at most ``max_photos`` kept on
    ground not ``taken`` (covered or held), whole cells listed completely nearest the centre
    first. Photos standing off the ground, in edge cells, have those cells' states read too.
    ``SIS_SWEEP_MAX_SEARCHES`` searches at most, ``SIS_SWEEP_SEARCHES_AT_ONCE`` at a time."""
    listing = await search.search(sweeps.provider, lat, lon, radius_m, _boxes(lat, lon, radius_m),
                                  max_photos=max_photos, ground=ground, known=known, taken=taken,
                                  max_searches=sweeps.settings.sweep_max_searches,
                                  at_once=sweeps.settings.sweep_searches_at_once)
    edge = {coverage.point_cell(p.lat, p.lon) for p in listing.photos.values()} - ground
    if edge:
        async with sweeps.db.read() as s:
            taken = taken | {c for c, st in (await coverage.cell_states(s, edge)).items()
                             if st.state == tr.CELL_COVERED or st.state in tr.HELD}
    return search.keep(listing, lat, lon, radius_m, max_photos=max_photos, ground=ground, known=known, taken=taken)


def _cells(n: int) -> str:
    return f"{n} cell{'' if n == 1 else 's'}"


def _cut_caveats(found: search.Found, out: Outcome, max_photos: int, max_searches: int) -> list[str]:
    """What the answer says of a listing that did not reach all the circle's ground: that the
    same circle asked again goes on with it where this request queued new ground (the next
    one skips what this one queued), that asking again lists the same where it queued none;
    and of boxes about a cell wide the provider lists more in than one page: ground beside
    them is never listed completely, so never called swept without imagery (its photos that
    are listed are still queued by later requests)."""
    li, says = found.listing, []
    rest = found.unknown
    searched = (f"{li.calls} searches of the provider ({li.page} photos each; at most {max_searches} searches a "
                "request, SIS_SWEEP_MAX_SEARCHES)")
    if rest and out.queued and not out.merged:
        says.append(f"The provider lists more photos here than one request takes: {out.photos} photos were "
                    f"queued (at most {max_photos}, SIS_SWEEP_MAX_PHOTOS), nearest the centre from ground listed "
                    f"completely first, after {searched}. {_cells(len(rest))} of this ground were not listed "
                    "completely or not taken: they are neither queued nor called swept. The same circle asked again "
                    "goes on with that ground (seen-areas shows what is covered).")
    elif rest:
        says.append(f"The provider lists more photos here than {searched} list, and what they listed on ground not "
                    f"yet known gave nothing new to queue: {_cells(len(rest))} of this ground are not listed "
                    "completely, neither queued nor called swept, and the same circle asked again lists the same. "
                    "Ask over smaller circles on that part to reach it (seen-areas shows what is covered).")
    if li.dense:
        n = len(li.dense)
        says.append(f"In {n} place{'' if n == 1 else 's'} about a cell wide the provider lists more than {li.page} "
                    "photos, more than one search of a box that small returns: only the photos it lists first there "
                    "are known, its others there are swept by no request"
                    + (f", and {_cells(len(found.beside_dense))} of this ground beside them are never listed "
                       "completely, so never called swept without imagery, however the ground is asked"
                       if found.beside_dense else "") + ".")
    return says


async def _merge(db, owner_id: str, at) -> dict[str, Any]:
    async with db.write() as s:
        await s.execute(update(SweepRequest).where(SweepRequest.id == owner_id)
                        .values(asked=SweepRequest.asked + 1, updated_at=at))
        req = await s.get(SweepRequest, owner_id)
        await tr.record(s, tr.row("request", owner_id, req.state, req.state, ACTOR_API,
                                  "asked again over the same ground: merged", at))
        return await request_json(s, req)


def _owner(states: dict[int, CoverageCell], cells: set[int]) -> str | None:
    counts: dict[str, int] = defaultdict(int)
    for c in cells:
        st = states.get(c)
        if st is not None and st.state in tr.HELD and st.request_id:
            counts[st.request_id] += 1
    return max(sorted(counts), key=lambda k: counts[k]) if counts else None


async def submit(sweeps, lat: float, lon: float, radius_m: float, requester_ip: str | None) -> Outcome:
    db, settings = sweeps.db, sweeps.settings
    cells = coverage.circle_cells(lat, lon, radius_m)
    async with db.read() as s:
        states = await coverage.cell_states(s, cells)
        listed_empty = await _listed_empty(s, cells - set(states))
    covered = {c for c, st in states.items() if st.state in tr.SWEPT}
    pending = {c for c, st in states.items() if st.state in tr.HELD}
    base = dict(cells=len(cells), covered_cells=len(covered))
    if covered == cells:
        bare = sum(1 for st in states.values() if st.state == tr.CELL_NO_IMAGERY)
        return Outcome(False, "covered", "this ground is already covered: every cell of it has been swept"
                       + (f"; {bare} of its {len(cells)} cells had no usable street photo when swept, and the "
                          "provider is not asked again here" if bare else "")
                       + "; its facts are in the seen layer", **base)
    at = tr.utcnow()
    if cells <= covered | pending:
        owner = _owner(states, cells)
        merged = await _merge(db, owner, at)
        return Outcome(True, merged=True, request=merged, **base,
                       caveats=["This ground is already queued by an earlier request; yours was merged into it "
                                "rather than doubling the work.", *_parked_caveat(merged)])
    taken = pending | {c for c, st in states.items() if st.state == tr.CELL_COVERED}
    try:
        found = await _search(sweeps, lat, lon, radius_m, settings.sweep_max_photos, cells,
                              covered | pending | listed_empty, taken)
    except SourceError as exc:
        # Degraded, not an error: the answer says which source failed and is never cached. One box of the
        # search failing fails it all: the ground of a box not read would have been taken for ground without
        # photos (``search``).
        return Outcome(False, "provider_unavailable", "the street-photo provider could not be read, so nothing "
                       "was queued; retry later", health=Health([SourceReport(
                           sweeps.provider.name, PHOTO_LICENSE, ok=False, error=str(exc),
                           demo=sweeps.provider.demo)]), **base)
    # In demo mode the provider is the demo's synthetic one: its report says so, and the answer's caveats with it.
    health = Health([SourceReport(sweeps.provider.name, PHOTO_LICENSE, ok=True, records=found.listed,
                                  demo=sweeps.provider.demo)])
    by_cell: dict[int, list] = defaultdict(list)
    for p in found.photos:
        if _within(lat, lon, radius_m, p.lat, p.lon):
            by_cell[coverage.point_cell(p.lat, p.lon)].append(p)
    caveats = []
    if found.skipped:
        caveats.append("Photos the engine cannot measure were left out: " +
                       ", ".join(f"{n} {why}" for why, n in sorted(found.skipped.items())) + ".")
    for attempt in range(QUEUE_ATTEMPTS):
        try:
            out = await _queue(sweeps, lat, lon, radius_m, requester_ip, cells, by_cell, list(caveats),
                               found.known_empty, found.truncated)
        except DBAPIError as exc:
            # A cell claimed by a writer the ground's locks do not order (an approval marking ground with no
            # row covered), or a deadlock with one: tried again after a pause, the cells' states read again.
            if not _claim_failed(exc):
                raise
            if attempt == QUEUE_ATTEMPTS - 1:
                log.warning("a sweep request at %.5f, %.5f could not claim its cells in %d attempts: %s", lat, lon,
                            QUEUE_ATTEMPTS, str(exc).splitlines()[0])
                raise Unavailable(f"other requests were claiming the same ground at the same time; nothing was "
                                  f"queued: ask again in {RETRY_AFTER_S} s, and this request merges into theirs "
                                  "or queues the rest", {"retryAfterS": RETRY_AFTER_S},
                                  headers={"Retry-After": str(RETRY_AFTER_S)}) from exc
            await asyncio.sleep(random.uniform(0.02, 0.1) * (attempt + 1))
            continue
        out.health = health
        out.caveats[:0] = _cut_caveats(found, out, settings.sweep_max_photos, settings.sweep_max_searches)
        return out
    raise AssertionError("unreachable")  # pragma: no cover


def _claim_failed(exc: DBAPIError) -> bool:
    """A cell's key taken by another transaction first, or a deadlock or serialisation failure
    PostgreSQL broke: the claim is worth another try. Not SQLite's busy database, which has
    already waited its 30 s."""
    code = getattr(getattr(exc, "orig", None), "sqlstate", None)
    return isinstance(exc, IntegrityError) or code in ("40P01", "40001")


def _signed(key: int) -> int:
    """A 64-bit key as PostgreSQL's bigint holds it (two's complement). An H3 index keeps its top
    bit clear, so a cell's is itself; a hash's may not."""
    return key - (1 << 64) if key >= 1 << 63 else key


def _ground_keys(cells: set[int]) -> list[int]:
    """The advisory lock keys of this ground, sorted: its cells' parents at ``LOCK_RESOLUTION``."""
    return sorted({_signed(h3.str_to_int(h3.cell_to_parent(coverage.cell_text(c), LOCK_RESOLUTION)))
                   for c in cells})


def _requester_key(hashed: str) -> int:
    return int.from_bytes(hashlib.sha256(f"sis:sweep-requester:{hashed}".encode()).digest()[:8], "big", signed=True)


_LOCK_KEYS = text("SELECT pg_advisory_xact_lock(k) FROM unnest(:keys) AS k").bindparams(
    bindparam("keys", type_=ARRAY(BigInteger)))


async def _lock_ground(s, db, cells: set[int]) -> None:
    """On PostgreSQL, wait for the ground's advisory locks (``_ground_keys``) in this write
    transaction, in sorted order (two requests over the same ground never hold each a part the
    other waits for), before its cells' states are read: under READ COMMITTED two requests
    each read the other's cells free, and both claimed them (the second failed on the key, and
    one that lost three times answered 500), or both queued again a cell swept before with no
    imagery, making its jobs twice. Held until commit; SQLite's write transaction (``BEGIN
    IMMEDIATE``) already holds the whole database."""
    if db.is_sqlite or not cells:
        return
    (await s.execute(_LOCK_KEYS, {"keys": _ground_keys(cells)})).all()


async def _within_requester_bound(s, db, settings, hashed: str | None) -> None:
    """One requester's queued requests are bounded: each is work the volunteers' GPUs do, and
    the rate limit alone let one address queue tens of thousands a day over ground nobody
    else asked for. Checked in the write that would queue new ground: a merge into queued
    ground adds no work and is never refused. On PostgreSQL the requester's advisory lock is
    taken first, held until commit: under READ COMMITTED concurrent requests from one address
    each counted the others' uncommitted requests out, and 40 at once with a limit of 5 queued
    15 (26 over two workers). Taken after the ground's locks (``_lock_ground``), always."""
    if hashed is None:
        return
    if not db.is_sqlite:
        await s.execute(text("SELECT pg_advisory_xact_lock(:k)"), {"k": _requester_key(hashed)})
    limit = settings.sweep_max_queued_per_requester
    held = (await s.execute(select(func.count()).select_from(SweepRequest).where(
        SweepRequest.state == tr.REQUEST_QUEUED, SweepRequest.requester_hash == hashed))).scalar_one()
    if held >= limit:
        raise RateLimited(f"you have {held} sweep requests queued, the most one requester may have "
                          f"(SIS_SWEEP_MAX_QUEUED_PER_REQUESTER = {limit}); ask again when some are swept "
                          "(GET /earth/sweep-queue shows them)", {"queued": held, "limit": limit})


async def _queue(sweeps, lat, lon, radius_m, requester_ip, cells, by_cell, caveats, known_empty,
                 partial=False) -> Outcome:
    db, settings = sweeps.db, sweeps.settings
    at = tr.utcnow()
    # A photo inside the circle may stand in an edge cell whose centre is outside it: that
    # cell is swept with the request too. The answer's ground stays the circle's own cells
    # (``coverage.circle_cells``), the cells the seen layer counts for the same circle.
    ground = cells
    photo_cells = set(by_cell)
    cells = cells | photo_cells
    async with db.write() as s:
        await _lock_ground(s, db, cells)
        states = await coverage.cell_states(s, cells)
        covered = {c for c, st in states.items() if st.state == tr.CELL_COVERED}
        pending = {c for c, st in states.items() if st.state in tr.HELD}
        bare = {c for c, st in states.items() if st.state == tr.CELL_NO_IMAGERY}
        covered_cells = len((covered | bare) & ground)
        base = dict(cells=len(ground), covered_cells=covered_cells, caveats=caveats)
        if not photo_cells - covered - pending:
            # ``partial``: part of the ground was not listed completely (the caveats say which and why), and
            # nothing is said of it.
            if not photo_cells and not pending:
                return Outcome(False, "no_photos", "the street-photo provider lists no usable photos on this "
                               + ("ground" if not partial else "part of this ground it listed completely")
                               + ", so there is nothing to sweep; unswept ground says nothing about what "
                               "stands there", **base)
            if photo_cells <= covered and not (pending & cells):
                return Outcome(False, "covered", "every part of this ground that has street photos is already "
                               + ("covered; the rest has no photos to sweep" if not partial else
                                  "covered, as far as it was listed completely"), **base)
            owner = _owner(states, cells)
            await s.execute(update(SweepRequest).where(SweepRequest.id == owner)
                            .values(asked=SweepRequest.asked + 1, updated_at=at))
            req = await s.get(SweepRequest, owner)
            await tr.record(s, tr.row("request", owner, req.state, req.state, ACTOR_API,
                                      "asked again over the same ground: merged", at))
            merged = await request_json(s, req)
            caveats.extend(_parked_caveat(merged))
            return Outcome(True, merged=True, request=merged, **base)
        hashed = requester_hash(requester_ip, settings.requester_hash_key)
        await _within_requester_bound(s, db, settings, hashed)
        new_cells = photo_cells - covered - pending
        plans = jobs.split({c: by_cell[c] for c in new_cells}, settings.job_max_photos)
        req = SweepRequest(id=tr.new_id("sr"), lat=lat, lon=lon, radius_m=radius_m, state=tr.REQUEST_QUEUED,
                           requested_at=at, updated_at=at, requester_hash=hashed, asked=1,
                           photos=sum(len(p.photos) for p in plans), jobs_total=len(plans), reason=None)
        s.add(req)
        await s.flush()
        # Its ground is the cells it queues photos in and those its listing reached completely without a
        # photo (``known_empty``), marked no_imagery once it is covered ("the provider listed no usable
        # photo here"). A cell a cut box reached, or one left for a later request, is not: nothing was
        # listed of it completely, and it waits for the same circle asked again (``search``).
        await s.execute(insert(SweepRequestCell), [
            {"request_id": req.id, "cell": c, "sweepable": c in photo_cells} for c in sorted(cells)
            if c in photo_cells or c in known_empty])
        # Ground swept before with no imagery that has photos now is queued again, in its row.
        again, fresh = sorted(new_cells & bare), sorted(new_cells - bare)
        await s.execute(update(CoverageCell).where(CoverageCell.cell.in_(again))
                        .values(state=tr.CELL_QUEUED, request_id=req.id, updated_at=at, covered_at=None))
        if fresh:    # none when all the new ground was swept before with no imagery: an empty insert fails
            await s.execute(insert(CoverageCell), [
                {"cell": c, "state": tr.CELL_QUEUED, "request_id": req.id, "updated_at": at, "covered_at": None}
                for c in fresh])
        rows = [{"sweep_id": req.id, "state": tr.JOB_QUEUED, "area": p.area, "center_lat": p.center_lat,
                 "center_lon": p.center_lon, "radius_m": p.radius_m,
                 "cells": [coverage.cell_text(c) for c in p.cells], "photos": [ph.to_dict() for ph in p.photos],
                 "quorum": 1, "active_leases": 0, "valid_results": 0, "failures": 0, "canonical_lease_id": None,
                 "reason": None, "created_at": at, "updated_at": at} for p in plans]
        job_ids = list((await s.execute(insert(SweepJob).returning(SweepJob.id), rows)).scalars()) if rows else []
        logs = [tr.row("request", req.id, None, tr.REQUEST_QUEUED, ACTOR_API,
                       f"{len(new_cells)} new cells with {req.photos} photos in {len(plans)} jobs", at)]
        logs += [tr.row("cell", c, tr.CELL_NO_IMAGERY, tr.CELL_QUEUED, ACTOR_API,
                        f"photos listed here now: queued again with {req.id}", at) for c in again]
        logs += [tr.row("cell", c, None, tr.CELL_QUEUED, ACTOR_API, f"queued with {req.id}", at) for c in fresh]
        logs += [tr.row("job", jid, None, tr.JOB_QUEUED, ACTOR_API, f"made for request {req.id}", at)
                 for jid in job_ids]
        await tr.record(s, *logs)
        shared = (pending & cells)
        if shared:
            caveats.append(f"{len(shared)} cells of this ground were already queued by an earlier request and are "
                           "swept by its jobs; this request is covered when they are too.")
        return Outcome(True, request=public_request(req), photos=req.photos, jobs=len(plans), **base)


async def queue(db, state: str, limit: int) -> tuple[list[dict[str, Any]], int]:
    async with db.read() as s:
        q = select(SweepRequest)
        cq = select(func.count()).select_from(SweepRequest)
        if state != "all":
            q, cq = q.where(SweepRequest.state == state), cq.where(SweepRequest.state == state)
        q = q.order_by(SweepRequest.requested_at, SweepRequest.id).limit(limit)
        reqs = list((await s.execute(q)).scalars())
        total = (await s.execute(cq)).scalar_one()
        prog = await progress(s, [r.id for r in reqs])
        return [public_request(r, prog.get(r.id, Progress())) for r in reqs], total
