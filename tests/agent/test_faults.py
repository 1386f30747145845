"""Faults: the coordinator down mid-job, a malformed job, stopping mid-job."""
from __future__ import annotations

import asyncio
import logging
import os

from sqlalchemy import select

from coordinator.core.db.models import SweepLease
from node_agent.files import read_json

from .support import (FakeEngine, MalformingProxy, bring_up, db_counts, heartbeats_running, make_agent,
                      request_sweep, run_holding_ahead, start_sweep_coordinator, stop_sweep_coordinator, take_down)

# "The coordinator down for 30 s", scaled down so the suite stays fast; SIS_TEST_OUTAGE_S=30 runs it in full.
OUTAGE_S = float(os.environ.get("SIS_TEST_OUTAGE_S", "3"))


async def test_result_arrives_once_the_coordinator_is_back_after_an_outage_mid_job(coord, tmp_path, caplog):
    caplog.set_level(logging.INFO, logger="sis.node")
    await request_sweep(coord)
    engine = FakeEngine(hold=True)
    # One job at a time: a job leased ahead before the outage would be worked and spooled too.
    agent = make_agent(tmp_path / "a", coord.base_url, engine, work_ahead=False)
    task = asyncio.create_task(agent.run())
    try:
        await asyncio.to_thread(engine.started.wait, 20)
        first_job = engine.jobs[0]
        await take_down(coord)
        await agent.wait_until(lambda: agent.heartbeat_failures >= 2, 60)  # heartbeats go on failing, work goes on
        engine.gate.set()  # the job finishes while the coordinator is down
        await agent.wait_until(lambda: agent.backoff.failures >= 3, 60)
        assert len(agent.spool) == 1 and agent.spool.pending()[0].job_id == first_job
        await asyncio.sleep(OUTAGE_S)  # the outage itself: nothing to await but time
        failures_during_outage = agent.backoff.failures
        bring_up(coord)
        await agent.wait_until(lambda: agent.contribution.read()["jobs"] >= 1 and len(agent.spool) == 0, 60)
        agent.request_stop()
        await asyncio.wait_for(task, 20)
    finally:
        engine.gate.set()
        task.cancel()        # a no-op once it has stopped; after a failure above, never leave it running
        await asyncio.gather(task, return_exceptions=True)

    counts = await db_counts(coord)
    assert any(r.body and r.body["jobId"] == first_job and r.state == "pending" for r in counts["results"])
    retries = [r.getMessage() for r in caplog.records if "retrying in" in r.getMessage()]
    assert len(retries) >= failures_during_outage >= 3
    delays = [float(m.split("retrying in ")[1].split(" s")[0]) for m in retries]
    assert max(delays) > min(delays)  # the delay grows (with jitter) up to its cap
    assert any("heartbeat for lease" in r.getMessage() and "failed" in r.getMessage() for r in caplog.records)


async def test_malformed_job_is_refused_reported_and_the_agent_goes_on(sqlite_url, photos, tmp_path, caplog):
    caplog.set_level(logging.INFO, logger="sis.node")
    coord = await start_sweep_coordinator(sqlite_url, photos, lease_ttl_s=2)
    proxy = MalformingProxy(coord.base_url, spoil=1).start()
    try:
        await request_sweep(coord)
        jobs = len((await db_counts(coord))["jobs"])
        assert jobs >= 2
        engine = FakeEngine()
        agent = make_agent(tmp_path / "a", proxy.url, engine)
        task = asyncio.create_task(agent.run())
        await agent.wait_until(lambda: agent.contribution.read()["jobs"] == jobs - 1, 60)
        refused = agent.status.doc["lastRefusedJob"]
        assert refused["jobId"] not in engine.jobs  # the engine never saw it
        text = " | ".join(refused["reasons"])
        assert "photos[0].url: must be an http(s) URL" in text
        assert "radiusM" in text and "runThis: unknown field" in text
        assert agent.contribution.read()["refusedJobs"] == 1
        assert any("refused: it does not fit the job schema" in r.getMessage() for r in caplog.records)

        # Its lease lapses (no heartbeats): the coordinator counts a failure and queues it again.
        await asyncio.sleep(2.1)  # the lease's TTL has to pass; the sweeper then sees it lapsed
        assert await coord.services.extras["sweeps"].sweeper.run_once() == 1
        await agent.wait_until(lambda: agent.contribution.read()["jobs"] == jobs, 60)
        agent.request_stop()
        assert await asyncio.wait_for(task, 20) == 0
        counts = await db_counts(coord)
        assert sum(j.failures for j in counts["jobs"]) == 1
        assert sorted(r.state for r in counts["results"]) == ["pending"] * jobs
    finally:
        await proxy.stop()
        await stop_sweep_coordinator(coord)


