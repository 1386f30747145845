"""Replication and trust: untrusted nodes are checked against each other (quorum 2), a
disagreement calls a third replica, and trust is earned by consecutive accepted results."""
from __future__ import annotations

from sqlalchemy import select

from coordinator.core.db.models import SweepJob, SweepResult
from coordinator.sweeps.trust import TOLERANCE, results_agree
from sweep_engine.schema import FACT_KINDS, Fact
from tests.support import stop_coordinator
from tests.test_sweeps_kit import CENTRE, enrolled, node_row, photos, request_sweep, start, sweeps_db  # noqa: F401


async def one_job(c, photos) -> None:
    photos.scatter(*CENTRE, radius_m=100, n=3, seed=1)
    await request_sweep(c, radius=200)


async def test_a_job_leased_by_an_untrusted_node_is_given_to_a_second_node(sweeps_db, photos):
    await one_job(sweeps_db, photos)
    a, b, c = await enrolled(sweeps_db, 3)
    first = await a.lease()
    assert await a.lease() is None                    # never two replicas to one node
    second = await b.lease()
    assert second is not None and second["job"]["jobId"] == first["job"]["jobId"]
    assert await c.lease() is None                    # quorum 2: both replicas held
    r1 = await a.submit(first["lease"]["leaseId"], a.honest(first))
    assert r1.json()["resultState"] == "pending" and r1.json()["jobState"] == "leased"
    r2 = await b.submit(second["lease"]["leaseId"], b.honest(second))
    assert r2.json() == {"accepted": True, "resultState": "accepted", "jobState": "in_review", "reasons": [],
                         "duplicate": False}
    async with sweeps_db.services.db.read() as s:
        job = (await s.execute(select(SweepJob))).scalar_one()
        results = (await s.execute(select(SweepResult).order_by(SweepResult.id))).scalars().all()
    assert job.quorum == 2 and job.valid_results == 2 and job.canonical_lease_id == results[0].lease_id
    assert [r.state for r in results] == ["accepted", "accepted"]
    assert (await node_row(sweeps_db, a.node_id)).streak == 1


async def test_disagreeing_replicas_call_a_third_and_the_odd_one_out_loses_its_streak(sweeps_db, photos):
    await one_job(sweeps_db, photos)
    a, b, c = await enrolled(sweeps_db, 3)
    la, lb = await a.lease(), await b.lease()
    liar = b.honest(lb)
    for f in liar["facts"]:
        f["value"]["widthM"] = round(f["value"]["widthM"] * 1.6, 2)   # plausible, but wrong
    await a.submit(la["lease"]["leaseId"], a.honest(la))
    r = await b.submit(lb["lease"]["leaseId"], liar)
    assert r.status == 200 and r.json()["jobState"] == "queued"       # one more replica wanted
    lc = await c.lease()
    assert lc is not None and lc["job"]["jobId"] == la["job"]["jobId"]
    r = await c.submit(lc["lease"]["leaseId"], c.honest(lc))
    assert r.json()["jobState"] == "in_review"
    async with sweeps_db.services.db.read() as s:
        states = {x.node_id: x.state for x in (await s.execute(select(SweepResult))).scalars()}
        job = (await s.execute(select(SweepJob))).scalar_one()
    assert states == {a.node_id: "accepted", b.node_id: "outvoted", c.node_id: "accepted"}
    assert job.quorum == 3
    liar_row = await node_row(sweeps_db, b.node_id)
    assert liar_row.streak == 0 and liar_row.invalid_total == 1
    assert (await node_row(sweeps_db, c.node_id)).streak == 1


async def test_no_majority_parks_the_job_and_blames_nobody(db_url, photos):
    c = await start(db_url, photos, quorum_max=2)
    try:
        await one_job(c, photos)
        a, b = await enrolled(c, 2)
        la, lb = await a.lease(), await b.lease()
        other = b.honest(lb)
        for f in other["facts"]:
            f["value"]["widthM"] = round(f["value"]["widthM"] * 1.6, 2)
        await a.submit(la["lease"]["leaseId"], a.honest(la))
        r = await b.submit(lb["lease"]["leaseId"], other)
        assert r.json()["jobState"] == "failed"
        async with c.services.db.read() as s:
            job = (await s.execute(select(SweepJob))).scalar_one()
        assert "replicas disagree" in job.reason
        assert (await node_row(c, a.node_id)).invalid_total == 0
    finally:
        await stop_coordinator(c)


async def test_trust_is_earned_by_consecutive_accepted_results_then_replication_stops(db_url, photos):
    c = await start(db_url, photos, trust_streak=2, job_max_photos=1)
    try:
        photos.scatter(*CENTRE, radius_m=300, n=8, seed=2)
        await request_sweep(c, radius=300)
        a, b = await enrolled(c, 2)
        for _ in range(2):
            la, lb = await a.lease(), await b.lease()
            assert la["job"]["jobId"] == lb["job"]["jobId"]
            await a.submit(la["lease"]["leaseId"], a.honest(la))
            await b.submit(lb["lease"]["leaseId"], b.honest(lb))
        assert (await node_row(c, a.node_id)).trusted is True
        la, lb = await a.lease(), await b.lease()
        assert la["job"]["jobId"] != lb["job"]["jobId"]                    # no more replicas
        r = await a.submit(la["lease"]["leaseId"], a.honest(la))
        assert r.json()["jobState"] == "in_review"
        bad = b.honest(lb)
        bad["facts"][0]["lat"] += 0.02
        r = await b.submit(lb["lease"]["leaseId"], bad)
        assert r.status == 422
        row = await node_row(c, b.node_id)
        assert row.trusted is False and row.streak == 0
    finally:
        await stop_coordinator(c)


def fact(kind: str, value, dx_m: float = 0.0) -> Fact:
    return Fact(kind=kind, lon=CENTRE[1] + dx_m / 73_000, lat=CENTRE[0], value=value, unit="m",
                confidence="high" if value is not None else "unknown", basis="measured", source=["p"],
                timestamp="2026-06-01T08:00:00Z")


def test_replicas_are_compared_with_a_tolerance_per_fact_kind():
    assert set(TOLERANCE) == set(FACT_KINDS)
    assert results_agree([fact("roadway", {"widthM": 8.0})], [fact("roadway", {"widthM": 8.6}, dx_m=5)])
    assert not results_agree([fact("roadway", {"widthM": 8.0})], [fact("roadway", {"widthM": 9.5})])
    assert not results_agree([fact("roadway", {"widthM": 8.0})], [fact("roadway", {"widthM": 8.0}, dx_m=40)])
    assert not results_agree([fact("poles", {"heightM": 8.0})], [fact("roadway", {"widthM": 8.0})])
    assert results_agree([fact("vegetation", 10.0)], [fact("vegetation", 12.0)])      # loose for trees
    assert not results_agree([fact("poles", 10.0)], [fact("poles", 12.0)])            # tight for poles
    assert results_agree([fact("gates", None)], [fact("gates", None)])
    assert not results_agree([fact("gates", None)], [fact("gates", 2.0)])
    assert results_agree([], [])
    five = [fact("poles", {"heightM": 8.0}, dx_m=20 * i) for i in range(5)]
    assert results_agree(five, five[:4])          # 4 of 5 matched: agreement
    assert not results_agree(five, five[:3])
