"""An attack on the queue (issue 31, item 1): anyone may enrol nodes, so a node's invalid
result counts toward parking its job only when the node is trusted; lapsed leases still
count (a job that crashes every engine must park). Enrolment is limited per client IP,
and an operator lists jobs and requeues a parked one with ``sis jobs``."""
from __future__ import annotations

import asyncio
import os
import sys

from sqlalchemy import select

from coordinator.core.db.models import SweepJob, SweepResult, SweepTransition
from coordinator.demo.photos import DEV_ENGINE_BUILD
from coordinator.sweeps import jobs
from coordinator.sweeps.service import sweeps_of
from tests.support import stop_coordinator
from tests.test_error_shape import assert_error_shape
from tests.test_sweeps_kit import CENTRE, SimNode, enrolled, photos, request_sweep, set_trusted, start  # noqa: F401


async def one_job(c, photos) -> int:
    """A sweep request whose photos make exactly one job; its id."""
    photos.scatter(*CENTRE, radius_m=60, n=4, seed=21)
    body = (await request_sweep(c, radius=200)).json()
    assert body["queued"] is True and body["jobs"] == 1, body
    async with c.services.db.read() as s:
        return (await s.execute(select(SweepJob.id))).scalar_one()


async def job_row(c, job_id: int) -> SweepJob:
    async with c.services.db.read() as s:
        return await s.get(SweepJob, job_id)


async def garbage_from(nodes: list[SimNode], job_id: int) -> None:
    """Each node leases the job and submits ``[]``: the repro of the issue."""
    for node in nodes:
        lease = await node.lease()
        assert lease is not None and lease["job"]["jobId"] == jobs.wire_id(job_id)
        r = await node.submit(lease["lease"]["leaseId"], [])
        assert r.status == 422, r.body
        assert_error_shape(r.json(), "invalid_result")


async def test_five_fresh_nodes_submitting_garbage_do_not_park_a_job(db_url, photos):
    c = await start(db_url, photos)
    try:
        job_id = await one_job(c, photos)
        attackers = await enrolled(c, 5)
        await garbage_from(attackers, job_id)
        job = await job_row(c, job_id)
        assert job.state == "queued" and job.failures == 0 and job.reason is None
        async with c.services.db.read() as s:
            states = (await s.execute(select(SweepResult.state))).scalars().all()
            why = (await s.execute(select(SweepTransition.reason).where(
                SweepTransition.subject == "result"))).scalars().all()
        assert states == ["invalid"] * 5
        assert all("not counted against the job" in w for w in why), why
        # Honest nodes still sweep it.
        a, b = await enrolled(c, 2)
        la, lb = await a.lease(), await b.lease()
        assert (await a.submit(la["lease"]["leaseId"], a.honest(la))).status == 200
        r = await b.submit(lb["lease"]["leaseId"], b.honest(lb))
        assert r.status == 200 and r.json()["jobState"] == "in_review", r.body
    finally:
        await stop_coordinator(c)


async def test_a_trusted_nodes_invalid_results_still_count_and_park_the_job(db_url, photos):
    c = await start(db_url, photos, job_max_failures=3)
    try:
        job_id = await one_job(c, photos)
        await garbage_from(await enrolled(c, 2), job_id)           # untrusted: not counted
        assert (await job_row(c, job_id)).failures == 0
        await garbage_from(await enrolled(c, 3, trusted=True), job_id)
        job = await job_row(c, job_id)
        assert job.state == "failed" and job.failures == 3
        assert job.reason.startswith("failed 3 times; last: the result on lease")
    finally:
        await stop_coordinator(c)


async def test_lapsed_leases_still_count_whoever_held_them(sqlite_url, photos):
    c = await start(sqlite_url, photos, job_max_failures=2, lease_ttl_s=0.05)
    try:
        job_id = await one_job(c, photos)
        for node in await enrolled(c, 2):
            assert (await node.lease()) is not None
        await asyncio.sleep(0.1)
        assert await sweeps_of(c.services).sweeper.run_once() == 2
        job = await job_row(c, job_id)
        assert job.state == "failed" and job.failures == 2 and "lapsed" in job.reason
    finally:
        await stop_coordinator(c)


async def enrol_from(c, headers: dict):
    return await c.post("/node/v1/enrol", {"platform": "Linux-6.8-x86_64", "gpu": "none", "engineVersion": "0.1.0",
                                           "engineBuild": DEV_ENGINE_BUILD}, headers=headers)


