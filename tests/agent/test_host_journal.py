"""A job journal that cannot be read (audit h17, N6): cut short, not a journal, or refused by the
host, it was dropped without a word. It is now said, naming the file and why, and moved aside
to journals/corrupt/ as the spool moves its own to spool/corrupt/. A refusal is faked (CI may
run as root, which file permissions do not stop)."""
from __future__ import annotations

import asyncio
import errno
import logging
import os
import pathlib

import pytest

from node_agent.config import Paths
from node_agent.journal import Journals

from .support import FakeEngine, make_agent


@pytest.mark.parametrize("content, why", [
    ('{"leaseId": "ls_x", "jobId": "job-9", "jo', "it is not JSON, or cut short"),
    ("", "it is empty"),
    ('["ls_x"]', "it does not hold a JSON object"),
    ('{"jobId": "job-9"}', "it names no lease"),
])
def test_a_journal_that_cannot_be_read_is_said_and_set_aside(tmp_path, caplog, content, why):
    paths = Paths(tmp_path, tmp_path).ensure()
    journals = Journals(paths, "http://c.example")
    paths.current_job_file.write_text(content, encoding="utf-8")
    assert journals.read(paths.current_job_file) is None
    assert not paths.current_job_file.exists()
    aside = list((tmp_path / "journals" / "corrupt").iterdir())
    assert len(aside) == 1 and aside[0].read_text(encoding="utf-8") == content
    said = [r.getMessage() for r in caplog.records if r.levelno == logging.ERROR]
    assert said == [f"journal {paths.current_job_file} (of the job leased before the restart) cannot be read ({why}): "
                    f"its job's lease lapses, and the coordinator re-leases the job; moved to {aside[0].parent}"]
    assert journals.elsewhere() == []       # not taken for a journal kept for another coordinator


def test_no_journal_is_no_word(tmp_path, caplog):
    paths = Paths(tmp_path, tmp_path).ensure()
    assert Journals(paths, "http://c.example").read(paths.ahead_job_file) is None
    assert not caplog.records


async def test_an_agent_restarted_over_unreadable_journals_says_so_and_goes_on(coord, tmp_path, monkeypatch, caplog):
    agent = make_agent(tmp_path / "a", coord.base_url, FakeEngine())
    current, ahead = agent.paths.current_job_file, agent.paths.ahead_job_file
    current.write_text('{"leaseId": "ls_x", "jobId": "job-9", "heartbeatS": 1}', encoding="utf-8")
    ahead.write_text('{"leaseId": "ls_y", "jo', encoding="utf-8")
    real = pathlib.Path.read_text

    def read_text(self, *a, **k):
        if self == current:         # another user's file (the audit's chown 65534, mode 0600)
            raise PermissionError(errno.EACCES, os.strerror(errno.EACCES), str(self))
        return real(self, *a, **k)
    monkeypatch.setattr(pathlib.Path, "read_text", read_text)
    task = asyncio.create_task(agent.run())
    try:
        await agent.wait_until(lambda: agent._recovered, 20)
        agent.request_stop()
        assert await asyncio.wait_for(task, 20) == 0
    finally:
        task.cancel()
    said = [r.getMessage() for r in caplog.records if r.levelno == logging.ERROR]
    assert len(said) == 2
    assert said[0].startswith(f"journal {ahead} (of the job held ahead before the restart) cannot be read (it is "
                              f"not JSON, or cut short): its job's lease lapses")
    assert said[1].startswith(f"journal {current} (of the job leased before the restart) cannot be read "
                              f"(PermissionError: Permission denied): its job's lease lapses")
    assert not current.exists() and not ahead.exists()
    assert len(list((agent.paths.data_dir / "journals" / "corrupt").iterdir())) == 2