async def test_first_stop_finishes_and_submits_the_current_job_and_leases_nothing_more(coord, tmp_path):
    await request_sweep(coord)
    engine = FakeEngine(hold=True)
    agent = make_agent(tmp_path / "a", coord.base_url, engine)
    task = await run_holding_ahead(agent, engine)
    agent.request_stop()
    engine.gate.set()
    assert await asyncio.wait_for(task, 20) == 0
    counts = await db_counts(coord)
    async with coord.services.db.read() as s:
        leases = (await s.execute(select(SweepLease.state).order_by(SweepLease.leased_at))).scalars().all()
    assert leases == ["submitted", "cancelled"]     # the job held ahead, given back unstarted
    assert engine.jobs == [counts["results"][0].body["jobId"]]
    assert [r.state for r in counts["results"]] == ["pending"]
    assert len(agent.spool) == 0
    assert not agent.paths.current_job_file.exists() and not agent.paths.ahead_job_file.exists()


async def test_second_stop_leaves_the_job_journalled_for_a_restart(coord, tmp_path):
    await request_sweep(coord)
    engine = FakeEngine(hold=True)
    home = tmp_path / "a"
    agent = make_agent(home, coord.base_url, engine)
    task = await run_holding_ahead(agent, engine)
    held = agent._ahead.lease.lease_id
    agent.request_stop()
    agent.request_stop()
    assert await asyncio.wait_for(task, 5) == 0
    journal = read_json(agent.paths.current_job_file)
    assert journal["jobId"] == engine.jobs[0]
    assert (await db_counts(coord))["results"] == []
    async with coord.services.db.read() as s:
        states = dict((await s.execute(select(SweepLease.id, SweepLease.state))).all())
    assert states == {journal["leaseId"]: "active", held: "cancelled"}   # the job held ahead, given back

    # The restarted agent resumes the job on the same lease, which still holds.
    engine.gate.set()
    again = make_agent(home, coord.base_url, FakeEngine())
    task = asyncio.create_task(again.run())
    await again.wait_until(lambda: again.contribution.read()["jobs"] >= 1, 60)
    again.request_stop()
    await asyncio.wait_for(task, 20)
    counts = await db_counts(coord)
    assert any(r.body["jobId"] == journal["jobId"] for r in counts["results"])


async def test_a_result_is_spooled_while_the_last_ones_submission_hangs_and_a_second_stop_is_at_once(
        coord, tmp_path):
    await request_sweep(coord)
    assert len((await db_counts(coord))["jobs"]) >= 2
    engine = FakeEngine(hold=True)
    agent = make_agent(tmp_path / "a", coord.base_url, engine)
    hung = asyncio.Event()

    async def never_answered(lease_id, result):
        hung.set()
        await asyncio.Event().wait()
    agent.client.submit_and_lease = never_answered
    task = await run_holding_ahead(agent, engine)
    engine.gate.set()                       # the first job ends; the second runs while its result is sent
    await asyncio.wait_for(hung.wait(), 20)
    await agent.wait_until(lambda: len(agent.spool) == 2, 20)    # the second's result is not held up by it
    assert [i.job_id for i in agent.spool.pending()] == engine.jobs[:2]
    agent.request_stop()
    agent.request_stop()
    assert await asyncio.wait_for(task, 5) == 0
    assert len(agent.spool) == 2 and (await db_counts(coord))["results"] == []   # resent at the next start


