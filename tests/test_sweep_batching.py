"""Group commit of claims and submissions (coordinator/sweeps/batching.py): the batcher on
its own, then claim and submit batches on each database, including two coordinators
sharing one database."""
from __future__ import annotations

import asyncio
import json
from collections import Counter

import pytest
from sqlalchemy import func, select, text, update

from coordinator.core.db import Database
from coordinator.core.db.models import Node, SweepJob, SweepLease, SweepResult, SweepTransition
from coordinator.demo.photos import DEV_ENGINE_BUILD, honest_result
from coordinator.core.errors import Conflict, Forbidden, NotFound, Unauthorized
from coordinator.sweeps import nodes as registry
from coordinator.sweeps.tokens import Bearer, token_hash
from coordinator.sweeps import leases, results
from coordinator.sweeps import transitions as tr
from coordinator.sweeps.batching import Batcher
from coordinator.sweeps.jobs import job_document
from coordinator.sweeps.service import SerialWrites, Sweeps, sweeps_of
from tests.test_sweeps_kit import CENTRE, photos, request_sweep, start, sweeps_db  # noqa: F401
from tests.support import stop_coordinator


# ---- the batcher on its own ------------------------------------------------

class Recorder:
    """A batch function that records its batches and can be held while one is in flight."""

    def __init__(self) -> None:
        self.batches: list[list] = []
        self.gate = asyncio.Event()
        self.gate.set()
        self.entered = asyncio.Event()

    async def __call__(self, items: list) -> list:
        self.batches.append(list(items))
        self.entered.set()
        await self.gate.wait()
        if "poison" in items and len(items) > 1:
            raise RuntimeError("the whole batch failed")
        return [ValueError(f"bad {x}") if str(x).startswith("bad") else
                RuntimeError("poison") if x == "poison" else f"done {x}" for x in items]


async def test_an_idle_request_is_served_at_once_in_a_batch_of_its_own():
    run = Recorder()
    b = Batcher(run)
    assert await b(1) == "done 1"
    assert await b(2) == "done 2"
    assert run.batches == [[1], [2]] and b.largest == 1


async def test_requests_arriving_while_a_batch_is_written_share_the_next_one():
    run = Recorder()
    run.gate.clear()
    b = Batcher(run)
    first = asyncio.ensure_future(b(0))
    await run.entered.wait()                     # batch [0] is in flight
    rest = [asyncio.ensure_future(b(i)) for i in range(1, 6)]
    await asyncio.sleep(0)
    run.gate.set()
    assert await asyncio.gather(first, *rest) == [f"done {i}" for i in range(6)]
    assert run.batches == [[0], [1, 2, 3, 4, 5]]


async def _behind_a_batch_in_flight(run, later) -> list:
    """Request "a" is held in flight, ``later`` gather behind it, then all are released:
    what each request got (its answer or its exception), "a" first."""
    run.gate.clear()
    b = Batcher(run)
    first = asyncio.ensure_future(b("a"))
    await run.entered.wait()
    others = [asyncio.ensure_future(b(x)) for x in later]
    await asyncio.sleep(0)
    run.gate.set()
    return await asyncio.gather(first, *others, return_exceptions=True)


async def test_an_error_in_one_request_fails_only_its_own_waiter():
    run = Recorder()
    got = await _behind_a_batch_in_flight(run, ("b", "bad c", "d"))
    assert got[0] == "done a" and got[1] == "done b" and got[3] == "done d"
    assert isinstance(got[2], ValueError) and str(got[2]) == "bad bad c"
    assert run.batches[1] == ["b", "bad c", "d"]


async def test_a_batch_that_fails_whole_is_served_again_one_request_at_a_time():
    run = Recorder()
    got = await _behind_a_batch_in_flight(run, ("b", "poison", "c"))
    assert got[0] == "done a" and got[1] == "done b" and got[3] == "done c"
    assert isinstance(got[2], RuntimeError) and str(got[2]) == "poison"
    assert run.batches[1:] == [["b", "poison", "c"], ["b"], ["poison"], ["c"]]


