"""The review workflow: what waits, what a reviewer sees, and the verdicts.

A job waits for review in ``in_review`` once a quorum of its replicas agreed.
Approving it, in one write transaction: the job moves to ``approved``, the
canonical result's facts and measurements go live (``seen.publish``), and its
cells are covered (``coverage.mark_cells_covered``, which also moves covering
sweep requests to ``covered``). Rejecting it moves the job to ``rejected`` with
the reason; nothing of it is served. Its ground goes back to the queue, as
volunteer-computing systems send a work unit out again when its results fail:
with reissue (the default) a new job is made for its photos (``jobs.reissue``),
closed to the nodes whose results were rejected, and its cells stay ``queued``
under it; past ``reissue_max`` reissues of that ground, or rejected without
reissue (ground that should not be swept), its cells are parked with the reason
(``coverage.park_cells``), which the public queue shows. All of it happens in the
verdict's transaction. Every verdict and what follows from it is a row of
``sweep_transitions`` with the reviewer and the reason.

A verdict never decides its cells alone: a cell with more photos than a job takes is
split over several jobs of the same request, and ``coverage.settle`` covers or parks
it only once every job holding its photos is decided (their verdicts serialised on
the request's lock, ``jobs.lock_request``). Until then it stays ``queued``, and the
answer counts it in ``cellsWaiting`` (approval) or ``parked.waiting`` (rejection).
"""
from __future__ import annotations

from typing import Any

from sqlalchemy import func, or_, select

from sweep_engine.schema import Result

from coordinator.core.db.models import Node, SweepJob, SweepRequest, SweepResult, SweepTransition
from coordinator.core.errors import BadParameter, Conflict, NotFound
from ..seen.publish import publish
from ..sweeps import coverage, jobs
from ..sweeps import transitions as tr
from coordinator.core.db.transactions import retrying
from . import agreement
from .keys import ReviewerKey

MAX_REASON = 2000


def _actor(reviewer: ReviewerKey) -> str:
    return f"reviewer:{reviewer.id}"


def _bbox_of(area: dict) -> tuple[float, float, float, float]:
    xs = [p[0] for p in area["coordinates"][0]]
    ys = [p[1] for p in area["coordinates"][0]]
    return min(xs), min(ys), max(xs), max(ys)


async def pending(db, *, bbox: tuple[float, float, float, float] | None = None, sweep_id: str | None = None,
                  limit: int = 200) -> dict[str, Any]:
    """Jobs waiting for review, oldest first, filtered by area (bbox intersects the job's
    area) and by sweep."""
    async with db.read() as s:
        q = select(SweepJob).where(SweepJob.state == tr.JOB_IN_REVIEW)
        if sweep_id:
            q = q.where(SweepJob.sweep_id == sweep_id)
        if bbox is not None:
            w, so, e, n = bbox
            # A coarse filter in SQL on the job's centre and radius, exact in Python below.
            pad = 0.05
            # A job's ground across 180 has its centre on either side of it: the box is looked for there too.
            q = q.where(or_(*(SweepJob.center_lon.between(w - pad + k, e + pad + k) for k in (-360, 0, 360))),
                        SweepJob.center_lat.between(so - pad, n + pad))
        q = q.order_by(SweepJob.updated_at, SweepJob.id)
        rows = list((await s.execute(q)).scalars())
        if bbox is not None:
            rows = [j for j in rows if _intersects(_bbox_of(j.area), bbox)]
        total = len(rows)
        rows = rows[:limit]
        counts: dict[int, dict[str, int]] = {}
        if rows:
            cq = (select(SweepResult.job_id, SweepResult.state, func.count()).where(
                SweepResult.job_id.in_([j.id for j in rows])).group_by(SweepResult.job_id, SweepResult.state))
            for job_id, state, n in (await s.execute(cq)).all():
                counts.setdefault(job_id, {})[state] = n
            facts = dict((await s.execute(select(SweepResult.lease_id, SweepResult.facts).where(
                SweepResult.lease_id.in_([j.canonical_lease_id for j in rows if j.canonical_lease_id])))).all())
    items = []
    for j in rows:
        c = counts.get(j.id, {})
        items.append({"jobId": j.id, "wireId": jobs.wire_id(j.id), "sweepId": j.sweep_id, "area": j.area,
                      "centre": {"lat": j.center_lat, "lon": j.center_lon}, "radiusM": j.radius_m,
                      "photos": len(j.photos), "cells": len(j.cells), "facts": facts.get(j.canonical_lease_id, 0),
                      "replicas": {"accepted": c.get(tr.RESULT_ACCEPTED, 0), "outvoted": c.get(tr.RESULT_OUTVOTED, 0),
                                   "invalid": c.get(tr.RESULT_INVALID, 0), "unread": c.get(tr.RESULT_UNREAD, 0),
                                   "quorum": j.quorum},
                      "unanimous": c.get(tr.RESULT_OUTVOTED, 0) == 0, "waitingSince": tr.iso(j.updated_at)})
    return {"count": len(items), "total": total, "pending": items}