async def test_a_second_stop_cuts_short_the_release_of_the_job_held_ahead(coord, tmp_path):
    await request_sweep(coord)
    engine = FakeEngine(hold=True)
    agent = make_agent(tmp_path / "a", coord.base_url, engine)
    releasing = asyncio.Event()

    async def slow_release(lease_id, reason):
        releasing.set()
        await asyncio.sleep(60)               # a coordinator that does not answer
    agent.client.release = slow_release
    task = await run_holding_ahead(agent, engine)
    held = agent._ahead.lease.lease_id
    agent.request_stop()
    engine.gate.set()
    await asyncio.wait_for(releasing.wait(), 20)
    t0 = asyncio.get_running_loop().time()
    agent.request_stop()
    assert await asyncio.wait_for(task, 10) == 0
    assert asyncio.get_running_loop().time() - t0 < 4     # RELEASE_NOW_S (2 s), not the release's own time
    assert read_json(agent.paths.ahead_job_file)["leaseId"] == held     # not given back: still journalled

    # The next start gives it back first: queued again at once, no failure counted on the job.
    again = make_agent(tmp_path / "a", coord.base_url, FakeEngine())
    task = asyncio.create_task(again.run())
    await again.wait_until(lambda: again._recovered, 20)
    async with coord.services.db.read() as s:
        assert (await s.get(SweepLease, held)).state == "cancelled"
    assert (read_json(again.paths.ahead_job_file) or {}).get("leaseId") != held
    jobs = len((await db_counts(coord))["jobs"])
    await again.wait_until(lambda: again.contribution.read()["jobs"] == jobs, 60)
    again.request_stop()
    assert await asyncio.wait_for(task, 10) == 0
    assert [failures for _, _, failures in (await db_counts(coord))["jobs"]] == [0] * jobs
    assert not again.paths.ahead_job_file.exists()


async def test_an_agent_cancelled_while_holding_a_job_ahead_leaves_no_heartbeats(coord, tmp_path):
    await request_sweep(coord)
    engine = FakeEngine(hold=True)
    agent = make_agent(tmp_path / "a", coord.base_url, engine)
    task = await run_holding_ahead(agent, engine)
    task.cancel()
    await asyncio.gather(task, return_exceptions=True)
    engine.gate.set()
    assert heartbeats_running() == [] and agent._ahead is None and agent.status.doc["ahead"] is None


async def test_a_failed_journal_write_leaves_no_heartbeats_behind(coord, tmp_path, monkeypatch):
    from node_agent import journal       # where the loop's journals are written
    await request_sweep(coord)
    agent = make_agent(tmp_path / "a", coord.base_url, FakeEngine())
    real, failed = journal.write_json, []

    def disk_full(path, doc):
        if not failed:
            failed.append(path)
            raise OSError(28, "No space left on device")
        real(path, doc)
    monkeypatch.setattr(journal, "write_json", disk_full)
    task = asyncio.create_task(agent.run())
    await agent.wait_until(lambda: agent.contribution.read()["jobs"] >= 1, 60)   # it goes on after the fault
    agent.request_stop()
    assert await asyncio.wait_for(task, 20) == 0
    assert failed
    assert heartbeats_running() == []


async def test_a_malformed_job_held_ahead_is_refused_and_never_worked(sqlite_url, photos, tmp_path):
    coord = await start_sweep_coordinator(sqlite_url, photos)
    proxy = MalformingProxy(coord.base_url, spoil=1, skip=1).start()    # the second lease: the one held ahead
    try:
        await request_sweep(coord)
        jobs = len((await db_counts(coord))["jobs"])
        assert jobs >= 2
        engine = FakeEngine()
        agent = make_agent(tmp_path / "a", proxy.url, engine)
        task = asyncio.create_task(agent.run())
        await agent.wait_until(lambda: agent.contribution.read()["refusedJobs"] == 1
                               and agent.contribution.read()["jobs"] == jobs - 1, 60)
        agent.request_stop()
        assert await asyncio.wait_for(task, 20) == 0
        refused = agent.status.doc["lastRefusedJob"]
        assert refused["jobId"] not in engine.jobs and len(engine.jobs) == jobs - 1
        assert "runThis: unknown field" in " | ".join(refused["reasons"])
    finally:
        await proxy.stop()
        await stop_sweep_coordinator(coord)


