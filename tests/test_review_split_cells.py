"""One H3 cell holding more photos than ``SIS_JOB_MAX_PHOTOS`` is split over several jobs
("siblings": the same sweep request, each with that one cell). A verdict on one of them
decides the cell only once every job holding its photos is decided: while one is still
queued, leased or in review (or the reissue of a rejected one is), the cell stays
``queued``; then it is ``covered`` if every sibling's ground ended approved, ``parked``
if any ended parked. Before this, rejecting one sibling without reissue parked the cell
while the others went on, and approving one covered the cell (and the request) while
another was still leased."""
from __future__ import annotations

import asyncio
from datetime import datetime, timedelta, timezone

import h3
import pytest
from sqlalchemy import select

from coordinator.core.db.models import CoverageCell, SweepJob, SweepTransition
from coordinator.demo.photos import FakePhoto, FakePhotoProvider
from coordinator.sweeps import coverage
from tests.support import Coordinator, stop_coordinator
from tests.test_access_embed import sis
from tests.test_review_kit import RADIUS, reviewer, rich_result
from tests.test_sweeps_kit import CENTRE, SimNode, enrolled, photos, request_sweep, start  # noqa: F401

SEEN = f"/earth/seen?lat={CENTRE[0]}&lon={CENTRE[1]}&radius={RADIUS}"
CELL = coverage.point_cell(*CENTRE)
PER_JOB = 3
IN_CELL = 7                 # 3 + 3 + 1: three sibling jobs over the one cell


def photos_in_one_cell(provider: FakePhotoProvider, n: int = IN_CELL) -> list[FakePhoto]:
    """``n`` photos standing in the centre's cell, a few decimetres apart, and none elsewhere."""
    la, lo = h3.cell_to_latlng(coverage.cell_text(CELL))
    t0 = datetime(2026, 6, 1, 8, tzinfo=timezone.utc)
    out = []
    for i in range(n):
        p = FakePhoto(id=f"split-{i}", lat=round(la + i * 3e-6, 7), lon=round(lo, 7), heading=90.0,
                      captured_at=(t0 + timedelta(seconds=i)).isoformat(), road_width_m=6.0 + i % 3, seed=i)
        assert coverage.point_cell(p.lat, p.lon) == CELL
        out.append(provider.add(p))
    return out


async def split_sweep(db_url: str, provider: FakePhotoProvider, **kw) -> tuple[Coordinator, str, list[int], dict]:
    """A coordinator whose one request's cell is split over three jobs: (coordinator, request
    id, the sibling job ids oldest first, the photos by id)."""
    photos_in_one_cell(provider)
    c = await start(db_url, provider, job_max_photos=PER_JOB, **kw)
    r = await request_sweep(c, radius=RADIUS)
    assert r.status == 200 and r.json()["queued"] is True, r.body
    assert r.json()["jobs"] == 3, r.body
    async with c.services.db.read() as s:
        jobs = list((await s.execute(select(SweepJob).order_by(SweepJob.id))).scalars())
    assert [j.cells for j in jobs] == [[coverage.cell_text(CELL)]] * 3
    assert [len(j.photos) for j in jobs] == [3, 3, 1]
    return c, r.json()["request"]["id"], [j.id for j in jobs], {p.id: p for p in provider.photos}


async def lease(node: SimNode, expect: int) -> dict:
    got = await node.lease()
    assert got is not None and got["job"]["jobId"] == f"job-{expect}", got
    return got


async def swept(node: SimNode, expect: int, truth) -> int:
    """The node (trusted: a quorum of one) sweeps the job it is offered, which must be ``expect``:
    it waits in review."""
    got = await lease(node, expect)
    out = await node.submit(got["lease"]["leaseId"], rich_result(node, got, truth))
    assert out.status == 200 and out.json()["jobState"] == "in_review", out.body
    return expect


async def cell_state(c: Coordinator) -> str:
    async with c.services.db.read() as s:
        return (await s.execute(select(CoverageCell.state).where(CoverageCell.cell == CELL))).scalar_one()


async def shown(c: Coordinator, request_id: str) -> dict:
    """The request as the public queue shows it."""
    found = [x for x in (await c.get("/earth/sweep-queue?state=all")).json()["requests"] if x["id"] == request_id]
    assert len(found) == 1
    return found[0]


