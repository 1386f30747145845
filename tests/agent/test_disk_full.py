"""A full disk (ENOSPC) costs neither the job nor a traceback: the status file only reports and
goes on, a result that cannot be spooled leaves its job journalled to be resumed, and a failed
atomic write leaves no temporary file behind."""
from __future__ import annotations

import asyncio
import errno
import logging
import os

import pytest

import node_agent.files as files
from node_agent.files import write_atomic
from node_agent.progress import StatusFile

from .support import FakeEngine, make_agent, request_sweep


def _full(*_a, **_k):
    raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))


def test_a_write_that_fails_leaves_the_old_content_and_no_temporary_file(tmp_path, monkeypatch):
    target = tmp_path / "x.json"
    target.write_bytes(b"old")
    monkeypatch.setattr(files.os, "write", _full)
    with pytest.raises(OSError):
        write_atomic(target, b"new")
    assert target.read_bytes() == b"old"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["x.json"]


def test_the_status_file_warns_once_and_goes_on(tmp_path, monkeypatch, caplog):
    status = StatusFile(tmp_path / "status.json")
    monkeypatch.setattr(files.os, "write", _full)
    for n in range(3):
        status.update(state="working", n=n)         # never raises
    assert status.doc["n"] == 2
    warnings = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    assert len(warnings) == 1 and "No space left on device; free some space" in warnings[0]


async def test_a_result_the_disk_refuses_keeps_its_job_journalled_and_the_job_resumes(coord, tmp_path, monkeypatch,
                                                                                    caplog):
    caplog.set_level(logging.INFO, logger="sis.node")
    await request_sweep(coord)
    engine = FakeEngine(hold=True)
    agent = make_agent(tmp_path / "a", coord.base_url, engine, work_ahead=False, max_jobs=1)
    real_write = files.os.write
    full = {"on": False}
    journal_kept = []

    def write(fd, data):
        if full["on"]:
            _full()
        return real_write(fd, data)

    monkeypatch.setattr(files.os, "write", write)
    task = asyncio.create_task(agent.run())
    try:
        await asyncio.to_thread(engine.started.wait, 20)
        first = engine.jobs[0]
        full["on"] = True                   # the disk fills while the engine runs
        engine.gate.set()
        await agent.wait_until(lambda: "cannot save the result" in str(agent.status.doc.get("lastError")), 30)
        journal_kept.append(agent.paths.current_job_file.exists())
        assert len(agent.spool) == 0
        full["on"] = False                  # the volunteer frees some space
        assert await asyncio.wait_for(task, 60) == 0
    finally:
        engine.gate.set()
        task.cancel()
    assert journal_kept == [True]
    assert engine.jobs == [first, first]    # resumed on its lease, not lost
    assert agent.contribution.read()["jobs"] == 1 and len(agent.spool) == 0
    said = [r.getMessage() for r in caplog.records if "cannot save the result" in r.getMessage()]
    assert len(said) == 1
    assert f"in {agent.spool.folder}: No space left on device; free some space" in said[0]
    assert not [r for r in caplog.records if r.exc_info], "no traceback"