async def test_engine_failure_leaves_the_job_to_its_lease_and_the_agent_goes_on(coord, tmp_path, caplog):
    await request_sweep(coord)
    engine = FakeEngine(fail=True)
    agent = make_agent(tmp_path / "a", coord.base_url, engine)
    task = asyncio.create_task(agent.run())
    await agent.wait_until(lambda: len(engine.jobs) >= 2, 60)
    agent.request_stop()
    assert await asyncio.wait_for(task, 20) == 0
    assert (await db_counts(coord))["results"] == []
    assert any("the engine failed on job" in r.getMessage() for r in caplog.records)


async def test_a_revoked_node_drops_its_job_and_stops_with_the_coordinators_reason(coord, tmp_path, caplog):
    from coordinator.sweeps import nodes as registry

    await request_sweep(coord)
    engine = FakeEngine(hold=True)
    agent = make_agent(tmp_path / "a", coord.base_url, engine)
    task = asyncio.create_task(agent.run())
    await asyncio.to_thread(engine.started.wait, 20)
    await registry.revoke(coord.services.db, agent.identity.node_id, "misbehaving", "admin:test", 5)
    await agent.wait_until(lambda: agent.leases_lost == 1, 60)
    engine.gate.set()
    assert await asyncio.wait_for(task, 20) == 2
    assert "was revoked by the operators of" in agent.status.doc["lastError"]
    assert '"misbehaving"' in agent.status.doc["lastError"]       # the operator's reason
    assert len(agent.spool) == 0 and (await db_counts(coord))["results"] == []
    assert not agent.paths.current_job_file.exists()


async def test_max_jobs_with_its_result_left_in_the_spool_exits_non_zero_and_says_so(coord, tmp_path, caplog):
    """``--max-jobs 1`` is the end-to-end check of a new machine: it said 0 with its result unsent."""
    from node_agent import cli
    from node_agent.loop import EXIT_UNSENT

    caplog.set_level(logging.INFO, logger="sis.node")
    await request_sweep(coord)
    engine = FakeEngine(hold=True)
    agent = make_agent(tmp_path / "a", coord.base_url, engine, max_jobs=1)
    task = asyncio.create_task(agent.run())
    try:
        await asyncio.to_thread(engine.started.wait, 20)
        await take_down(coord)
        engine.gate.set()            # the job finishes while the coordinator is down
        assert await asyncio.wait_for(task, 30) == EXIT_UNSENT == cli.EXIT_UNSENT
    finally:
        engine.gate.set()
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)
    assert len(agent.spool) == 1
    assert (f"--max-jobs 1: 1 result(s) not sent, the coordinator could not be reached: they wait in the spool "
            f"({agent.spool.folder})") in caplog.text


async def test_max_jobs_with_its_result_refused_for_good_exits_non_zero_and_says_so(coord, tmp_path, caplog):
    from node_agent.loop import EXIT_UNSENT

    await request_sweep(coord)
    # Every photo over the size limit: the result read no photo, and the coordinator refuses it for good.
    agent = make_agent(tmp_path / "a", coord.base_url, FakeEngine(), max_jobs=1, photo_max_bytes=2000)
    assert await asyncio.wait_for(agent.run(), 60) == EXIT_UNSENT
    assert len(agent.spool) == 0 and len(list(agent.spool.rejected_dir.glob("*.json"))) == 1
    assert "--max-jobs 1: 1 result(s) refused for good by the coordinator" in caplog.text