async def test_enrolment_is_limited_per_client_ip(sqlite_url, photos):
    c = await start(sqlite_url, photos, node_enrol_per_minute=3, trusted_proxies="127.0.0.1")
    try:
        here = {"X-Forwarded-For": "203.0.113.5"}
        for _ in range(3):
            assert (await enrol_from(c, here)).status == 201
        r = await enrol_from(c, here)
        assert r.status == 429, r.body
        assert_error_shape(r.json(), "rate_limited")
        assert r.json()["error"]["details"]["limit"] == "enrolPerMinute"
        assert int(r.headers["Retry-After"]) >= 1
        # Another address enrols all the same.
        assert (await enrol_from(c, {"X-Forwarded-For": "198.51.100.6"})).status == 201
    finally:
        await stop_coordinator(c)


async def sis(*args: str) -> tuple[int, str, str]:
    proc = await asyncio.create_subprocess_exec(sys.executable, "-m", "coordinator.cli", *args,
                                                stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE,
                                                env={**os.environ, "PYTHONPATH": os.getcwd(), "USER": "opal"})
    out, err = await proc.communicate()
    return proc.returncode, out.decode(), err.decode()


async def test_an_operator_lists_jobs_and_requeues_a_parked_one(db_url, photos):
    c = await start(db_url, photos, job_max_failures=2)
    try:
        job_id = await one_job(c, photos)
        wire = jobs.wire_id(job_id)
        await garbage_from(await enrolled(c, 2, trusted=True), job_id)
        assert (await job_row(c, job_id)).state == "failed"

        rc, out, err = await sis("jobs", "list", "--database", db_url)
        assert rc == 0, err
        assert wire in out and "failed" in out and "1 job" in out
        rc, out, err = await sis("jobs", "list", "--state", "queued", "--database", db_url)
        assert rc == 0 and wire not in out and "0 jobs" in out
        rc, out, err = await sis("jobs", "list", "--state", "failed", "--database", db_url)
        assert rc == 0 and wire in out

        rc, out, err = await sis("jobs", "requeue", wire, "--database", db_url)
        assert rc == 0, err
        assert f"job {wire} requeued" in out
        job = await job_row(c, job_id)
        assert job.state == "queued" and job.failures == 0 and job.reason is None
        async with c.services.db.read() as s:
            last = (await s.execute(select(SweepTransition).where(
                SweepTransition.subject == "job", SweepTransition.subject_id == str(job_id))
                .order_by(SweepTransition.id.desc()).limit(1))).scalar_one()
        assert (last.from_state, last.to_state, last.actor) == ("failed", "queued", "operator:opal")
        (node,) = await enrolled(c, 1)
        lease = await node.lease()
        assert lease is not None and lease["job"]["jobId"] == wire

        rc, out, err = await sis("jobs", "requeue", wire, "--database", db_url)   # queued: nothing to do
        assert rc == 1 and out == "" and err.count("\n") == 1 and f"{wire} is queued" in err, err
        rc, out, err = await sis("jobs", "requeue", "job-99999999999999999999999", "--database", db_url)
        assert rc == 1 and err.count("\n") == 1 and "no such job" in err, err
        rc, out, err = await sis("jobs", "requeue", "nonsense", "--database", db_url)
        assert rc == 1 and err.count("\n") == 1 and "job id" in err, err
        rc, out, err = await sis("jobs", "list", "--state", "lost", "--database", db_url)
        assert rc == 2 and "invalid choice" in err
    finally:
        await stop_coordinator(c)


async def test_jobs_list_past_its_limit_shows_the_latest_jobs(sqlite_url, photos):
    """Oldest first with a limit of 500, so after a year it showed the first jobs ever run and
    nothing of today's."""
    c = await start(sqlite_url, photos)
    try:
        first = await job_row(c, await one_job(c, photos))
        async with c.services.db.write() as s:
            for _ in range(2):
                s.add(SweepJob(**{col.name: getattr(first, col.name) for col in SweepJob.__table__.columns
                                  if col.name != "id"}))
        async with c.services.db.read() as s:
            ids = list((await s.execute(select(SweepJob.id).order_by(SweepJob.id))).scalars())
        rc, out, err = await sis("jobs", "list", "--limit", "2", "--database", sqlite_url)
        assert rc == 0, err
        lines = out.splitlines()
        assert [line.split()[0] for line in lines[1:-1]] == [jobs.wire_id(i) for i in ids[1:]]
        assert lines[-1] == "3 jobs (the latest 2 shown: --limit)"
    finally:
        await stop_coordinator(c)
