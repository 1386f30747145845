"""A paused agent leases nothing: by `sis-node pause`, while the user is active, on battery,
or while other programs load the CPU. A job already running finishes; nothing new starts (a job
held ahead is given back)."""
from __future__ import annotations

import asyncio

import pytest
from sqlalchemy import select

from coordinator.core.db.models import SweepLease
from node_agent import cli
from node_agent.config import Paths
from node_agent.policy import Policy

from .support import FakeEngine, agent_config, db_counts, make_agent, request_sweep, run_holding_ahead


async def _leases_nothing_while(agent, coord, turns: int = 20) -> None:
    task = asyncio.create_task(agent.run())
    await agent.wait_until(lambda: agent.paused_turns >= turns, 60)
    assert agent.leases_taken == 0
    assert (await db_counts(coord))["leases"] == 0
    assert agent.status.doc["state"] == "paused"
    return task


async def test_agent_paused_by_the_volunteer_leases_nothing_until_resumed(coord, tmp_path, monkeypatch, capsys):
    await request_sweep(coord)
    home = tmp_path / "a"
    monkeypatch.setenv("SIS_NODE_HOME", str(home))
    assert cli.main(["pause", "--reason", "gaming tonight"]) == 0
    agent = make_agent(home, coord.base_url, FakeEngine())
    task = await _leases_nothing_while(agent, coord)
    assert agent.status.doc["pauseReasons"] == ["gaming tonight"]
    assert cli.main(["status"]) == 0
    assert "paused:       yes (gaming tonight)" in capsys.readouterr().out

    assert cli.main(["resume"]) == 0
    await agent.wait_until(lambda: agent.contribution.read()["jobs"] >= 1, 60)
    agent.request_stop()
    await asyncio.wait_for(task, 20)
    assert (await db_counts(coord))["leases"] >= 1


@pytest.mark.parametrize("probe,value,reason", [
    ("battery", True, "the machine runs on battery"),
    ("idle", 12.0, "the user is active (input 12 s ago)"),
    ("other_cpu", 93.0, "other programs use 93% of the CPU (limit 70%)"),
])
async def test_agent_paused_by_the_machine_leases_nothing(coord, tmp_path, probe, value, reason):
    await request_sweep(coord)
    agent = make_agent(tmp_path / "a", coord.base_url, FakeEngine(), **{probe: lambda: value},
                       pause_on_battery=True, pause_when_user_active=True, cpu_busy_percent=70.0)
    task = await _leases_nothing_while(agent, coord)
    assert agent.status.doc["pauseReasons"] == [reason]
    agent.request_stop()
    assert await asyncio.wait_for(task, 10) == 0


async def test_pause_during_a_job_lets_it_finish_then_leases_nothing(coord, tmp_path, monkeypatch):
    await request_sweep(coord)
    assert len((await db_counts(coord))["jobs"]) >= 2
    home = tmp_path / "a"
    monkeypatch.setenv("SIS_NODE_HOME", str(home))
    engine = FakeEngine(hold=True)
    agent = make_agent(home, coord.base_url, engine)
    task = await run_holding_ahead(agent, engine)
    assert cli.main(["pause"]) == 0
    engine.gate.set()
    await agent.wait_until(lambda: agent.contribution.read()["jobs"] == 1 and agent.paused_turns >= 20, 60)
    counts = await db_counts(coord)
    async with coord.services.db.read() as s:
        leases = (await s.execute(select(SweepLease.state).order_by(SweepLease.leased_at))).scalars().all()
    assert leases == ["submitted", "cancelled"] and len(counts["results"]) == 1   # the job ahead, given back
    assert len(engine.jobs) == 1
    agent.request_stop()
    await asyncio.wait_for(task, 10)


def test_probes_that_cannot_see_never_pause_and_are_not_claimed_as_watched(tmp_path):
    cfg = agent_config("http://127.0.0.1:9", pause_on_battery=True, pause_when_user_active=True,
                       cpu_busy_percent=70.0)
    paths = Paths(tmp_path, tmp_path).ensure()
    v = Policy(cfg, paths.pause_file, idle=lambda: None, battery=lambda: None, other_cpu=lambda: None).check()
    assert not v.paused
    assert "battery" not in v.watching and "user activity" not in v.watching


def test_the_user_away_long_enough_and_mains_power_do_not_pause(tmp_path):
    cfg = agent_config("http://127.0.0.1:9", pause_on_battery=True, pause_when_user_active=True,
                       user_idle_minutes=3.0, cpu_busy_percent=70.0)
    paths = Paths(tmp_path, tmp_path).ensure()
    v = Policy(cfg, paths.pause_file, idle=lambda: 181.0, battery=lambda: False, other_cpu=lambda: 20.0).check()
    assert not v.paused and v.reasons == []
    assert {"battery", "user activity", "CPU load of other programs"} <= set(v.watching)


def test_the_cpu_probe_counts_other_programs_not_the_agent():
    from node_agent.policy import OtherCpu

    samples = iter([(10.0, 2.0, 100.0), (13.0, 3.0, 102.0)])  # (all busy s, agent's own s, clock s)
    current = {}

    def take():
        current.update(zip(("all", "own", "t"), next(samples)))
    take()
    probe = OtherCpu(lambda: current["all"], lambda: current["own"], lambda: current["t"], cores=2)
    assert probe() is None  # one sample is no rate
    take()
    # 3 s busy over 2 s on 2 cores, of which 1 s was the agent's own: others used 2/4 = 50%
    assert probe() == 50.0


def test_the_cpu_probe_reads_this_machine():
    import time

    from node_agent.policy import OtherCpu

    probe = OtherCpu()
    probe()
    time.sleep(0.55)  # a rate needs two samples apart in time
    share = probe()
    assert share is not None and 0.0 <= share <= 100.0
