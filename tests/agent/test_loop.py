"""The job loop against a real coordinator and the fake photo provider."""
from __future__ import annotations

import asyncio
import io
import logging

from node_agent.progress import Progress, bar

from .support import FakeEngine, db_counts, make_agent, request_sweep


async def test_agent_leases_computes_and_submits_every_job(coord, photos, tmp_path):
    await request_sweep(coord)
    jobs = len((await db_counts(coord))["jobs"])
    agent = make_agent(tmp_path / "a", coord.base_url, FakeEngine())
    task = asyncio.create_task(agent.run())
    await agent.wait_until(lambda: agent.contribution.read()["jobs"] == jobs, 60)
    agent.request_stop()
    assert await asyncio.wait_for(task, 10) == 0
    counts = await db_counts(coord)
    assert [r.state for r in counts["results"]] == ["pending"] * jobs  # validated, waiting for a replica
    assert agent.contribution.read()["photos"] == len(photos.photos)
    for r in counts["results"]:
        assert r.body["device"].startswith("cpu (development run")  # a CPU run says so
        assert r.body["nodeId"] == agent.identity.node_id


async def test_each_result_asks_for_the_next_job_in_the_same_request(coord, photos, tmp_path, monkeypatch):
    from coordinator.faces import node_protocol as handlers
    calls = {"lease": 0, "result": 0, "result+next": 0}
    lease_post, result_post = handlers.LeaseHandler.post, handlers.ResultHandler.post

    async def lease(self):
        calls["lease"] += 1
        await lease_post(self)

    async def result(self, lease_id):
        calls["result+next" if self.wants_next else "result"] += 1
        await result_post(self, lease_id)
    monkeypatch.setattr(handlers.LeaseHandler, "post", lease)
    monkeypatch.setattr(handlers.ResultHandler, "post", result)
    await request_sweep(coord)
    jobs = len((await db_counts(coord))["jobs"])
    assert jobs >= 2
    agent = make_agent(tmp_path / "a", coord.base_url, FakeEngine())
    task = asyncio.create_task(agent.run())
    await agent.wait_until(lambda: agent.contribution.read()["jobs"] == jobs, 60)
    agent.request_stop()
    assert await asyncio.wait_for(task, 10) == 0
    # One lease asked for alone, then every result brings the next (the last: none left).
    assert calls == {"lease": 1, "result": 0, "result+next": jobs}
    assert agent.leases_taken == jobs
    assert [r.state for r in (await db_counts(coord))["results"]] == ["pending"] * jobs


async def test_a_next_job_taken_just_before_a_stop_is_given_back_not_left_to_lapse(coord, photos, tmp_path,
                                                                                    monkeypatch):
    from sqlalchemy import select

    from coordinator.core.db.models import SweepLease
    from coordinator.faces import node_protocol as handlers
    agent = None
    result_post = handlers.ResultHandler.post

    async def result(self, lease_id):
        await result_post(self, lease_id)
        agent.request_stop()         # the stop arrives once the answer holds the next job
    monkeypatch.setattr(handlers.ResultHandler, "post", result)
    await request_sweep(coord)
    jobs = len((await db_counts(coord))["jobs"])
    assert jobs >= 2
    agent = make_agent(tmp_path / "a", coord.base_url, FakeEngine())
    assert await asyncio.wait_for(agent.run(), 60) == 0
    assert agent.contribution.read()["jobs"] == 1 and agent.leases_taken == 1
    async with coord.services.db.read() as s:
        leases = (await s.execute(select(SweepLease.state).order_by(SweepLease.leased_at))).scalars().all()
    assert leases == ["submitted", "cancelled"]            # the next job's lease, given back
    counts = await db_counts(coord)
    # every job waits in the queue again (the first for its other replicas), none counted as failed
    assert [(state, failures) for _, state, failures in counts["jobs"]] == [("queued", 0)] * jobs


