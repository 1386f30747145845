"""The agent killed mid-job (SIGKILL, no clean-up): a restarted agent resends its spooled
result, resumes the job on its lease, or the coordinator re-leases the job."""
from __future__ import annotations

import asyncio
import os
import signal
import sys
from pathlib import Path

from coordinator.core.db.models import SweepLease
from node_agent import cli
from node_agent.files import read_json
from node_agent.spool import Spool

from .support import (bring_up, db_counts, request_sweep, start_sweep_coordinator, stop_sweep_coordinator,
                      take_down)

ROOT = Path(__file__).resolve().parents[2]


class Proc:
    def __init__(self, home: Path, url: str, tmp: Path):
        self.home, self.url = home, url
        self.hold, self.started = tmp / "hold", tmp / "started"
        self.proc: asyncio.subprocess.Process | None = None
        self.log = tmp / f"agent-{os.getpid()}.out"

    async def start(self, hold: bool) -> "Proc":
        if hold:
            self.hold.write_text("hold")
        self.started.unlink(missing_ok=True)
        env = {**os.environ, "SIS_NODE_HOME": str(self.home), "SIS_TEST_HOLD": str(self.hold),
               "SIS_TEST_STARTED": str(self.started), "SIS_NODE_HEARTBEAT_INTERVAL_S": "0.3",
               "SIS_NODE_BACKOFF_BASE_S": "0.1", "SIS_NODE_BACKOFF_MAX_S": "0.5", "SIS_NODE_IDLE_POLL_S": "0.3",
               "SIS_NODE_CPU_BUSY_PERCENT": "0", "SIS_NODE_PAUSE_WHEN_USER_ACTIVE": "false",
               "SIS_NODE_PAUSE_ON_BATTERY": "false", "SIS_NODE_CHECK_UPDATES": "false", "PYTHONPATH": str(ROOT)}
        out = open(self.log, "ab")
        self.proc = await asyncio.create_subprocess_exec(
            sys.executable, "-m", "tests.agent.agent_proc", "run", "--coordinator", self.url, "--allow-cpu",
            cwd=ROOT, env=env, stdout=out, stderr=out)
        return self

    async def until(self, predicate, timeout: float = 60.0) -> None:
        """Across processes there is no event to await: look every 50 ms."""
        loop = asyncio.get_running_loop()
        end = loop.time() + timeout
        while not await predicate():
            if self.proc.returncode is not None:
                raise AssertionError(f"agent exited {self.proc.returncode}: {self.log.read_text()[-3000:]}")
            if loop.time() > end:
                raise AssertionError(f"timed out; agent log: {self.log.read_text()[-3000:]}")
            await asyncio.sleep(0.05)

    async def kill(self) -> None:
        self.proc.send_signal(signal.SIGKILL)
        await self.proc.wait()

    async def term(self) -> int:
        self.proc.send_signal(signal.SIGTERM)
        return await asyncio.wait_for(self.proc.wait(), 30)


async def _written(p: Path) -> bool:
    """The file is there with its text: the engine writes the job's id after creating it."""
    return p.exists() and bool(p.read_text())


async def test_killed_mid_job_a_restarted_agent_resumes_the_job_on_its_lease(coord, tmp_path):
    await request_sweep(coord)
    home = tmp_path / "home"
    a = await Proc(home, coord.base_url, tmp_path).start(hold=True)
    await a.until(lambda: _written(a.started))
    await a.kill()
    journal = read_json(home / "current-job.json")
    assert journal["jobId"] == a.started.read_text()
    assert len(Spool(home / "spool")) == 0

    a.hold.unlink()
    b = await Proc(home, coord.base_url, tmp_path).start(hold=False)

    async def submitted() -> bool:
        return any(r.body and r.body["jobId"] == journal["jobId"] for r in (await db_counts(coord))["results"])
    await b.until(submitted)
    assert await b.term() == 0
    assert "resuming job" in b.log.read_text()
    counts = await db_counts(coord)
    assert len({r.node_id for r in counts["results"]}) == 1  # one node, enrolled once
    assert not (home / "current-job.json").exists()


async def test_killed_holding_a_job_ahead_a_restarted_agent_gives_it_back_with_no_failure(coord, tmp_path):
    await request_sweep(coord)
    jobs = len((await db_counts(coord))["jobs"])
    assert jobs >= 2
    home = tmp_path / "home"
    a = await Proc(home, coord.base_url, tmp_path).start(hold=True)
    await a.until(lambda: _written(home / "ahead-job.json"))    # leased while the engine holds the first
    await a.kill()
    held = read_json(home / "ahead-job.json")["leaseId"]

    a.hold.unlink()
    b = await Proc(home, coord.base_url, tmp_path).start(hold=False)

    async def done() -> bool:
        return len((await db_counts(coord))["results"]) == jobs
    await b.until(done)
    assert await b.term() == 0
    assert f"(lease {held}), is given back" in b.log.read_text()
    async with coord.services.db.read() as s:
        assert (await s.get(SweepLease, held)).state == "cancelled"
    assert [failures for _, _, failures in (await db_counts(coord))["jobs"]] == [0] * jobs
    assert not (home / "ahead-job.json").exists()


