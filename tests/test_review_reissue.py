"""Rejected ground goes back to the queue: a rejection reissues the job's photos as a new
job that the nodes whose results were rejected are never offered, until the reissue
limit parks the ground with its reason in the public queue. (Before this, a rejected
job's cells stayed ``queued`` and were never swept again.)"""
from __future__ import annotations

from types import SimpleNamespace

from sqlalchemy import select

from coordinator.core.db.models import CoverageCell, SweepJob, SweepTransition
from coordinator.review import keys
from coordinator.sweeps import leases
from coordinator.sweeps import transitions as tr
from coordinator.sweeps.service import sweeps_of
from tests.support import stop_coordinator
from tests.test_access_embed import sis
from tests.test_review_kit import RADIUS, photo_in_every_cell, reviewer, rich_result
from tests.test_sweeps_kit import CENTRE, SimNode, enrolled, photos, request_sweep, start  # noqa: F401

SEEN = f"/earth/seen?lat={CENTRE[0]}&lon={CENTRE[1]}&radius={RADIUS}"


async def sweep_pair(c, a: SimNode, b: SimNode, truth) -> list[int]:
    """Two untrusted nodes sweep every queued job they are offered; returns the jobs that went to review."""
    done = []
    while True:
        la = await a.lease()
        if la is None:
            return done
        lb = await b.lease()
        assert lb is not None and lb["job"]["jobId"] == la["job"]["jobId"]
        assert (await a.submit(la["lease"]["leaseId"], rich_result(a, la, truth))).status == 200
        out = await b.submit(lb["lease"]["leaseId"], rich_result(b, lb, truth))
        assert out.status == 200 and out.json()["jobState"] == "in_review", out.body
        done.append(int(la["job"]["jobId"].removeprefix("job-")))


async def test_a_rejected_jobs_ground_is_swept_again_by_other_nodes_and_approved(db_url, photos):
    shot = photo_in_every_cell(photos)
    truth = {p.id: p for p in photos.photos}
    c = await start(db_url, photos)
    try:
        r = await request_sweep(c, radius=RADIUS)
        assert r.json()["queued"] is True, r.body
        request = r.json()["request"]
        a, b = await enrolled(c, 2)
        first = await sweep_pair(c, a, b, truth)
        assert len(first) == 1
        auth = await reviewer(c)
        r = await c.post(f"/review/v1/jobs/{first[0]}/reject", {"reason": "the photos show a car park"},
                         headers=auth)
        assert r.status == 200, r.body
        out = r.json()
        assert out["state"] == "rejected"
        again = out["reissued"]
        assert again["generation"] == 1 and again["reissueMax"] == 2
        assert again["notOfferedTo"] == sorted([a.node_id, b.node_id])
        assert again["jobId"] != first[0]

        # The rejected nodes are never offered the reissued job; the cells stay queued under it.
        assert await a.lease() is None and await b.lease() is None
        async with c.services.db.read() as s:
            job = await s.get(SweepJob, again["jobId"])
            old = await s.get(SweepJob, first[0])
            cells = list((await s.execute(select(CoverageCell).where(
                CoverageCell.cell.in_([int(x, 16) for x in job.cells])))).scalars())
            made = (await s.execute(select(SweepTransition).where(
                SweepTransition.subject == "job", SweepTransition.subject_id == str(job.id)))).scalars().all()
        assert job.state == "queued" and job.photos == old.photos and job.cells == old.cells
        assert job.sweep_id == request["id"] and job.quorum == 1
        assert {x.state for x in cells} == {"queued"} and {x.request_id for x in cells} == {request["id"]}
        assert [(m.from_state, m.to_state) for m in made] == [(None, "queued")]
        assert made[0].actor.startswith("reviewer:") and "the photos show a car park" in made[0].reason
        assert a.node_id in made[0].reason and b.node_id in made[0].reason
        assert "reissued as job-" in old.reason
        assert (await c.get("/earth/sweep-queue")).json()["requests"][0]["state"] == "queued"

        # The one-statement claim (used past the rows a batch reads) honours the exclusion too.
        sw = sweeps_of(c.services)
        async with sw.db.write_core() as s:
            for node in (a, b):
                who = SimpleNamespace(id=node.node_id, trusted=False)
                assert await leases._claim_one(s, sw.db, who, tr.utcnow(), sw.settings, []) is None

        c2, d2 = await enrolled(c, 2)
        second = await sweep_pair(c, c2, d2, truth)
        assert second == [again["jobId"]]
        shown = (await c.get(f"/review/v1/jobs/{again['jobId']}", headers=auth)).json()
        assert shown["lineage"] == {"generation": 1, "reissueOf": f"job-{first[0]}",
                                    "notOfferedTo": sorted([a.node_id, b.node_id])}
        r = await c.post(f"/review/v1/jobs/{again['jobId']}/approve", {"reason": "right this time"}, headers=auth)
        assert r.status == 200 and r.json()["factsPublished"] > 0, r.body
        seen = (await c.get(SEEN)).json()
        assert seen["covered"] is True and seen["count"] > 0
        queue = (await c.get("/earth/sweep-queue?state=covered")).json()
        assert [x["id"] for x in queue["requests"]] == [request["id"]]
        assert len(shot) == len(job.photos)

        rc, text, err = await sis("jobs", "list", "--database", db_url)
        assert rc == 0, err
        lines = {ln.split()[0]: ln for ln in text.splitlines() if ln.startswith("job-")}
        assert f"reissued as job-{again['jobId']}" in lines[f"job-{first[0]}"]
        assert f"from job-{first[0]}, reissue 1" in lines[f"job-{again['jobId']}"]
    finally:
        await stop_coordinator(c)


