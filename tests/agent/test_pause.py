"""A paused agent leases nothing: by `sis-node pause`, while the user is active, on battery,
or while other programs load the CPU. A job already running finishes; nothing new starts (a job
held ahead is given back)."""
from __future__ import annotations

import asyncio
import logging
import time

import pytest
from sqlalchemy import select

from coordinator.core.db.models import SweepLease
from node_agent import cli
from node_agent.config import Paths
from node_agent.policy import Policy

from .support import FakeEngine, agent_config, db_counts, make_agent, request_sweep, run_holding_ahead


async def _leases_nothing_while(agent, coord, turns: int = 20) -> None:
    task = asyncio.create_task(agent.run())
    await agent.wait_until(lambda: agent.paused_turns >= turns or agent.leases_taken > 0, 60)
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
    ("other_cpu", 93.0, "other programs use 93% of the CPU (limit 70%, cpu_busy_percent: "
                        "SIS_NODE_CPU_BUSY_PERCENT=0 turns this check off)"),
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

    current = {"all": 10.0, "own": 2.0, "t": 100.0}   # all busy s, the agent's own s, clock s
    probe = OtherCpu(lambda: current["all"], lambda: current["own"], lambda: current["t"], cores=2,
                     sleep=lambda s: None)
    assert probe() is None  # one sample is no rate (the clock here does not move while it waits)
    current.update({"all": 13.0, "own": 3.0, "t": 102.0})
    # 3 s busy over 2 s on 2 cores, of which 1 s was the agent's own: others used 2/4 = 50%
    assert probe() == 50.0


def test_the_agents_own_cpu_counts_its_child_processes():
    """The engine's geometry workers are the agent's load: counted as another program's, a node
    with cpu_threads > 1 could pause itself on its own work."""
    import subprocess
    import sys
    import time

    import psutil

    from node_agent.policy import _own_busy_s
    me = psutil.Process()
    before = _own_busy_s(me)
    child = subprocess.Popen([sys.executable, "-c", "import time\nend = time.process_time() + 0.6\n"
                                                    "while time.process_time() < end: pass\ntime.sleep(30)"])
    try:
        deadline = time.monotonic() + 20
        while psutil.Process(child.pid).cpu_times().user < 0.5 and time.monotonic() < deadline:
            time.sleep(0.05)
        assert _own_busy_s(me) - before >= 0.5        # the live child's CPU is the agent's own
    finally:
        child.kill()
        child.wait()


def test_a_cpu_reading_inside_its_interval_answers_the_share_last_measured():
    """The loop checks its pause conditions several times in one turn, milliseconds apart: a
    reading then must be the last share measured, not "no reading" (which lifted the pause)."""
    from node_agent.policy import OtherCpu

    current = {"all": 0.0, "t": 0.0}
    probe = OtherCpu(lambda: current["all"], lambda: 0.0, lambda: current["t"], cores=2, sleep=lambda s: None)
    current.update({"all": 1.6, "t": 1.0})
    assert probe() == 80.0
    for t in (1.1, 1.2, 1.45):          # inside the interval: the same verdict, each time
        current.update({"all": current["all"] + 0.01, "t": t})
        assert probe() == 80.0
    # ... and the interval still runs from the last measurement (t=1.0), not from the last call.
    current.update({"all": 1.6 + 0.6, "t": 1.5})
    assert probe() == pytest.approx(60.0)


def test_the_first_cpu_reading_waits_out_its_interval_rather_than_answer_not_busy():
    from node_agent.policy import OtherCpu

    current = {"all": 0.0, "t": 50.0}
    waits = []

    def sleep(s):                      # a busy machine: both cores while the probe waits
        waits.append(s)
        current["t"] += s
        current["all"] += 2 * s
    probe = OtherCpu(lambda: current["all"], lambda: 0.0, lambda: current["t"], cores=2, sleep=sleep)
    current["t"] += 0.1
    assert probe() > 70.0
    assert waits == [pytest.approx(0.4)]   # the rest of the interval begun when the probe was made


def test_a_probe_that_cannot_see_for_a_moment_keeps_its_last_answer(tmp_path):
    cfg = agent_config("http://127.0.0.1:9", pause_on_battery=True, pause_when_user_active=True,
                       cpu_busy_percent=70.0)
    paths = Paths(tmp_path, tmp_path).ensure()
    answers = {"idle": [12.0, None, None], "battery": [True, None, None]}
    now = {"t": 0.0}
    policy = Policy(cfg, paths.pause_file, idle=lambda: answers["idle"].pop(0),
                    battery=lambda: answers["battery"].pop(0), other_cpu=lambda: 10.0, clock=lambda: now["t"])
    first = policy.check()
    now["t"] = 30.0    # xprintidle failed once, the battery's state unknown while it switches
    second = policy.check()
    assert second.paused and second.reasons == first.reasons == [
        "the user is active (input 12 s ago)", "the machine runs on battery"]
    assert {"battery", "user activity"} <= set(second.watching)
    now["t"] = 30.0 + 61.0    # blind for longer than BLIND_HOLD_S: no longer watched
    third = policy.check()
    assert not third.paused and "battery" not in third.watching and "user activity" not in third.watching


