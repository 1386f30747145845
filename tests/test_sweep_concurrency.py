"""32 simulated nodes leasing and submitting 1,000 jobs over HTTP, on SQLite and on
PostgreSQL: each job leased by exactly one node at a time (per replica), none lost, none
counted twice; each node asking for its jobs by the lease route, or, as the agent does,
with each result (``?next=1``, served by the submission's own transaction)."""
from __future__ import annotations

import asyncio
from collections import Counter, defaultdict

import pytest
from sqlalchemy import func, select

from coordinator.core.db.models import SweepJob, SweepLease, SweepResult
from tests.support import stop_coordinator
from tests.test_sweeps_kit import CENTRE, enrolled, photos, request_sweep, start  # noqa: F401

NODES = 32
# How a node asks for its next job: by the lease route, or with its result (?next=1).
ASKING = pytest.mark.parametrize("chained", [False, True], ids=["lease-route", "next=1"])


async def next_job(node, answer, chained: bool) -> dict | None:
    """The node's next lease: from its result's answer when it asked for one there (the
    lease route once that says no job waits), else from the lease route."""
    if chained and answer is not None and answer.status == 200 and answer.json().get("next") is not None:
        doc = answer.json()["next"]
        node.leases[doc["lease"]["leaseId"]] = doc
        return doc
    return await node.lease()


async def run_nodes(nodes, chained: bool = False) -> tuple[Counter, list[str]]:
    holders: dict[str, set[str]] = defaultdict(set)
    leased: Counter = Counter()
    violations: list[str] = []

    async def work(node) -> None:
        doc = await node.lease()
        while True:
            if doc is None:
                return
            jid = doc["job"]["jobId"]
            if node.node_id in holders[jid]:
                violations.append(f"{node.node_id} holds {jid} twice")
            if holders[jid]:
                violations.append(f"{jid} held by {sorted(holders[jid])} and {node.node_id} at once")
            holders[jid].add(node.node_id)
            leased[jid] += 1
            r = await node.submit(doc["lease"]["leaseId"], node.honest(doc), next_="1" if chained else None)
            if r.status != 200:
                violations.append(f"{jid}: submit answered {r.status} {r.body[:200]!r}")
            holders[jid].discard(node.node_id)
            doc = await next_job(node, r, chained)

    await asyncio.gather(*(work(n) for n in nodes))
    return leased, violations


@pytest.mark.slow
@ASKING
async def test_32_nodes_share_1000_jobs_each_leased_by_one_node_none_lost_none_twice(db_url, photos, chained):
    photos.scatter(*CENTRE, radius_m=950, n=1000, seed=11)
    c = await start(db_url, photos, job_max_photos=1, node_enrol_per_minute=NODES)
    try:
        body = (await request_sweep(c, radius=1000)).json()
        assert body["jobs"] == 1000
        nodes = await enrolled(c, NODES, trusted=True)
        leased, violations = await run_nodes(nodes, chained)
        assert violations == []
        assert len(leased) == 1000 and set(leased.values()) == {1}
        async with c.services.db.read() as s:
            states = dict((await s.execute(select(SweepJob.state, func.count()).group_by(SweepJob.state))).all())
            per_job = (await s.execute(select(SweepLease.job_id, func.count()).group_by(SweepLease.job_id))).all()
            results = (await s.execute(select(SweepResult.state, func.count()).group_by(SweepResult.state))).all()
            counted = (await s.execute(select(func.sum(SweepJob.valid_results)))).scalar_one()
            busy = Counter(n for (n,) in (await s.execute(select(SweepLease.node_id))).all())
        assert states == {"in_review": 1000}
        assert len(per_job) == 1000 and {n for _, n in per_job} == {1}
        assert dict(results) == {"accepted": 1000} and counted == 1000
        assert len(busy) > NODES // 2           # the work was actually shared
        q = (await c.get("/earth/sweep-queue")).json()["requests"][0]
        assert q["progress"] == {"jobsDone": 1000, "jobsInReview": 1000, "jobsTotal": 1000, "jobsFailed": 0}
    finally:
        await stop_coordinator(c)


@pytest.mark.slow
@ASKING
async def test_32_untrusted_nodes_give_each_job_exactly_two_replicas_from_different_nodes(db_url, photos, chained):
    photos.scatter(*CENTRE, radius_m=950, n=300, seed=12)
    # trust out of reach, so that no node earns its way out of replication during the run
    c = await start(db_url, photos, job_max_photos=1, trust_streak=10_000, node_enrol_per_minute=NODES)
    try:
        assert (await request_sweep(c, radius=1000)).json()["jobs"] == 300
        nodes = await enrolled(c, NODES)
        holders: dict[str, set[str]] = defaultdict(set)
        problems: list[str] = []
        done: set[str] = set()

        async def work(node) -> None:
            answer = None
            while len(done) < 300:
                doc = await next_job(node, answer, chained)
                answer = None
                if doc is None:
                    # What is left waits for another node's replica: a real node would come
                    # back after Retry-After; here, after the others have had a turn.
                    await asyncio.sleep(0.01)
                    continue
                jid = doc["job"]["jobId"]
                if len(holders[jid]) >= 2 or node.node_id in holders[jid]:
                    problems.append(f"{jid}: {sorted(holders[jid])} + {node.node_id}")
                holders[jid].add(node.node_id)
                r = answer = await node.submit(doc["lease"]["leaseId"], node.honest(doc),
                                               next_="1" if chained else None)
                if r.status != 200:
                    problems.append(f"{jid}: {r.status}")
                elif r.json()["jobState"] == "in_review":
                    if jid in done:
                        problems.append(f"{jid} went to review twice")
                    done.add(jid)

        await asyncio.gather(*(work(n) for n in nodes))
        assert problems == []
        async with c.services.db.read() as s:
            leases = (await s.execute(select(SweepLease.job_id, SweepLease.node_id))).all()
            states = dict((await s.execute(select(SweepJob.state, func.count()).group_by(SweepJob.state))).all())
            results = dict((await s.execute(select(SweepResult.state, func.count())
                                            .group_by(SweepResult.state))).all())
        by_job: dict[int, list[str]] = defaultdict(list)
        for jid, nid in leases:
            by_job[jid].append(nid)
        assert len(by_job) == 300 and all(len(v) == 2 and len(set(v)) == 2 for v in by_job.values())
        assert states == {"in_review": 300} and results == {"accepted": 600}
    finally:
        await stop_coordinator(c)