async def approve(c: Coordinator, auth, job: int, status: int = 200) -> dict:
    r = await c.post(f"/review/v1/jobs/{job}/approve", {"reason": "looks right"}, headers=auth)
    assert r.status == status, r.body
    return r.json()


async def reject(c: Coordinator, auth, job: int, reason: str, reissue: bool = True) -> dict:
    r = await c.post(f"/review/v1/jobs/{job}/reject", {"reason": reason, "reissue": reissue}, headers=auth)
    assert r.status == 200, r.body
    return r.json()


async def test_rejecting_one_sibling_without_reissue_leaves_the_cell_queued_while_the_others_go_on(db_url, photos):
    c, request, (j1, j2, j3), truth = await split_sweep(db_url, photos)
    try:
        n1, n2 = await enrolled(c, 2, trusted=True)
        auth = await reviewer(c)
        await swept(n1, j1, truth)
        held = await lease(n2, j2)                          # a sibling still leased
        out = await reject(c, auth, j1, "a private yard", reissue=False)
        # The cell's other photos are still being swept: it is neither parked nor is its request.
        assert await cell_state(c) == "queued"
        q = await shown(c, request)
        assert q["state"] == "queued" and "a private yard" in q["reason"]
        assert out["parked"]["reason"] == "rejected without reissue: a private yard"
        assert out["parked"]["cells"] == 0 and out["parked"]["waiting"] == 1
        assert q["progress"] == {"jobsDone": 0, "jobsInReview": 0, "jobsTotal": 3, "jobsFailed": 0}
        # The siblings go on: the leased one is submitted, the queued one still offered.
        r = await n2.submit(held["lease"]["leaseId"], rich_result(n2, held, truth))
        assert r.status == 200 and r.json()["jobState"] == "in_review", r.body
        await swept(n1, j3, truth)
        assert (await shown(c, request))["progress"]["jobsInReview"] == 2
    finally:
        await stop_coordinator(c)


async def test_approving_one_sibling_leaves_the_cell_queued_while_another_is_leased(db_url, photos):
    c, request, (j1, j2, j3), truth = await split_sweep(db_url, photos)
    try:
        n1, n2 = await enrolled(c, 2, trusted=True)
        auth = await reviewer(c)
        await swept(n1, j1, truth)
        await lease(n2, j2)                                 # leased, not swept yet; j3 still queued
        out = await approve(c, auth, j1)
        assert out["factsPublished"] > 0
        assert await cell_state(c) == "queued"
        q = await shown(c, request)
        assert q["state"] == "queued" and "reason" not in q
        assert out["cellsCovered"] == 0 and out["cellsWaiting"] == 1 and out["requestsCovered"] == []
        assert q["progress"] == {"jobsDone": 1, "jobsInReview": 0, "jobsTotal": 3, "jobsFailed": 0}
        assert (await c.get(SEEN)).json()["covered"] is False
    finally:
        await stop_coordinator(c)


async def test_approving_a_sibling_after_another_was_parked_neither_covers_nor_parks_while_one_is_leased(
        db_url, photos):
    c, request, (j1, j2, j3), truth = await split_sweep(db_url, photos)
    try:
        n1, n2 = await enrolled(c, 2, trusted=True)
        auth = await reviewer(c)
        await swept(n1, j1, truth)
        await swept(n1, j2, truth)
        await lease(n2, j3)                                 # the last sibling is leased
        await reject(c, auth, j1, "faces in the photos", reissue=False)
        out = await approve(c, auth, j2)
        assert await cell_state(c) == "queued"
        q = await shown(c, request)
        assert q["state"] == "queued"
        assert out["cellsCovered"] == 0 and out["requestsCovered"] == []
        assert (await c.get(SEEN)).json()["covered"] is False
    finally:
        await stop_coordinator(c)