async def test_max_jobs_stops_the_agent_after_that_many_jobs(coord, photos, tmp_path):
    await request_sweep(coord)
    jobs = len((await db_counts(coord))["jobs"])
    assert jobs >= 2, "the sweep must hold more jobs than the agent is allowed to take"
    agent = make_agent(tmp_path / "a", coord.base_url, FakeEngine(), max_jobs=1)
    assert await asyncio.wait_for(agent.run(), 60) == 0      # stops by itself
    assert agent.contribution.read()["jobs"] == 1
    assert [r.state for r in (await db_counts(coord))["results"]] == ["pending"]


async def test_two_agents_reach_the_quorum_and_every_job_goes_to_review(coord, photos, tmp_path):
    await request_sweep(coord)
    jobs = len((await db_counts(coord))["jobs"])
    truth = {p.id: p for p in photos.photos}
    agents = [make_agent(tmp_path / n, coord.base_url, FakeEngine(truth)) for n in ("a", "b")]
    tasks = [asyncio.create_task(a.run()) for a in agents]
    for a in agents:
        await a.wait_until(lambda a=a: a.contribution.read()["jobs"] == jobs, 60)
    for a in agents:
        a.request_stop()
    assert await asyncio.gather(*tasks) == [0, 0]
    counts = await db_counts(coord)
    assert {j.state for j in counts["jobs"]} == {"in_review"}
    assert sorted(r.state for r in counts["results"]) == ["accepted"] * (2 * jobs)


async def test_a_photo_the_provider_cannot_serve_is_skipped_with_its_reason(coord, photos, tmp_path):
    await request_sweep(coord)
    gone = photos.photos[0]
    del photos.by_id[gone.id]  # the provider now answers 404 for it
    agent = make_agent(tmp_path / "a", coord.base_url, FakeEngine())
    task = asyncio.create_task(agent.run())
    jobs = len((await db_counts(coord))["jobs"])
    await agent.wait_until(lambda: agent.contribution.read()["jobs"] == jobs, 60)
    agent.request_stop()
    await asyncio.wait_for(task, 10)
    skipped = [k for r in (await db_counts(coord))["results"] for k in r.body["skipped"]]
    assert skipped == [{"photoId": gone.id, "reason": "fetch failed: HTTP 404"}]


def test_progress_bar_redraws_in_place_on_a_terminal_and_logs_phases_elsewhere(caplog):
    caplog.set_level(logging.INFO, logger="sis.node")
    out = io.StringIO()
    p = Progress(out, tty=True)
    p.start("job-7", 4)
    p.step("fetching photos", 2)
    p.finish("spooled")
    assert f"\rjob-7 {bar(2, 4)} fetching photos" in out.getvalue() and out.getvalue().endswith("\n")
    assert bar(2, 4) == "[" + "#" * 12 + "." * 12 + "] 2/4"
    quiet = io.StringIO()
    q = Progress(quiet, tty=False)
    q.start("job-8", 2)
    q.step("running the engine", 2)
    q.finish("spooled")
    assert quiet.getvalue() == ""
    assert "job job-8: running the engine" in caplog.text


async def test_a_photo_over_the_size_limit_is_not_downloaded_whole_and_is_skipped(coord, photos, tmp_path):
    await request_sweep(coord)
    engine = FakeEngine()
    agent = make_agent(tmp_path / "a", coord.base_url, engine, photo_max_bytes=2000)
    task = asyncio.create_task(agent.run())
    jobs = len((await db_counts(coord))["jobs"])
    await agent.wait_until(lambda: agent.contribution.read()["jobs"] == jobs, 60)
    agent.request_stop()
    await asyncio.wait_for(task, 10)
    assert set(engine.images_seen) == {0}
    reasons = {k["reason"] for r in (await db_counts(coord))["results"] for k in r.body["skipped"]}
    assert reasons == {"fetch refused: larger than 2000 bytes"}