async def test_requests_with_one_key_never_share_a_batch_and_keep_their_order():
    run = Recorder()
    run.gate.clear()
    b = Batcher(run, key=lambda x: x[0])
    first = asyncio.ensure_future(b("x0"))
    await run.entered.wait()
    rest = [asyncio.ensure_future(b(x)) for x in ("a1", "a2", "b1", "a3", "b2")]
    await asyncio.sleep(0)
    run.gate.set()
    await asyncio.gather(first, *rest)
    assert run.batches == [["x0"], ["a1", "b1"], ["a2", "b2"], ["a3"]]


async def test_a_waiter_that_gave_up_is_left_out_and_the_others_are_served():
    run = Recorder()
    run.gate.clear()
    b = Batcher(run, max_batch=2)
    first = asyncio.ensure_future(b(0))
    await run.entered.wait()
    gone, kept = asyncio.ensure_future(b(1)), [asyncio.ensure_future(b(i)) for i in (2, 3, 4)]
    await asyncio.sleep(0)
    gone.cancel()
    run.gate.set()
    assert await asyncio.gather(first, *kept) == ["done 0", "done 2", "done 3", "done 4"]
    assert run.batches == [[0], [2, 3], [4]]     # max_batch holds too


# ---- claim and submit batches on each database -----------------------------

async def nodes(sw, n: int, trusted: bool = False) -> list:
    out = []
    for i in range(n):
        node, _ = await registry.enrol(sw.db, name=f"n{i}", platform="test", gpu="none", engine_version="0.1.0",
                                       engine_build=DEV_ENGINE_BUILD)
        out.append(node)
    if trusted:
        async with sw.db.write() as s:
            await s.execute(update(Node).where(Node.id.in_([x.id for x in out]))
                            .values(trusted=True, streak=sw.settings.trust_streak))
        for node in out:
            node.trusted = True
    return out


@pytest.fixture
async def one_photo_jobs(db_url, photos):
    """A coordinator on each database whose jobs hold one photo each."""
    c = await start(db_url, photos, job_max_photos=1)
    yield c
    await stop_coordinator(c)


def body_for(claim, node) -> bytes:
    return json.dumps(honest_result(job_document(claim.job).to_dict(), node.id)).encode()


async def test_a_batch_holding_two_claims_of_one_node_never_gives_it_two_replicas_of_a_job(sweeps_db, photos):
    photos.scatter(*CENTRE, radius_m=400, n=1, seed=21)
    assert (await request_sweep(sweeps_db, radius=450)).json()["jobs"] == 1
    sw = sweeps_of(sweeps_db.services)
    a, b = await nodes(sw, 2)                       # untrusted: the job needs two replicas
    got = await leases.claim_batch(sw, [a, a, b])
    assert got[0] is not None and got[1] is None and got[2] is not None
    assert got[0].job.id == got[2].job.id
    async with sw.db.read() as s:
        held = (await s.execute(select(SweepLease.node_id).where(SweepLease.job_id == got[0].job.id))).scalars()
        job = await s.get(SweepJob, got[0].job.id)
    assert sorted(held) == sorted([a.id, b.id])
    assert (job.state, job.quorum, job.active_leases) == ("leased", 2, 2)
    assert await leases.claim_batch(sw, [a, b]) == [None, None]


async def test_a_claim_the_rows_read_cannot_serve_takes_the_next_job_beyond_them(one_photo_jobs, photos):
    photos.scatter(*CENTRE, radius_m=400, n=12, seed=22)
    assert (await request_sweep(one_photo_jobs, radius=450)).json()["jobs"] == 12
    sw = sweeps_of(one_photo_jobs.services)
    (a,) = await nodes(sw, 1)                       # untrusted: each job waits for a second replica
    first = await leases.claim_batch(sw, [a] * 5)
    assert [c.job.id for c in first] == sorted(c.job.id for c in first) and len({c.job.id for c in first}) == 5
    # The next batch reads 1 + CLAIM_SPARE = 5 queued jobs, every one of them held by this node.
    assert leases.CLAIM_SPARE == 4
    (beyond,) = await leases.claim_batch(sw, [a])
    async with sw.db.read() as s:
        queued = (await s.execute(select(SweepJob.id).where(SweepJob.state == "queued")
                                  .order_by(SweepJob.id))).scalars().all()
    assert beyond is not None and beyond.job.id == queued[5]
    assert beyond.job.photos and beyond.job.area["type"] == "Polygon"   # a whole job, as a node gets it