async def test_every_sibling_approved_covers_the_cell_and_the_request(db_url, photos):
    c, request, (j1, j2, j3), truth = await split_sweep(db_url, photos)
    try:
        (n1,) = await enrolled(c, 1, trusted=True)
        auth = await reviewer(c)
        for j in (j1, j2, j3):
            await swept(n1, j, truth)
        assert (await approve(c, auth, j1))["cellsWaiting"] == 1
        assert (await approve(c, auth, j2))["cellsWaiting"] == 1
        assert await cell_state(c) == "queued" and (await shown(c, request))["state"] == "queued"
        out = await approve(c, auth, j3)
        assert out["cellsCovered"] == 1 and out["requestsCovered"] == [request]
        assert "cellsWaiting" not in out
        assert await cell_state(c) == "covered"
        q = await shown(c, request)
        assert q["state"] == "covered" and q["progress"]["jobsDone"] == 3
        seen = (await c.get(SEEN)).json()
        assert seen["covered"] is True and seen["count"] > 0
        async with c.services.db.read() as s:
            log = (await s.execute(select(SweepTransition).where(
                SweepTransition.subject == "cell", SweepTransition.subject_id == str(CELL))
                .order_by(SweepTransition.id))).scalars().all()
        assert [(x.from_state, x.to_state) for x in log] == [(None, "queued"), ("queued", "covered")]
        assert log[-1].reason == f"job {j3} approved"
    finally:
        await stop_coordinator(c)


@pytest.mark.parametrize("parked_first", [True, False], ids=["parked-first", "parked-last"])
async def test_a_sibling_parked_and_the_rest_approved_parks_the_cell_and_the_request_with_a_reason(
        db_url, photos, parked_first):
    """Both orders: the parked sibling decided first (the last approval parks the cell) or last
    (its rejection parks the cell)."""
    c, request, (j1, j2, j3), truth = await split_sweep(db_url, photos)
    try:
        (n1,) = await enrolled(c, 1, trusted=True)
        auth = await reviewer(c)
        for j in (j1, j2, j3):
            await swept(n1, j, truth)
        if parked_first:
            out = await reject(c, auth, j2, "a school yard", reissue=False)
            assert out["parked"]["cells"] == 0 and out["parked"]["waiting"] == 1
            assert (await approve(c, auth, j1))["cellsWaiting"] == 1
            assert await cell_state(c) == "queued"
            out = await approve(c, auth, j3)
            assert out["cellsCovered"] == 0 and out["cellsParked"] == 1 and out["requestsCovered"] == []
            assert "a school yard" in out["parkedReason"]
            decided_by = j3
        else:
            await approve(c, auth, j1)
            await approve(c, auth, j3)
            assert await cell_state(c) == "queued"
            out = await reject(c, auth, j2, "a school yard", reissue=False)
            assert out["parked"]["cells"] == 1 and "waiting" not in out["parked"]
            decided_by = j2
        assert await cell_state(c) == "parked"
        q = await shown(c, request)
        assert q["state"] == "parked"
        assert "rejected without reissue: a school yard" in q["reason"]
        assert "not measured" in q["reason"] and "reviewer" not in q["reason"]
        assert q["progress"] == {"jobsDone": 2, "jobsInReview": 0, "jobsTotal": 3, "jobsFailed": 0}
        assert (await c.get(SEEN)).json()["covered"] is False
        assert (await c.get("/earth/sweep-queue?state=covered")).json()["requests"] == []
        async with c.services.db.read() as s:
            log = (await s.execute(select(SweepTransition).where(SweepTransition.to_state == "parked")
                                   .order_by(SweepTransition.id))).scalars().all()
        assert [(x.subject, x.from_state) for x in log] == [("cell", "queued"), ("request", "queued")]
        assert all(x.actor.startswith("reviewer:") for x in log)
        assert f"job {decided_by}" in log[0].reason and "a school yard" in log[0].reason
    finally:
        await stop_coordinator(c)


async def test_a_rejected_sibling_reissued_and_then_approved_covers_the_cell(db_url, photos):
    c, request, (j1, j2, j3), truth = await split_sweep(db_url, photos)
    try:
        n1, n2 = await enrolled(c, 2, trusted=True)
        auth = await reviewer(c)
        for j in (j1, j2, j3):
            await swept(n1, j, truth)
        out = await reject(c, auth, j2, "blurred")
        again = out["reissued"]["jobId"]
        assert out["reissued"]["notOfferedTo"] == [n1.node_id]
        await approve(c, auth, j1)
        out = await approve(c, auth, j3)
        assert out["cellsWaiting"] == 1                     # the reissue of j2 is still queued
        assert await cell_state(c) == "queued" and (await shown(c, request))["state"] == "queued"
        assert await n1.lease() is None
        await swept(n2, again, truth)
        out = await approve(c, auth, again)
        assert out["cellsCovered"] == 1 and out["requestsCovered"] == [request]
        assert await cell_state(c) == "covered"
        assert (await c.get(SEEN)).json()["covered"] is True
    finally:
        await stop_coordinator(c)


