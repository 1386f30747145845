"""The agent on a host whose disk is full (audit h17, N1-N3): an enrolled node starts and sends
its spooled results, which frees space; an acknowledged result whose count cannot be written
costs the agent nothing; a job whose journal cannot be written is given back before the engine
runs it; a refused result that cannot be copied aside with its reason is moved aside as it
was. ENOSPC is faked at os.write, as in test_disk_full.py (CI may run as root)."""
from __future__ import annotations

import asyncio
import errno
import json
import logging
import os

import node_agent.files as files
from node_agent import identity as ident_mod
from node_agent.contribution import Contribution
from node_agent.protocol import Unreachable
from node_agent.spool import Spool

from .support import FakeEngine, db_counts, make_agent, request_sweep


def _full(*_a, **_k):
    raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))


def _switchable(monkeypatch) -> dict:
    """os.write of the agent's durable writes refusing with ENOSPC while ``full["on"]``."""
    real_write = files.os.write
    full = {"on": False}

    def write(fd, data):
        if full["on"]:
            _full()
        return real_write(fd, data)

    monkeypatch.setattr(files.os, "write", write)
    return full


def _no_traceback(caplog) -> None:
    assert not [r for r in caplog.records if r.exc_info], "no traceback"


def test_an_identity_that_does_not_change_is_not_written(tmp_path, monkeypatch):
    path = tmp_path / "identity.json"
    ident = ident_mod.for_coordinator(path, "http://c.example", "node-a")
    ident_mod.enrolled(path, ident, "n_1", "tok")
    before = path.stat().st_mtime_ns, path.read_bytes()
    monkeypatch.setattr(files.os, "write", _full)
    again = ident_mod.for_coordinator(path, "http://c.example", "node-a")      # raised OSError ENOSPC
    assert (again.node_id, again.token) == ("n_1", "tok")
    assert (path.stat().st_mtime_ns, path.read_bytes()) == before


async def test_a_first_run_on_a_full_disk_is_one_line_and_status_2(tmp_path, monkeypatch, caplog):
    agent = make_agent(tmp_path / "a", "http://127.0.0.1:9", FakeEngine())
    monkeypatch.setattr(files.os, "write", _full)
    assert await asyncio.wait_for(agent.run(), 20) == 2
    errors = [r.getMessage() for r in caplog.records if r.levelno >= logging.ERROR]
    assert errors == [f"cannot write {agent.paths.identity_file}: No space left on device; free some space"]
    _no_traceback(caplog)


async def test_an_enrolled_node_on_a_full_disk_sends_its_spool_and_counts_in_memory(coord, tmp_path, monkeypatch,
                                                                                   caplog):
    """It printed a 49-line traceback at start (identity.json rewritten unchanged) and exited 1,
    every time; then the contribution's write, once the result was acknowledged, raised."""
    caplog.set_level(logging.INFO, logger="sis.node")
    await request_sweep(coord)
    home = tmp_path / "a"
    first = make_agent(home, coord.base_url, FakeEngine(), work_ahead=False, max_jobs=1)

    async def down(*_a, **_k):
        raise Unreachable("the coordinator is down (test)")
    monkeypatch.setattr(first.client, "submit", down)
    monkeypatch.setattr(first.client, "submit_and_lease", down)
    assert await asyncio.wait_for(first.run(), 60) == 5         # its result left in the spool
    assert len(first.spool) == 1

    full = _switchable(monkeypatch)
    full["on"] = True
    agent = make_agent(home, coord.base_url, FakeEngine(), work_ahead=False)
    task = asyncio.create_task(agent.run())
    try:
        await agent.wait_until(lambda: len(agent.spool) == 0, 30)
        await agent.wait_until(lambda: agent.contribution.unwritten == 1, 10)
        assert not task.done()
        assert agent.contribution.read()["jobs"] == 0           # not in the file yet
        full["on"] = False
        agent.request_stop()
        assert await asyncio.wait_for(task, 30) == 0
    finally:
        full["on"] = False
        task.cancel()
    # Written with the next count, or at the stop (a job leased once the space is freed is counted too).
    assert agent.contribution.read()["jobs"] == 1 + agent.jobs_finished
    assert len((await db_counts(coord))["results"]) == 1 + agent.jobs_finished
    said = [r.getMessage() for r in caplog.records if "contribution file" in r.getMessage()]
    assert len(said) == 2 and "cannot be written (No space left on device; free some space)" in said[0]
    assert "is written again" in said[1]
    _no_traceback(caplog)