async def plan_of_the_claims_read(db, n: int) -> str:
    """The plan the database keeps for a claim batch's read of the queued jobs, with its
    parameters bound as the service binds them: PostgreSQL's generic plan (the one a
    prepared statement settles on after five runs), SQLite's plan of the statement."""
    stmt = leases._QUEUED if db.is_sqlite else leases._QUEUED_LOCKED
    async with db.write_engine.connect() as conn:
        compiled = stmt.compile(dialect=conn.dialect)
        values = compiled.construct_params({"n": n})
        args = tuple(values[k] for k in compiled.positiontup)
        if db.is_sqlite:
            rows = await conn.exec_driver_sql("EXPLAIN QUERY PLAN " + str(compiled), args)
            return " ".join(str(r) for r in rows)
        raw = (await conn.get_raw_connection()).driver_connection
        await raw.execute("SET plan_cache_mode = force_generic_plan")
        await raw.execute("PREPARE claims_read AS " + str(compiled))
        try:
            shown = ", ".join(f"'{a}'" if isinstance(a, str) else str(a) for a in args)
            return "\n".join(r[0] for r in await raw.fetch(f"EXPLAIN EXECUTE claims_read({shown})"))
        finally:
            await raw.execute("DEALLOCATE claims_read; RESET plan_cache_mode")


async def copies_of_a_job(db, job_id: int, n: int, state: str) -> None:
    """n copies of one job in ``state``, newest last, by one statement on either database."""
    cols = [c.name for c in SweepJob.__table__.columns if c.name not in ("id", "state")]
    async with db.write_engine.begin() as conn:
        await conn.execute(text(
            f"WITH RECURSIVE k(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM k WHERE i < {n}) "
            f"INSERT INTO sweep_jobs (state, {', '.join(cols)}) "
            f"SELECT :state, {', '.join(cols)} FROM sweep_jobs, k WHERE sweep_jobs.id = :id ORDER BY k.i"),
            {"state": state, "id": job_id})


async def test_a_claim_reads_the_queued_jobs_from_their_own_index_not_past_the_jobs_done_before_them(
        one_photo_jobs, photos):
    # 2,000 jobs done ahead of 2,000 queued, analysed so (as just after a large request, as
    # in bench/queue.py): read through the primary key, a claim passed every one done.
    photos.scatter(*CENTRE, radius_m=400, n=1, seed=24)
    assert (await request_sweep(one_photo_jobs, radius=450)).json()["jobs"] == 1
    db = one_photo_jobs.services.db
    sw = sweeps_of(one_photo_jobs.services)
    async with db.read() as s:
        (model,) = (await s.execute(select(SweepJob.id))).scalars().all()
    await copies_of_a_job(db, model, 2000, tr.JOB_IN_REVIEW)
    await copies_of_a_job(db, model, 2000, tr.JOB_QUEUED)
    async with db.write_engine.begin() as conn:
        await conn.execute(update(SweepJob).where(SweepJob.id == model).values(state=tr.JOB_IN_REVIEW))
        await conn.exec_driver_sql("ANALYZE")
    plan = await plan_of_the_claims_read(db, 32 + leases.CLAIM_SPARE)
    # (SQLite's planner takes the state index, which reads only the queued rows as well.)
    assert "ix_sweep_jobs_queued" in plan or (db.is_sqlite and "ix_sweep_jobs_state_id (state=?)" in plan), plan
    (a,) = await nodes(sw, 1, trusted=True)
    (claim,) = await leases.claim_batch(sw, [a])
    assert claim.job.id == model + 2001