async def test_an_operator_requeues_a_parked_sibling_waiting_or_parked_and_the_cell_follows(db_url, photos):
    c, request, (j1, j2, j3), truth = await split_sweep(db_url, photos)
    try:
        n1, n2, n3 = await enrolled(c, 3, trusted=True)
        auth = await reviewer(c)
        for j in (j1, j2):
            await swept(n1, j, truth)
        # Parked while its siblings go on: the cell waits, and the operator can put it back already.
        await reject(c, auth, j1, "camera fogged", reissue=False)
        assert await cell_state(c) == "queued" and "camera fogged" in (await shown(c, request))["reason"]
        rc, text, err = await sis("jobs", "requeue", f"job-{j1}", "--reason", "lens cleaned", "--database", db_url)
        assert rc == 0, err
        first = int(text.split("queued again as job-")[1].split()[0])
        q = await shown(c, request)
        assert q["state"] == "queued" and "reason" not in q
        # Parked once every sibling is decided, then requeued: queued again, then covered.
        await swept(n1, j3, truth)
        assert await n1.lease() is None                     # the requeued job is closed to n1
        await swept(n2, first, truth)
        await reject(c, auth, first, "still fogged", reissue=False)
        await approve(c, auth, j2)
        assert await cell_state(c) == "queued"              # j3 still in review
        await approve(c, auth, j3)
        assert await cell_state(c) == "parked"
        q = await shown(c, request)
        assert q["state"] == "parked" and "still fogged" in q["reason"]
        rc, text, err = await sis("jobs", "requeue", f"job-{first}", "--reason", "new lens", "--database", db_url)
        assert rc == 0, err
        second = int(text.split("queued again as job-")[1].split()[0])
        assert await cell_state(c) == "queued"
        q = await shown(c, request)
        assert q["state"] == "queued" and "reason" not in q
        assert await n1.lease() is None and await n2.lease() is None
        await swept(n3, second, truth)
        out = await approve(c, auth, second)
        assert out["cellsCovered"] == 1 and out["requestsCovered"] == [request]
        assert await cell_state(c) == "covered"
        # A rejected sibling whose ground was swept since is not requeued again.
        rc, text, err = await sis("jobs", "requeue", f"job-{first}", "--database", db_url)
        assert rc == 1 and "already reissued" in err
    finally:
        await stop_coordinator(c)


async def test_the_last_two_siblings_decided_at_once_decide_the_cell(db_url, photos, monkeypatch):
    """An approval and a rejection of the last two open siblings, at the same time: each must see
    the other's outcome, or both leave the cell queued for ever (on PostgreSQL the verdicts lock
    the request; SQLite's write transactions hold the database). Each verdict dawdles before it
    reads the siblings, so that the two overlap. (Two approvals are also serialised by the seen
    layer's tile lock when their facts share a tile; a rejection publishes nothing.)"""
    read_siblings = coverage.ground

    async def slow_ground(*args, **kw):
        await asyncio.sleep(0.3)
        return await read_siblings(*args, **kw)

    c, request, (j1, j2, j3), truth = await split_sweep(db_url, photos)
    try:
        (n1,) = await enrolled(c, 1, trusted=True)
        auth = await reviewer(c)
        for j in (j1, j2, j3):
            await swept(n1, j, truth)
        await approve(c, auth, j1)
        monkeypatch.setattr(coverage, "ground", slow_ground)
        await asyncio.gather(approve(c, auth, j2), reject(c, auth, j3, "a car park", reissue=False))
        assert await cell_state(c) == "parked"
        q = await shown(c, request)
        assert q["state"] == "parked" and "a car park" in q["reason"]
    finally:
        await stop_coordinator(c)