class _Load:
    """Other programs' CPU time, as ``psutil.cpu_times`` would count it on a 2-core machine
    whose cores they keep ``share`` percent busy."""

    def __init__(self) -> None:
        self.busy, self.t, self.share = 0.0, time.monotonic(), 0.0

    def __call__(self) -> float:
        now = time.monotonic()
        self.busy += (now - self.t) * 2 * self.share / 100
        self.t = now
        return self.busy


async def test_a_busy_cpu_pauses_the_agent_from_its_first_check_and_the_pause_holds(coord, tmp_path, caplog):
    from node_agent.policy import OtherCpu

    caplog.set_level(logging.INFO, logger="sis.node")
    await request_sweep(coord)
    load = _Load()
    load.share = 100.0
    agent = make_agent(tmp_path / "a", coord.base_url, FakeEngine(), cpu_busy_percent=70.0,
                       other_cpu=OtherCpu(load, lambda: 0.0, cores=2))
    task = await _leases_nothing_while(agent, coord, turns=40)    # 2 s and more: four readings and more
    assert agent.status.doc["pauseReasons"] == ["other programs use 100% of the CPU (limit 70%, cpu_busy_percent: "
                                                "SIS_NODE_CPU_BUSY_PERCENT=0 turns this check off)"]
    assert not [r for r in caplog.records if r.getMessage().startswith("resumed")]
    agent.request_stop()
    assert await asyncio.wait_for(task, 10) == 0


async def test_a_cpu_pause_gives_back_the_job_held_ahead_and_holds_until_the_cpu_is_free(coord, tmp_path,
                                                                                          caplog):
    """The walkthrough's case: both cores busy while a job runs. The job finishes, the one held
    ahead is given back, and no job is leased while the CPU stays busy: the pause must not lift
    at the next check of the same turn."""
    from node_agent.policy import OtherCpu

    caplog.set_level(logging.INFO, logger="sis.node")
    await request_sweep(coord)
    assert len((await db_counts(coord))["jobs"]) >= 2
    load = _Load()
    engine = FakeEngine(hold=True)
    agent = make_agent(tmp_path / "a", coord.base_url, engine, cpu_busy_percent=70.0,
                       other_cpu=OtherCpu(load, lambda: 0.0, cores=2))
    task = await run_holding_ahead(agent, engine)
    load.busy += 1000.0     # from now on both cores busy; any reading spanning this moment is 100%
    load.share = 100.0
    await asyncio.sleep(0.6)     # a full interval, so the next check measures the busy CPU
    engine.gate.set()
    await agent.wait_until(lambda: len(engine.jobs) > 1 or (agent.contribution.read()["jobs"] == 1
                                                            and agent.paused_turns >= 40), 60)
    assert len(engine.jobs) == 1 and agent.leases_taken == 1
    async with coord.services.db.read() as s:
        leases = (await s.execute(select(SweepLease.state).order_by(SweepLease.leased_at))).scalars().all()
    assert leases == ["submitted", "cancelled"]    # the job ahead, given back; nothing leased after
    messages = [r.getMessage() for r in caplog.records]
    assert not [m for m in messages if m.startswith("resumed")], messages
    assert agent.status.doc["state"] == "paused"

    load.share = 0.0        # the other programs end: the agent goes on
    await agent.wait_until(lambda: agent.contribution.read()["jobs"] >= 2, 60)
    assert any(m.startswith("resumed: no pause condition holds") for m in (r.getMessage() for r in caplog.records))
    agent.request_stop()
    assert await asyncio.wait_for(task, 20) == 0


def test_the_cpu_probe_reads_this_machine():
    import time

    from node_agent.policy import OtherCpu

    probe = OtherCpu()
    probe()
    time.sleep(0.55)  # a rate needs two samples apart in time
    share = probe()
    assert share is not None and 0.0 <= share <= 100.0


async def test_a_node_with_nothing_to_do_says_so_once(coord, tmp_path, caplog):
    """With no job for it, the agent logged only at debug: a volunteer (or a second demo node sharing the
    first's identity) saw silence. Said at info once a quiet spell, not at every poll."""
    caplog.set_level(logging.INFO, logger="sis.node")
    agent = make_agent(tmp_path / "a", coord.base_url, FakeEngine())
    task = asyncio.create_task(agent.run())
    await asyncio.sleep(1.5)                                   # several polls of 0.2 s
    said = [r for r in caplog.records if r.getMessage().startswith("no job waits for this node")]
    assert len(said) == 1 and said[0].levelno == logging.INFO
    agent.request_stop()
    assert await asyncio.wait_for(task, 10) == 0
