"""The job loop against a real coordinator and the fake photo provider."""
from __future__ import annotations

import asyncio
import io
import logging

import pytest

from node_agent.files import read_json
from node_agent.progress import Progress, bar

from .support import FakeEngine, db_counts, make_agent, request_sweep, run_holding_ahead


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
    # Two leases asked for alone (the first job, and the one held ahead while it ran), then
    # every result brings the next (the last two: none left).
    assert calls == {"lease": 2, "result": 0, "result+next": jobs}
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
    # Without working ahead, the next job comes only with the result (with it, test_faults).
    agent = make_agent(tmp_path / "a", coord.base_url, FakeEngine(), work_ahead=False)
    assert await asyncio.wait_for(agent.run(), 60) == 0
    assert agent.contribution.read()["jobs"] == 1 and agent.leases_taken == 1
    async with coord.services.db.read() as s:
        leases = (await s.execute(select(SweepLease.state).order_by(SweepLease.leased_at))).scalars().all()
    assert leases == ["submitted", "cancelled"]            # the next job's lease, given back
    counts = await db_counts(coord)
    # every job waits in the queue again (the first for its other replicas), none counted as failed
    assert [(state, failures) for _, state, failures in counts["jobs"]] == [("queued", 0)] * jobs


async def test_the_next_jobs_photos_are_fetched_while_the_engine_runs(coord, photos, tmp_path):
    await request_sweep(coord)
    jobs = len((await db_counts(coord))["jobs"])
    assert jobs >= 2
    engine = FakeEngine(hold=True)
    agent = make_agent(tmp_path / "a", coord.base_url, engine)
    task = await run_holding_ahead(agent, engine)
    ahead = agent._ahead
    fetched = await asyncio.wait_for(asyncio.shield(ahead.photos), 20)
    # every photo of the next job is in hand while the engine still holds the first
    assert len(engine.jobs) == 1 and ahead.job.job_id != engine.jobs[0]
    assert sorted(fetched.images) == sorted(p.id for p in ahead.job.photos) and not fetched.skipped
    assert agent.status.doc["ahead"] == {"jobId": ahead.job.job_id, "photos": len(ahead.job.photos)}
    assert read_json(agent.paths.ahead_job_file)["leaseId"] == ahead.lease.lease_id
    journals, run_job = {}, engine.run_job

    def journalled_then_run(job, images):
        journals[job.job_id] = read_json(agent.paths.current_job_file), read_json(agent.paths.ahead_job_file)
        return run_job(job, images)
    engine.run_job = journalled_then_run
    engine.gate.set()
    await agent.wait_until(lambda: agent.contribution.read()["jobs"] == jobs, 60)
    agent.request_stop()
    assert await asyncio.wait_for(task, 10) == 0
    assert engine.jobs[1] == ahead.job.job_id and engine.images_seen[1] == len(ahead.job.photos)
    # Once it started, it was journalled as the current job, no longer as the one held ahead.
    current, held = journals[ahead.job.job_id]
    assert current["leaseId"] == ahead.lease.lease_id and (held or {}).get("leaseId") != ahead.lease.lease_id
    assert sum(engine.images_seen) == len(photos.photos)
    assert [r.state for r in (await db_counts(coord))["results"]] == ["pending"] * jobs


async def test_a_job_held_ahead_whose_lease_ends_is_dropped_and_leased_again(coord, photos, tmp_path):
    from sqlalchemy import select

    from coordinator.core.db.models import SweepLease
    await request_sweep(coord)
    jobs = len((await db_counts(coord))["jobs"])
    engine = FakeEngine(hold=True)
    agent = make_agent(tmp_path / "a", coord.base_url, engine)
    task = await run_holding_ahead(agent, engine)
    ahead = agent._ahead
    await agent.client.release(ahead.lease.lease_id, "ended by the test")   # as the coordinator may end it
    await asyncio.wait_for(ahead.lost.wait(), 20)                           # its heartbeats learn it
    engine.gate.set()
    await agent.wait_until(lambda: agent.contribution.read()["jobs"] == jobs, 60)
    agent.request_stop()
    assert await asyncio.wait_for(task, 10) == 0
    assert agent.leases_lost == 1
    async with coord.services.db.read() as s:
        states = (await s.execute(select(SweepLease.id, SweepLease.state))).all()
    assert dict(states)[ahead.lease.lease_id] == "cancelled"
    assert engine.jobs.count(ahead.job.job_id) == 1        # worked once, on the lease it was given again
    assert not agent.paths.ahead_job_file.exists()
    assert [r.state for r in (await db_counts(coord))["results"]] == ["pending"] * jobs


async def test_without_working_ahead_nothing_is_leased_while_the_engine_runs(coord, photos, tmp_path):
    await request_sweep(coord)
    assert len((await db_counts(coord))["jobs"]) >= 2
    engine = FakeEngine(hold=True)
    agent = make_agent(tmp_path / "a", coord.base_url, engine, work_ahead=False)
    task = asyncio.create_task(agent.run())
    await asyncio.to_thread(engine.started.wait, 20)
    await asyncio.sleep(1.0)             # five heartbeat intervals with the engine held
    assert (await db_counts(coord))["leases"] == 1 and agent._ahead is None
    engine.gate.set()
    agent.request_stop()
    assert await asyncio.wait_for(task, 10) == 0
    assert (await db_counts(coord))["leases"] == 1 and agent.contribution.read()["jobs"] == 1


