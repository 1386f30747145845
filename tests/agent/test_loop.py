"""The job loop against a real coordinator and the fake photo provider."""
from __future__ import annotations

import asyncio

from .support import FakeEngine, db_counts, make_agent, request_sweep


async def test_agent_leases_computes_and_submits_every_job(coord, photos, tmp_path):
    await request_sweep(coord)
    jobs = len((await db_counts(coord))["jobs"])
    agent = make_agent(tmp_path / "a", coord.base_url, FakeEngine())
    task = asyncio.create_task(agent.run())
    await agent.wait_until(lambda: agent.contribution.read()["jobs"] == jobs, 30)
    agent.request_stop()
    assert await asyncio.wait_for(task, 10) == 0
    counts = await db_counts(coord)
    assert [r.state for r in counts["results"]] == ["pending"] * jobs
    assert agent.contribution.read()["photos"] == len(photos.photos)