async def _one_trusted_pass(c, node: SimNode, truth) -> int:
    got = await node.lease()
    assert got is not None
    out = await node.submit(got["lease"]["leaseId"], rich_result(node, got, truth))
    assert out.status == 200 and out.json()["jobState"] == "in_review", out.body
    return int(got["job"]["jobId"].removeprefix("job-"))


async def test_the_reissue_limit_parks_the_ground_with_its_reason_in_the_public_queue(db_url, photos):
    photo_in_every_cell(photos)
    truth = {p.id: p for p in photos.photos}
    c = await start(db_url, photos, reissue_max=1)
    try:
        r = await request_sweep(c, radius=RADIUS)
        request = r.json()["request"]
        n1, n2, n3 = await enrolled(c, 3, trusted=True)
        auth = await reviewer(c)
        job = await _one_trusted_pass(c, n1, truth)
        out = (await c.post(f"/review/v1/jobs/{job}/reject", {"reason": "blurred"}, headers=auth)).json()
        assert out["reissued"]["generation"] == 1 and out["reissued"]["notOfferedTo"] == [n1.node_id]
        assert await n1.lease() is None
        job2 = await _one_trusted_pass(c, n2, truth)
        assert job2 == out["reissued"]["jobId"]
        out = (await c.post(f"/review/v1/jobs/{job2}/reject", {"reason": "still blurred"}, headers=auth)).json()
        assert "reissued" not in out and out["parked"]["cells"] > 0
        assert "past the reissue limit" in out["parked"]["reason"] and "still blurred" in out["parked"]["reason"]
        assert await n3.lease() is None                       # nothing was made again

        queue = (await c.get("/earth/sweep-queue?state=parked")).json()
        assert [x["id"] for x in queue["requests"]] == [request["id"]]
        shown = queue["requests"][0]
        assert shown["state"] == "parked" and "past the reissue limit" in shown["reason"]
        assert "reviewer" not in shown["reason"] and "requester" not in str(shown)
        assert (await c.get("/earth/sweep-queue")).json()["requests"] == []   # no longer queued

        async with c.services.db.read() as s:
            log = (await s.execute(select(SweepTransition).where(SweepTransition.to_state == "parked")
                                   .order_by(SweepTransition.id))).scalars().all()
            cells = (await s.execute(select(CoverageCell.state).distinct())).scalars().all()
        assert cells == ["parked"]
        assert {x.subject for x in log} == {"cell", "request"}
        assert all(x.actor.startswith("reviewer:") and "still blurred" in x.reason for x in log)

        # Asking again is no way around the verdict: it merges into the parked request.
        again = (await request_sweep(c, radius=RADIUS)).json()
        assert again["merged"] is True and again["request"]["state"] == "parked"
        assert any("parked" in cav for cav in again["caveats"])
        assert await n3.lease() is None

        # An operator puts it back: a new job, closed to the nodes already rejected, the count afresh.
        rc, text, err = await sis("jobs", "requeue", f"job-{job2}", "--reason", "camera fixed", "--database", db_url)
        assert rc == 0, err
        assert "queued again as job-" in text
        new = int(text.split("queued again as job-")[1].split()[0])
        assert await n1.lease() is None and await n2.lease() is None
        assert await _one_trusted_pass(c, n3, truth) == new
        shown = (await c.get("/earth/sweep-queue")).json()["requests"]
        assert [x["id"] for x in shown] == [request["id"]] and "reason" not in shown[0]
        rc, text, err = await sis("jobs", "requeue", f"job-{job2}", "--database", db_url)
        assert rc == 1 and "already reissued" in err
        rc, text, err = await sis("jobs", "list", "--database", db_url)
        assert f"from job-{job2}, requeued" in text
    finally:
        await stop_coordinator(c)


async def test_a_rejection_without_reissue_parks_the_ground_at_once(sqlite_url, photos):
    photo_in_every_cell(photos)
    truth = {p.id: p for p in photos.photos}
    c = await start(sqlite_url, photos)
    try:
        await request_sweep(c, radius=RADIUS)
        n1, n2 = await enrolled(c, 2, trusted=True)
        job = await _one_trusted_pass(c, n1, truth)
        _, secret = await keys.create(c.services.db, "Pat")
        auth = {"Authorization": f"Bearer {secret}"}
        bad = await c.post(f"/review/v1/jobs/{job}/reject", {"reason": "x", "reissue": "maybe"}, headers=auth)
        assert bad.status == 400 and bad.json()["error"]["details"]["parameter"] == "reissue"
        r = await c.post(f"/review/v1/jobs/{job}/reject", {"reason": "a private road: not to be swept",
                                                           "reissue": False}, headers=auth)
        assert r.status == 200, r.body
        out = r.json()
        assert out["parked"]["reason"] == "rejected without reissue: a private road: not to be swept"
        assert await n2.lease() is None
        shown = (await c.get("/earth/sweep-queue?state=all")).json()["requests"][0]
        assert shown["state"] == "parked" and "a private road" in shown["reason"]
    finally:
        await stop_coordinator(c)