async def test_max_jobs_stops_the_agent_after_that_many_jobs(coord, photos, tmp_path):
    await request_sweep(coord)
    jobs = len((await db_counts(coord))["jobs"])
    assert jobs >= 2, "the sweep must hold more jobs than the agent is allowed to take"
    agent = make_agent(tmp_path / "a", coord.base_url, FakeEngine(), max_jobs=1)
    assert await asyncio.wait_for(agent.run(), 60) == 0      # stops by itself
    assert agent.contribution.read()["jobs"] == 1
    assert (await db_counts(coord))["leases"] == 1            # the last job allowed: nothing leased ahead
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
    skipped = await _skips_of_a_run(coord, tmp_path, 60)
    assert skipped == [{"photoId": gone.id, "reason": "fetch failed: HTTP 404"}]


async def _skips_of_a_run(coord, tmp_path, within_s: float) -> list[dict]:
    """The photos skipped in the results of one agent run over every queued job."""
    agent = make_agent(tmp_path / "a", coord.base_url, FakeEngine())
    task = asyncio.create_task(agent.run())
    jobs = len((await db_counts(coord))["jobs"])
    await agent.wait_until(lambda: agent.contribution.read()["jobs"] == jobs, within_s)
    agent.request_stop()
    await asyncio.wait_for(task, 10)
    return [k for r in (await db_counts(coord))["results"] for k in r.body["skipped"]]


def _bomb_jpeg(width: int = 14000, height: int = 13000) -> bytes:
    """A JPEG of 16 x 16 px whose header declares ``width`` x ``height``: past Pillow's
    decompression-bomb bound (2 x MAX_IMAGE_PIXELS) at the defaults, in under a kilobyte."""
    import struct

    from PIL import Image

    buf = io.BytesIO()
    Image.new("RGB", (16, 16)).save(buf, "JPEG")
    data = bytearray(buf.getvalue())
    sof = data.index(b"\xff\xc0")
    data[sof + 5:sof + 9] = struct.pack(">HH", height, width)
    return bytes(data)


async def test_a_decompression_bomb_is_skipped_with_its_reason_and_its_job_goes_on(coord, photos, tmp_path):
    """Pillow raised DecompressionBombError out of the fetch: the whole job was lost, on every node."""
    await request_sweep(coord)
    bomb = photos.photos[0]
    photos._jpegs[bomb.id] = _bomb_jpeg()
    skipped = await _skips_of_a_run(coord, tmp_path, 30)
    assert [k["photoId"] for k in skipped] == [bomb.id]
    assert skipped[0]["reason"].startswith("image too large to decode (DecompressionBombError")


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


@pytest.mark.parametrize("concurrency", [1, 2])
async def test_a_jobs_photos_are_fetched_as_many_at_once_as_photo_concurrency_says(coord, photos, tmp_path,
                                                                                   concurrency):
    await request_sweep(coord)
    jobs = len((await db_counts(coord))["jobs"])
    photos.delay_s = 0.1                 # every request of a job's fetch is in flight together
    agent = make_agent(tmp_path / "a", coord.base_url, FakeEngine(), photo_concurrency=concurrency)
    task = asyncio.create_task(agent.run())
    await agent.wait_until(lambda: agent.contribution.read()["jobs"] == jobs, 60)
    agent.request_stop()
    await asyncio.wait_for(task, 10)
    assert photos.most_in_flight == concurrency       # jobs of 3 photos here; the default would be 3


async def test_a_photo_over_the_size_limit_is_not_downloaded_whole_and_is_skipped(coord, photos, tmp_path):
    await request_sweep(coord)
    engine = FakeEngine()
    agent = make_agent(tmp_path / "a", coord.base_url, engine, photo_max_bytes=2000)
    task = asyncio.create_task(agent.run())
    jobs = len((await db_counts(coord))["jobs"])
    # Every photo is over the limit, so no result read a photo: the coordinator refuses each for
    # good (it says nothing of the ground), and the agent keeps it aside with what it skipped.
    await agent.wait_until(lambda: agent.contribution.read()["rejected"] == jobs, 60)
    agent.request_stop()
    await asyncio.wait_for(task, 10)
    assert set(engine.images_seen) == {0}
    sent = [read_json(f)["result"] for f in sorted(agent.spool.rejected_dir.glob("*.json"))]
    assert len(sent) == jobs
    reasons = {k["reason"] for r in sent for k in r["skipped"]}
    assert reasons == {"fetch refused: larger than 2000 bytes"}


async def test_a_job_journal_that_is_not_an_object_is_dropped_and_the_agent_works(coord, photos, tmp_path):
    """A current-job.json of "y" raised at every turn: the agent ran and never took a job."""
    await request_sweep(coord)
    home = tmp_path / "a"
    home.mkdir()
    (home / "current-job.json").write_text('"y"')
    agent = make_agent(home, coord.base_url, FakeEngine(), max_jobs=1)
    assert await asyncio.wait_for(agent.run(), 30) == 0
    assert agent.contribution.read()["jobs"] == 1
