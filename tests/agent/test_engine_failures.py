"""An engine that fails on every job (a broken driver, missing weights, out of memory) pauses
the agent after ``engine_failure_limit`` jobs in a row, saying why, until ``sis-node resume``."""
from __future__ import annotations

import asyncio
import logging

from node_agent import cli
from node_agent.policy import manual_pause

from .support import (FakeEngine, db_counts, make_agent, request_sweep, start_photos, start_sweep_coordinator,
                      stop_sweep_coordinator)


class ScriptedEngine(FakeEngine):
    """Fails the jobs ``script`` says (True: fail, as a GPU out of memory does), in order; after
    the script, as ``fail`` says."""

    def __init__(self, script: list[bool], fail: bool = False):
        super().__init__()
        self.script, self.failing = list(script), fail

    def run_job(self, job, images):
        if self.script.pop(0) if self.script else self.failing:
            self.jobs.append(job.job_id)
            raise RuntimeError("CUDA error: out of memory\nCUDA kernel errors might be asynchronously reported")
        return super().run_job(job, images)


async def _coordinator(sqlite_url, jobs: int):
    photos = await start_photos(n=3 * jobs)       # jobs of 3 photos
    return photos, await start_sweep_coordinator(sqlite_url, photos)


async def test_an_engine_failing_on_every_job_pauses_the_agent_after_three_saying_why(sqlite_url, tmp_path,
                                                                                   monkeypatch, capsys, caplog):
    """It leased on and on: every job failed, and each lapsed lease counted against a good job."""
    caplog.set_level(logging.INFO, logger="sis.node")
    photos, coord = await _coordinator(sqlite_url, 5)
    try:
        await request_sweep(coord)
        home = tmp_path / "a"
        engine = ScriptedEngine([], fail=True)
        agent = make_agent(home, coord.base_url, engine)
        task = asyncio.create_task(agent.run())
        await agent.wait_until(lambda: agent.paused_turns >= 3, 60)
        assert len(engine.jobs) == 3 and agent._ahead is None      # a job taken ahead is given back
        reason = manual_pause(agent.paths.pause_file)
        assert reason == (f"the engine failed on 3 jobs in a row, the last ({engine.jobs[-1]}) with RuntimeError: "
                          "CUDA error: out of memory CUDA kernel errors might be asynchronously reported: fix its "
                          "cause first (the GPU driver, the engine's weights, the GPU's memory; see the log)")
        said = [r.getMessage() for r in caplog.records if r.levelno == logging.ERROR and r.name == "sis.node.engine"]
        assert said == [f"paused: {reason}; then `sis-node resume`"]
        monkeypatch.setenv("SIS_NODE_HOME", str(home))
        assert cli.main(["status"]) == 0
        assert f"paused:       yes ({reason}); `sis-node resume` lifts it" in capsys.readouterr().out

        engine.failing = False              # the volunteer fixed the driver, then resumed
        assert cli.main(["resume"]) == 0
        left = len((await db_counts(coord))["jobs"]) - 3       # the jobs never taken, or given back
        await agent.wait_until(lambda: agent.contribution.read()["jobs"] == left, 60)
        agent.request_stop()
        assert await asyncio.wait_for(task, 20) == 0
    finally:
        await stop_sweep_coordinator(coord)
        await photos.stop()


async def test_a_success_ends_a_run_of_engine_failures(sqlite_url, tmp_path):
    photos, coord = await _coordinator(sqlite_url, 4)
    try:
        await request_sweep(coord)
        engine = ScriptedEngine([True, False, True, False])
        agent = make_agent(tmp_path / "a", coord.base_url, engine, engine_failure_limit=2, work_ahead=False)
        task = asyncio.create_task(agent.run())
        await agent.wait_until(lambda: len(engine.jobs) >= 4 and agent.contribution.read()["jobs"] >= 2, 60)
        agent.request_stop()
        assert await asyncio.wait_for(task, 20) == 0
        assert not agent.paths.pause_file.exists() and agent.paused_turns == 0
    finally:
        await stop_sweep_coordinator(coord)
        await photos.stop()


async def test_an_engine_failure_limit_of_0_never_pauses(coord, tmp_path):
    await request_sweep(coord)
    engine = FakeEngine(fail=True)
    agent = make_agent(tmp_path / "a", coord.base_url, engine, engine_failure_limit=0)
    task = asyncio.create_task(agent.run())
    await agent.wait_until(lambda: len(engine.jobs) >= 2 and agent.engine_failures.in_a_row >= 2, 60)
    agent.request_stop()
    assert await asyncio.wait_for(task, 20) == 0
    assert not agent.paths.pause_file.exists()