async def test_killed_with_a_spooled_result_a_restarted_agent_resends_it(coord, tmp_path):
    await request_sweep(coord)
    home = tmp_path / "home"
    a = await Proc(home, coord.base_url, tmp_path).start(hold=True)
    await a.until(lambda: _written(a.started))
    first_job = a.started.read_text()
    await take_down(coord)
    a.hold.unlink()  # the job finishes (and the one held ahead, if leased in time); no result can be submitted

    async def spooled() -> bool:
        return len(Spool(home / "spool")) >= 1
    await a.until(spooled)
    await a.kill()
    bring_up(coord)
    assert (await db_counts(coord))["results"] == []

    b = await Proc(home, coord.base_url, tmp_path).start(hold=False)

    async def resent() -> bool:
        return len(Spool(home / "spool")) == 0 and len((await db_counts(coord))["results"]) >= 1
    await b.until(resent)
    assert await b.term() == 0
    counts = await db_counts(coord)
    assert first_job in {r.body["jobId"] for r in counts["results"]}
    assert read_json(home / "contribution.json")["jobs"] >= 1


async def test_killed_and_restarted_after_its_lease_lapsed_the_job_is_re_leased(sqlite_url, photos, tmp_path):
    coord = await start_sweep_coordinator(sqlite_url, photos, lease_ttl_s=1.5, job_max_photos=20)
    try:
        await request_sweep(coord)
        assert len((await db_counts(coord))["jobs"]) == 1
        home = tmp_path / "home"
        a = await Proc(home, coord.base_url, tmp_path).start(hold=True)
        await a.until(lambda: _written(a.started))
        await a.kill()
        journal = read_json(home / "current-job.json")
        lapsed_lease = journal["leaseId"]
        await asyncio.sleep(1.6)  # the lease's TTL has to pass before the sweeper may call it lapsed
        assert await coord.services.extras["sweeps"].sweeper.run_once() == 1
        a.hold.unlink()

        b = await Proc(home, coord.base_url, tmp_path).start(hold=False)

        async def submitted() -> bool:
            return len((await db_counts(coord))["results"]) == 1
        await b.until(submitted)
        assert await b.term() == 0
        text = b.log.read_text()
        assert "is no longer ours" in text
        counts = await db_counts(coord)
        assert counts["leases"] == 2 and counts["jobs"][0].failures == 1
        assert f"lease {lapsed_lease}) is no longer ours" in text
    finally:
        await stop_sweep_coordinator(coord)


async def test_a_second_stop_signal_while_the_engine_runs_stops_at_once_with_no_traceback(coord, tmp_path):
    """Ctrl-C twice mid-job: the engine's task, left running, is cancelled as the event loop
    shuts down; the callback that retrieves its outcome must not raise on a cancelled task
    (asyncio printed "Exception in callback ... CancelledError" with a traceback)."""
    await request_sweep(coord)
    home = tmp_path / "home"
    a = await Proc(home, coord.base_url, tmp_path).start(hold=True)
    await a.until(lambda: _written(a.started))

    async def logged(text: str) -> bool:
        return text in a.log.read_text()
    a.proc.send_signal(signal.SIGINT)
    await a.until(lambda: logged("stopping: the current job (if any) finishes first"))
    a.proc.send_signal(signal.SIGINT)
    assert await asyncio.wait_for(a.proc.wait(), 30) == 0
    a.hold.unlink()
    out = a.log.read_text()
    assert "stopping now" in out and "Exception in callback" not in out and "Traceback" not in out, out
    assert read_json(home / "current-job.json")["jobId"] == a.started.read_text()   # left to its lease


async def test_a_second_agent_on_the_same_data_folder_exits_at_once_and_a_crashed_ones_lock_does_not_block(
        coord, tmp_path, monkeypatch, capsys):
    """Two agents on one data folder took each other's journalled job ("resuming job ...,
    leased before a restart" with no restart) and had its result refused. The second exits at
    once; read-only commands still work beside the agent; once it is killed (SIGKILL: the OS
    lock goes with the process), the next start takes the folder and resumes its job."""
    await request_sweep(coord)
    home = tmp_path / "home"
    a = await Proc(home, coord.base_url, tmp_path).start(hold=True)
    await a.until(lambda: _written(a.started))
    journal = read_json(home / "current-job.json")

    (tmp_path / "b").mkdir()
    b = await Proc(home, coord.base_url, tmp_path / "b").start(hold=False)
    assert await asyncio.wait_for(b.proc.wait(), 30) == cli.EXIT_RUNNING
    out = b.log.read_text()
    assert f"another sis-node is already running with this data folder (pid {a.proc.pid})" in out, out
    assert "resuming job" not in out and "enrol" not in out
    assert read_json(home / "current-job.json") == journal
    assert read_json(home / "status.json")["pid"] == a.proc.pid

    monkeypatch.setenv("SIS_NODE_HOME", str(home))
    capsys.readouterr()
    assert cli.main(["status"]) == 0
    assert f"current job:  {journal['jobId']}" in capsys.readouterr().out
    assert cli.main(["settings"]) == 0 and cli.main(["pause"]) == 0 and cli.main(["resume"]) == 0

    await a.kill()
    assert (home / "agent.lock").read_text().strip() == str(a.proc.pid)     # left behind, and harmless
    a.hold.unlink()
    (tmp_path / "c").mkdir()
    c = await Proc(home, coord.base_url, tmp_path / "c").start(hold=False)

    async def submitted() -> bool:
        return any(r.body and r.body["jobId"] == journal["jobId"] for r in (await db_counts(coord))["results"])
    await c.until(submitted)
    assert await c.term() == 0
    assert "resuming job" in c.log.read_text()
    assert [r.state for r in (await db_counts(coord))["results"]
            if r.body["jobId"] == journal["jobId"]] == ["pending"]