async def test_an_error_in_one_batched_submission_does_not_fail_the_others(one_photo_jobs, photos):
    photos.scatter(*CENTRE, radius_m=400, n=3, seed=23)
    sw = sweeps_of(one_photo_jobs.services)
    assert (await request_sweep(one_photo_jobs, radius=450)).json()["jobs"] == 3
    a, b, c = await nodes(sw, 3, trusted=True)
    ca, cb, cc = await leases.claim_batch(sw, [a, b, c])
    good = results.Submission(a, ca.lease_id, body_for(ca, a))
    stranger = results.Submission(a, cb.lease_id, body_for(cb, a))     # b's lease
    invalid = results.Submission(c, cc.lease_id, b'{"jobId": "nope"}')
    out = await results.submit_batch(sw, [good, stranger, invalid])
    assert isinstance(out[1], NotFound)
    assert out[0].accepted and out[0].result_state == "accepted" and out[0].job_state == "in_review"
    assert not out[2].accepted and out[2].result_state == "invalid" and out[2].reasons
    # The same body again: the first answer; a different body: a conflict; b's own submission: fine.
    again = await results.submit_batch(sw, [good, results.Submission(a, ca.lease_id, b"{}"),
                                            results.Submission(b, cb.lease_id, body_for(cb, b))])
    assert again[0].duplicate and again[0].result_state == "accepted"
    assert isinstance(again[1], Conflict)
    assert again[2].accepted and not again[2].duplicate
    async with sw.db.read() as s:
        rows = (await s.execute(select(SweepResult.lease_id, SweepResult.state))).all()
        logged = (await s.execute(select(SweepTransition.subject_id).where(
            SweepTransition.subject == "result"))).scalars().all()
        ids = (await s.execute(select(SweepResult.id))).scalars().all()
    assert sorted(rows) == sorted([(ca.lease_id, "accepted"), (cb.lease_id, "accepted"), (cc.lease_id, "invalid")])
    assert results.THIS not in logged and {str(i) for i in ids} <= set(logged)


async def two_nodes(sw):
    return [await registry.enrol(sw.db, name=f"n{i}", platform="test", gpu="none", engine_version="0.1.0",
                                 engine_build=DEV_ENGINE_BUILD) for i in range(2)]


async def test_tokens_looked_up_in_a_claim_batch_refuse_only_their_own_claims(one_photo_jobs, photos):
    photos.scatter(*CENTRE, radius_m=400, n=3, seed=25)
    sw = sweeps_of(one_photo_jobs.services)
    assert (await request_sweep(one_photo_jobs, radius=450)).json()["jobs"] == 3
    (a, token_a), (b, token_b) = await two_nodes(sw)
    assert await registry.revoke(sw.db, b.id, "junk", "operator:test", 5) == 0
    got = await leases.claim_batch(sw, [Bearer(token_hash(token_a)), Bearer(token_hash("sisn_nope")),
                                        Bearer(token_hash(token_b)), a])
    assert isinstance(got[1], Unauthorized) and isinstance(got[2], Forbidden)
    assert got[2].details == {"nodeId": b.id, "reason": "junk"}
    assert got[0] is not None and got[3] is not None and got[0].job.id != got[3].job.id
    async with sw.db.read() as s:
        held = (await s.execute(select(SweepLease.node_id))).scalars().all()
    assert held == [a.id, a.id]                    # the refused claims took nothing
    (again,) = await leases.claim_batch(sw, [Bearer(token_hash(token_b))])
    assert isinstance(again, Forbidden)            # alone in a batch too


async def test_a_token_looked_up_in_a_submit_batch_refuses_a_node_revoked_after_its_lease(one_photo_jobs, photos):
    photos.scatter(*CENTRE, radius_m=400, n=2, seed=26)
    sw = sweeps_of(one_photo_jobs.services)
    assert (await request_sweep(one_photo_jobs, radius=450)).json()["jobs"] == 2
    (a, token_a), (b, token_b) = await two_nodes(sw)
    ca, cb = await leases.claim_batch(sw, [Bearer(token_hash(token_a)), Bearer(token_hash(token_b))])
    assert await registry.revoke(sw.db, b.id, "junk", "operator:test", 5) == 1
    out = await results.submit_batch(sw, [results.Submission(Bearer(token_hash(token_a)), ca.lease_id, body_for(ca, a)),
                                          results.Submission(Bearer(token_hash(token_b)), cb.lease_id, body_for(cb, b)),
                                          results.Submission(Bearer(token_hash("sisn_nope")), ca.lease_id, b"{}")])
    assert out[0].accepted and out[0].result_state == "pending"
    assert isinstance(out[1], Forbidden) and isinstance(out[2], Unauthorized)
    async with sw.db.read() as s:
        rows = (await s.execute(select(SweepResult.lease_id, SweepResult.node_id))).all()
        revoked = await s.get(Node, b.id)
    assert rows == [(ca.lease_id, a.id)]           # nothing of the refused submissions was kept
    assert (revoked.invalid_total, revoked.valid_total) == (0, 0)