def test_a_count_the_disk_refuses_is_kept_until_it_can_be_written(tmp_path, monkeypatch, caplog):
    c = Contribution(tmp_path / "contribution.json")
    c.acknowledged("ls_0", 3, 2, 10.0, True)
    full = _switchable(monkeypatch)
    full["on"] = True
    for i in range(3):
        total = c.acknowledged(f"ls_a{i}", 1, 1, 5.0, True)      # raised OSError ENOSPC
        c.rejected(f"ls_r{i}")
        assert c.acknowledged(f"ls_a{i}", 1, 1, 5.0, True)["jobs"] == total["jobs"]   # kept: counted once
    assert total["jobs"] == 4 and c.read()["jobs"] == 1 and c.unwritten == 3
    warnings = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    assert len(warnings) == 1
    full["on"] = False
    c.refused_job()
    doc = c.read()
    assert (doc["jobs"], doc["photos"], doc["facts"], doc["gpuSeconds"], doc["rejected"], doc["refusedJobs"]) == \
        (4, 6, 5, 25.0, 3, 1)
    assert c.unwritten == 0


async def test_a_job_whose_journal_the_disk_refuses_is_given_back_before_the_engine_runs(coord, tmp_path,
                                                                                       monkeypatch, caplog):
    """The engine ran it anyway, its result could not be spooled and was dropped, and the next
    job was leased: every job leased while the disk was full was computed and lost."""
    caplog.set_level(logging.INFO, logger="sis.node")
    engine = FakeEngine()
    agent = make_agent(tmp_path / "a", coord.base_url, engine, work_ahead=False, max_jobs=1)
    full = _switchable(monkeypatch)
    released = []
    real_release = agent.client.release

    async def release(lease_id, reason):
        released.append(lease_id)
        return await real_release(lease_id, reason)
    monkeypatch.setattr(agent.client, "release", release)
    task = asyncio.create_task(agent.run())
    try:
        await agent.wait_until(lambda: agent.identity is not None and agent.identity.enrolled, 20)
        full["on"] = True                   # the disk fills while the agent idles
        await request_sweep(coord)
        await agent.wait_until(lambda: len(released) >= 2, 30)
        assert engine.jobs == []            # never run unjournalled
        assert len(set(released)) == len(released)
        jobs = (await db_counts(coord))["jobs"]
        assert all(failures == 0 for _, _, failures in jobs)    # given back: no failure counted
        full["on"] = False                  # the volunteer frees some space
        assert await asyncio.wait_for(task, 60) == 0
    finally:
        full["on"] = False
        task.cancel()
    assert len(engine.jobs) == 1 and agent.contribution.read()["jobs"] == 1
    said = [r.getMessage() for r in caplog.records if "cannot be journalled" in r.getMessage()]
    assert said and all("No space left on device; free some space" in s and "given back" in s for s in said)
    _no_traceback(caplog)


def test_a_refused_result_the_disk_has_no_room_to_copy_is_moved_aside_as_it_was(tmp_path, monkeypatch, caplog):
    """Its copy with the reason raised ENOSPC and it stayed in the spool: sent again and refused again
    at every turn, and the results spooled after it were never sent."""
    spool = Spool(tmp_path / "spool", "http://c")
    refused = spool.put("ls_1", "job-1", {"jobId": "job-1"})
    spool.put("ls_2", "job-2", {"jobId": "job-2"})
    spool.rejected_dir.mkdir()
    full = _switchable(monkeypatch)
    full["on"] = True
    spool.rejected(refused, "photo 3: outside the job's cell")
    assert [i.lease_id for i in spool.pending()] == ["ls_2"]
    kept = json.loads((spool.rejected_dir / "ls_1.json").read_text())
    assert kept["leaseId"] == "ls_1" and kept["result"] == {"jobId": "job-1"}
    said = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    assert said == [f"the refused result of job-1 is kept in {spool.rejected_dir / 'ls_1.json'} as it was spooled, "
                    "without its reason (photo 3: outside the job's cell): it could not be written (No space left "
                    "on device; free some space)"]