def base_map(settings) -> dict[str, Any] | None:
    """The tiles the review page draws under its map (``SIS_REVIEW_TILES_URL``), loaded by the reviewer's
    browser from the tile server, never through the coordinator; None when none is configured."""
    if not settings.review_tiles_url:
        return None
    return {"tiles": settings.review_tiles_url, "attribution": settings.review_tiles_attribution,
            "attributionUrl": settings.review_tiles_attribution_url or None, "maxZoom": 19}


def _intersects(a, b) -> bool:
    """Whether two boxes meet, the first also taken a turn east or west: a job's area across 180 is
    written with longitudes running on past it (179.999 to 180.0007), and a box given on the
    -180 side met none of it."""
    return any(not (a[2] + k < b[0] or b[2] < a[0] + k or a[3] < b[1] or b[3] < a[1]) for k in (-360, 0, 360))


async def show(db, job_id: int) -> dict[str, Any]:
    """One job with everything a reviewer needs to decide: its facts (canonical result),
    per-photo measurements, every replica and how far it agrees, validation notes, and
    photo references (links to the provider; the coordinator never fetches them)."""
    async with db.read() as s:
        job = await s.get(SweepJob, job_id)
        if job is None:
            raise NotFound("no such job", {"jobId": job_id})
        results = list((await s.execute(select(SweepResult).where(SweepResult.job_id == job_id)
                                        .order_by(SweepResult.id))).scalars())
        node_ids = sorted({r.node_id for r in results})
        nodes = {n.id: n for n in (await s.execute(select(Node).where(Node.id.in_(node_ids)))).scalars()} \
            if node_ids else {}
        history = list((await s.execute(select(SweepTransition).where(
            SweepTransition.subject == "job", SweepTransition.subject_id == str(job_id))
            .order_by(SweepTransition.id))).scalars())
        request = await s.get(SweepRequest, job.sweep_id)
        line = await jobs.lineage(s, job_id)
    canonical = next((r for r in results if r.lease_id == job.canonical_lease_id), None)
    canon = Result.from_dict(canonical.body) if canonical is not None and canonical.body else None
    replicas = []
    for r in results:
        entry: dict[str, Any] = {"resultId": r.id, "nodeId": r.node_id, "state": r.state,
                                 "canonical": r.lease_id == job.canonical_lease_id, "facts": r.facts,
                                 "engineBuild": r.engine_build, "receivedAt": tr.iso(r.received_at),
                                 "validation": {"passed": r.state not in tr.RESULT_REFUSED, "reasons": list(r.reasons)}}
        n = nodes.get(r.node_id)
        if n is not None:
            entry["node"] = {"trusted": n.trusted, "streak": n.streak, "validTotal": n.valid_total,
                             "invalidTotal": n.invalid_total, "revoked": n.revoked_at is not None}
        if canon is not None and r.body and r.lease_id != job.canonical_lease_id:
            entry["agreement"] = agreement.compare(canon.facts, Result.from_dict(r.body).facts)
        elif r.lease_id == job.canonical_lease_id:
            entry["agreement"] = None
        replicas.append(entry)
    photos = [{"id": p["id"], "lat": p["lat"], "lon": p["lon"], "heading": p.get("heading"),
               "capturedAt": p["capturedAt"], "url": p["url"], "license": p["license"],
               "provider": p["provider"], "width": p["width"], "height": p["height"]} for p in job.photos]
    notes = [f"{h.at and tr.iso(h.at)} {h.from_state or '-'} -> {h.to_state} by {h.actor}: {h.reason}"
             for h in history]
    return {
        "jobId": job.id, "wireId": jobs.wire_id(job.id), "sweepId": job.sweep_id, "state": job.state,
        "reason": job.reason, "area": job.area, "centre": {"lat": job.center_lat, "lon": job.center_lon},
        "radiusM": job.radius_m, "cells": list(job.cells), "quorum": job.quorum,
        "request": None if request is None else {"id": request.id, "lat": request.lat, "lon": request.lon,
                                                 "radiusM": request.radius_m, "state": request.state},
        "facts": [f.to_dict() for f in canon.facts] if canon else [],
        "measurements": [m.to_dict() for m in canon.measurements] if canon else [],
        "skipped": [k.to_dict() for k in canon.skipped] if canon else [],
        "engine": {"version": canon.engine_version, "build": canon.engine_build, "device": canon.device,
                   "timings": canon.timings.to_dict()} if canon else None,
        "replicas": replicas, "validationNotes": notes, "photos": photos,
        "lineage": {"generation": line.generation,
                    "reissueOf": None if line.parent is None else jobs.wire_id(line.parent),
                    "notOfferedTo": sorted(line.excluded)},
    }