async def test_two_replicas_submitted_in_one_batch_reach_their_quorum(sweeps_db, photos):
    photos.scatter(*CENTRE, radius_m=400, n=1, seed=24)
    sw = sweeps_of(sweeps_db.services)
    assert (await request_sweep(sweeps_db, radius=450)).json()["jobs"] == 1
    a, b = await nodes(sw, 2)
    ca, cb = await leases.claim_batch(sw, [a, b])
    out = await results.submit_batch(sw, [results.Submission(a, ca.lease_id, body_for(ca, a)),
                                          results.Submission(b, cb.lease_id, body_for(cb, b))])
    # Decided as two transactions one after the other would: the first waits, the second decides.
    assert (out[0].result_state, out[0].job_state) == ("pending", "leased")
    assert (out[1].result_state, out[1].job_state) == ("accepted", "in_review")
    async with sw.db.read() as s:
        states = (await s.execute(select(SweepResult.state))).scalars().all()
        job = (await s.execute(select(SweepJob))).scalar_one()
        trail = (await s.execute(select(SweepTransition.subject, SweepTransition.from_state,
                                        SweepTransition.to_state).where(SweepTransition.subject == "result")
                                 .order_by(SweepTransition.id))).all()
    assert states == ["accepted", "accepted"]
    assert (job.state, job.valid_results, job.active_leases, job.canonical_lease_id) == \
        ("in_review", 2, 0, ca.lease_id)
    assert trail == [("result", None, "pending"), ("result", None, "pending"),
                     ("result", "pending", "accepted"), ("result", "pending", "accepted")]


@pytest.mark.slow
async def test_two_coordinators_batching_on_one_database_never_lease_a_job_twice(db_url, photos):
    """Two coordinator processes, as far as the database can tell (engines and batchers of
    their own), with 16 nodes each claiming and submitting concurrently."""
    photos.scatter(*CENTRE, radius_m=950, n=400, seed=25)
    c = await start(db_url, photos, job_max_photos=1)
    other_db = Database(db_url)
    try:
        assert (await request_sweep(c, radius=1000)).json()["jobs"] == 400
        first = sweeps_of(c.services)
        second = Sweeps(SerialWrites(other_db), first.settings, first.provider)
        pool = await nodes(first, 32, trusted=True)
        leased: Counter = Counter()

        async def work(sw, node) -> None:
            while True:
                claim = await leases.claim(sw, node)
                if claim is None:
                    return
                leased[claim.job.id] += 1
                out = await results.submit(sw, node, claim.lease_id, body_for(claim, node))
                assert out.accepted and out.job_state == "in_review", out

        await asyncio.gather(*(work(first if i % 2 else second, n) for i, n in enumerate(pool)))
        assert len(leased) == 400 and set(leased.values()) == {1}
        assert first.claims.largest > 1 and second.claims.largest > 1      # batches did form
        # Submissions batched too; on SQLite not necessarily in both: its busy handler does not
        # queue writers of two processes fairly, and one may serve every job while the other waits.
        assert max(first.submits.largest, second.submits.largest) > 1
        if not c.services.db.is_sqlite:
            assert first.submits.largest > 1 and second.submits.largest > 1
        async with first.db.read() as s:
            per_job = (await s.execute(select(SweepLease.job_id, func.count()).group_by(SweepLease.job_id))).all()
            states = dict((await s.execute(select(SweepJob.state, func.count()).group_by(SweepJob.state))).all())
            counted = (await s.execute(select(func.sum(SweepJob.valid_results)))).scalar_one()
            leases_logged = (await s.execute(select(func.count()).select_from(SweepTransition).where(
                SweepTransition.subject == "lease", SweepTransition.to_state == tr.LEASE_ACTIVE))).scalar_one()
        assert {n for _, n in per_job} == {1} and len(per_job) == 400
        assert states == {"in_review": 400} and counted == 400 and leases_logged == 400
    finally:
        await other_db.close()
        await stop_coordinator(c)