@pytest.mark.postgres
async def test_a_job_another_transaction_holds_is_waited_for_not_answered_204(db_url, photos, monkeypatch):
    """On PostgreSQL a claim passes by rows other transactions hold (``SKIP LOCKED``): most
    often a concurrent batch's spare rows, which it locks and does not take. A node was
    then told 204, "no job waits", with a job waiting, and came back after Retry-After.
    It now looks once more, waiting for the lock a short while (``leases.relook``); a
    lock held past that wait still answers 204, not an error."""
    from sqlalchemy import text
    from sqlalchemy.ext.asyncio import create_async_engine

    from coordinator.sweeps import leases
    from tests.test_sweeps_kit import enrolled

    if db_url.startswith("sqlite"):
        pytest.skip("PostgreSQL only: SQLite serialises write transactions")
    monkeypatch.setattr(leases, "RELOOK_LOCK_WAIT_S", 2.0)
    photos.scatter(*CENTRE, radius_m=300, n=1, seed=3)
    c = await start(db_url, photos, job_max_photos=1)
    other = create_async_engine(db_url)
    try:
        assert (await request_sweep(c, radius=400)).json()["jobs"] == 1
        (node,) = await enrolled(c, 1, trusted=True)
        async with other.connect() as conn:          # another batch holding the one queued job
            await conn.execute(text("SELECT id FROM sweep_jobs WHERE state = 'queued' FOR UPDATE"))
            asking = asyncio.ensure_future(node.lease())
            await asyncio.sleep(0.5)
            assert not asking.done(), "answered while the job was held"
            await conn.rollback()                    # the holder took nothing
        doc = await asyncio.wait_for(asking, 5)
        assert doc is not None and doc["job"]["jobId"]

        # held past the wait: 204, as before, after the wait
        monkeypatch.setattr(leases, "RELOOK_LOCK_WAIT_S", 0.3)
        (late,) = await enrolled(c, 1, trusted=False)    # the job wants no replica from a trusted node's peer
        async with c.services.db.write_core() as s:
            await s.execute(text("UPDATE sweep_jobs SET state = 'queued', quorum = 2"))
        async with other.connect() as conn:
            await conn.execute(text("SELECT id FROM sweep_jobs FOR UPDATE"))
            t0 = asyncio.get_running_loop().time()
            assert await late.lease() is None
            assert asyncio.get_running_loop().time() - t0 >= 0.3
            await conn.rollback()
    finally:
        await other.dispose()
        await stop_coordinator(c)


@pytest.mark.postgres
async def test_a_results_next_job_held_by_another_transaction_is_waited_for(db_url, photos, monkeypatch):
    """The same for a result that asks for its node's next job (``?next=1``): its claim
    passed a locked job by and answered "no job waits", and the node slept through its
    Retry-After with a job waiting. It now looks once more after its batch commits."""
    from sqlalchemy import text
    from sqlalchemy.ext.asyncio import create_async_engine

    from coordinator.sweeps import leases
    from tests.test_sweeps_kit import enrolled

    if db_url.startswith("sqlite"):
        pytest.skip("PostgreSQL only: SQLite serialises write transactions")
    monkeypatch.setattr(leases, "RELOOK_LOCK_WAIT_S", 2.0)
    photos.scatter(*CENTRE, radius_m=300, n=2, seed=3)
    c = await start(db_url, photos, job_max_photos=1)
    other = create_async_engine(db_url)
    try:
        assert (await request_sweep(c, radius=400)).json()["jobs"] == 2
        (node,) = await enrolled(c, 1, trusted=True)
        doc = await node.lease()
        async with other.connect() as conn:          # another batch holding the other queued job
            await conn.execute(text("SELECT id FROM sweep_jobs WHERE state = 'queued' FOR UPDATE"))
            answering = asyncio.ensure_future(node.submit(doc["lease"]["leaseId"], node.honest(doc), next_="1"))
            await asyncio.sleep(0.5)
            assert not answering.done(), "answered while the next job was held"
            await conn.rollback()                    # the holder took nothing
        r = await asyncio.wait_for(answering, 5)
        assert r.status == 200 and r.json()["accepted"] is True, r.body
        nxt = r.json()["next"]
        assert nxt is not None and nxt["job"]["jobId"] != doc["job"]["jobId"], r.body
    finally:
        await other.dispose()
        await stop_coordinator(c)