def _reason(reason: Any, required: bool) -> str:
    if reason is None or (isinstance(reason, str) and not reason.strip()):
        if required:
            raise BadParameter("a reason is required", {"parameter": "reason"})
        return ""
    if not isinstance(reason, str) or len(reason) > MAX_REASON:
        raise BadParameter(f"'reason' must be text of at most {MAX_REASON} characters", {"parameter": "reason"})
    return reason.strip()


async def _send_again(s, settings, job: SweepJob, actor: str, reason: str, reissue: bool, now) -> dict[str, Any]:
    """What follows a rejection, in its transaction: the ground reissued (a new job closed
    to the nodes whose results went to the reviewer, and to those its forebears were
    closed to) or, past the limit or without reissue, parked. Parked ground's cells are
    parked once no other job holding their photos is open (``coverage.settle``); until
    then they stay queued (``waiting``), and the request already says why. Returns what
    the verdict's answer says of it."""
    line = await jobs.lineage(s, job.id)
    limit = settings.reissue_max
    if reissue and line.generation < limit:
        rejected_nodes = set((await s.execute(select(SweepResult.node_id).where(
            SweepResult.job_id == job.id, SweepResult.state == tr.RESULT_ACCEPTED))).scalars())
        exclude = line.excluded | rejected_nodes
        generation = line.generation + 1
        new_id = await jobs.reissue(s, job, generation, exclude, now)
        closed = ", ".join(f"node:{n}" for n in sorted(exclude)) or "no node"
        await tr.record(s, tr.row("job", new_id, None, tr.JOB_QUEUED, actor,
                                  f"reissue {generation} of {limit} of the ground of rejected job {job.id}, "
                                  f"not offered to {closed}: {reason}", now))
        job.reason = f"{job.reason}; reissued as {jobs.wire_id(new_id)} (reissue {generation} of {limit})"
        return {"reissued": {"jobId": new_id, "wireId": jobs.wire_id(new_id), "generation": generation,
                             "reissueMax": limit, "notOfferedTo": sorted(exclude)}}
    if reissue:
        why = (f"rejected {line.generation + 1} times, past the reissue limit (SIS_REISSUE_MAX = {limit}); "
               f"last reason: {reason}")
    else:
        why = f"rejected without reissue: {reason}"
    job.reason = f"{job.reason}{coverage.PARKED_MARK}{why}"
    settled = await coverage.settle(s, job.sweep_id, [int(c, 16) for c in job.cells], actor=actor,
                                    reason=f"job {job.id} {why}", at=now, why=why)
    parked: dict[str, Any] = {"reason": why, "cells": len(settled.parked)}
    if settled.waiting:
        parked["waiting"] = len(settled.waiting)
    return {"parked": parked}


async def _decide(sweeps, reviewer: ReviewerKey, job_id: int, approve: bool, reason: str,
                  *, only_unanimous: bool = False, reissue: bool = True) -> dict[str, Any] | None:
    db = sweeps.db
    actor = _actor(reviewer)

    async def run() -> dict[str, Any] | None:
        now = tr.utcnow()
        async with db.write() as s:
            job = await jobs.locked_job(s, db, job_id, tr.JOB_IN_REVIEW, "the job is {state}, not waiting for review")
            await jobs.lock_request(s, db, job.sweep_id)
            if only_unanimous:
                dissent = (await s.execute(select(func.count()).select_from(SweepResult).where(
                    SweepResult.job_id == job_id, SweepResult.state == tr.RESULT_OUTVOTED))).scalar_one()
                if dissent:
                    return None
            out: dict[str, Any] = {"jobId": job.id, "sweepId": job.sweep_id}
            if approve:
                canonical = (await s.execute(select(SweepResult).where(
                    SweepResult.lease_id == job.canonical_lease_id))).scalar_one_or_none() \
                    if job.canonical_lease_id else None
                if canonical is None or not canonical.body:
                    raise Conflict("the job has no agreed result to publish", {"jobId": job_id})
                result = Result.from_dict(canonical.body)
                facts, measurements = await publish(s, job, result, now)
                job.state = tr.JOB_APPROVED
                why = reason or "approved"
                # Only ground the result read is covered: a cell none of whose photos was read
                # (all skipped) is swept again by a job of its own, never called seen. And a cell
                # read is covered only once every job holding its photos is approved (a split
                # cell's siblings): until then it waits, and parks if one of them parked.
                read = jobs.read_cells(job, {m.photo_id for m in result.measurements})
                cells = {int(c, 16) for c in job.cells}
                settled = await coverage.settle(s, job.sweep_id, cells & read, actor=actor,
                                                reason=f"job {job.id} approved", at=now)
                out.update(state=job.state, factsPublished=facts, measurementsPublished=measurements,
                           cellsCovered=len(settled.covered), requestsCovered=settled.requests_covered)
                if settled.waiting:
                    out.update(cellsWaiting=len(settled.waiting))
                if settled.parked:
                    out.update(cellsParked=len(settled.parked), parkedReason=settled.public_reason)
                if cells - read:
                    again = await jobs.sweep_again(s, job, cells - read, now)
                    await tr.record(s, tr.row("job", again, None, tr.JOB_QUEUED, actor,
                                              f"job {job.id} approved, but its result read no photo in "
                                              f"{len(cells - read)} of its cells: they are swept again", now))
                    out.update(cellsSweptAgain=len(cells - read), sweptAgainBy=again)
            else:
                job.state = tr.JOB_REJECTED
                why = reason
                out.update(state=job.state)
            job.reason = None if approve else f"rejected by {actor}: {reason}"
            job.updated_at = now
            await tr.record(s, tr.row("job", job.id, tr.JOB_IN_REVIEW, job.state, actor, why, now))
            if not approve:
                out.update(await _send_again(s, sweeps.settings, job, actor, reason, reissue, now))
            return out

    return await retrying(run)


async def approve(sweeps, reviewer: ReviewerKey, job_id: int, reason: Any = None) -> dict[str, Any]:
    return await _decide(sweeps, reviewer, job_id, True, _reason(reason, required=False))


async def reject(sweeps, reviewer: ReviewerKey, job_id: int, reason: Any, reissue: Any = True) -> dict[str, Any]:
    """Reject a job with its reason. ``reissue`` (default True) sweeps its ground again by
    other nodes, up to ``reissue_max`` times; False parks it at once (ground that should
    not be swept)."""
    if reissue is None:
        reissue = True
    if not isinstance(reissue, bool):
        raise BadParameter("'reissue' must be true or false", {"parameter": "reissue"})
    return await _decide(sweeps, reviewer, job_id, False, _reason(reason, required=True), reissue=reissue)


async def approve_sweep(sweeps, reviewer: ReviewerKey, sweep_id: str, reason: Any = None) -> dict[str, Any]:
    """Approve every waiting job of a sweep whose replicas agree (no valid replica was
    outvoted). Jobs with a dissenting replica are left for a look one by one. ``notInReview``
    counts the sweep's other jobs by state: a sweep approved before its nodes' results are all
    in answered empty lists, and nothing said that its jobs still waited for them."""
    why = _reason(reason, required=False) or f"sweep {sweep_id} approved whole: replicas agree"
    async with sweeps.db.read() as s:
        if await s.get(SweepRequest, sweep_id) is None:
            raise NotFound("no such sweep", {"sweepId": sweep_id})
        ids = list((await s.execute(select(SweepJob.id).where(SweepJob.sweep_id == sweep_id,
                                                               SweepJob.state == tr.JOB_IN_REVIEW)
                                    .order_by(SweepJob.id))).scalars())
        others = dict((await s.execute(select(SweepJob.state, func.count()).where(
            SweepJob.sweep_id == sweep_id, SweepJob.state != tr.JOB_IN_REVIEW).group_by(SweepJob.state))).all())
    approved, left = [], []
    for job_id in ids:
        try:
            out = await _decide(sweeps, reviewer, job_id, True, why, only_unanimous=True)
        except Conflict:        # decided by someone else meanwhile
            continue
        if out is None:
            left.append({"jobId": job_id, "why": "a valid replica disagreed with the quorum; review it alone"})
        else:
            approved.append(out)
    return {"sweepId": sweep_id, "approved": approved, "left": left,
            "factsPublished": sum(a["factsPublished"] for a in approved),
            "notInReview": {state: others[state] for state in sorted(others)}}
