"""A node revoked by the coordinator's operators is told their reason, in the log and in
``sis-node status``, and ``status`` shows the last problem after the agent has stopped."""
from __future__ import annotations

import asyncio
import logging

from coordinator.sweeps import nodes as registry
from node_agent import cli
from node_agent.files import read_json

from .support import FakeEngine, db_counts, make_agent, request_sweep

REASON = "results disagree with every replica"


async def _enrolled_then_revoked(coord, home) -> str:
    """A node that did one job, then was revoked with ``REASON``: its node id."""
    agent = make_agent(home, coord.base_url, FakeEngine(), max_jobs=1)
    assert await asyncio.wait_for(agent.run(), 60) == 0
    await registry.revoke(coord.services.db, agent.identity.node_id, REASON, "admin:test", 5)
    return agent.identity.node_id


async def test_a_revoked_node_is_told_the_operators_reason_in_the_log_and_in_status(coord, tmp_path, monkeypatch,
                                                                                  capsys, caplog):
    """It said "this node has been revoked … see the coordinator's message above", and the
    reason (``sis nodes revoke --reason``, "shown to the node") was nowhere; and ``status``
    hid ``lastError`` once the agent had stopped."""
    caplog.set_level(logging.INFO, logger="sis.node")
    await request_sweep(coord)
    home = tmp_path / "a"
    node_id = await _enrolled_then_revoked(coord, home)
    agent = make_agent(home, coord.base_url, FakeEngine())
    assert await asyncio.wait_for(agent.run(), 30) == 2
    said = (f'this node ({node_id}) was revoked by the operators of {coord.base_url}: "{REASON}". It can do no '
            "more work there")
    assert said in agent.status.doc["lastError"]
    assert any(said in r.getMessage() and r.levelno == logging.ERROR for r in caplog.records)
    monkeypatch.setenv("SIS_NODE_HOME", str(home))
    assert cli.main(["status"]) == 0
    out = capsys.readouterr().out
    assert "agent:        not running" in out and f"stopped:      {said}" in out


async def test_a_revoked_nodes_spooled_result_is_kept_aside_with_the_operators_reason(coord, tmp_path):
    await request_sweep(coord)
    home = tmp_path / "a"
    await _enrolled_then_revoked(coord, home)
    agent = make_agent(home, coord.base_url, FakeEngine())
    agent.spool.put("ls_before_the_revocation", "job-1", {"jobId": "job-1"}, {"photos": 1})
    assert await asyncio.wait_for(agent.run(), 30) == 2
    assert REASON in agent.status.doc["lastError"]
    assert len(agent.spool) == 0
    kept = read_json(agent.spool.rejected_dir / "ls_before_the_revocation.json")
    assert kept["reason"] == f"submit: the coordinator answered 403: this node has been revoked (reason: {REASON})"
    assert len((await db_counts(coord))["results"]) == 1      # the job done before the revocation, nothing more


async def test_status_shows_the_last_problem_after_the_agent_has_stopped(tmp_path, monkeypatch, capsys):
    from tests.support import free_port

    home = tmp_path / "a"
    agent = make_agent(home, f"http://127.0.0.1:{free_port()}", FakeEngine())
    task = asyncio.create_task(agent.run())
    await agent.wait_until(lambda: agent.backoff.failures >= 1, 30)
    agent.request_stop()
    assert await asyncio.wait_for(task, 20) == 0
    monkeypatch.setenv("SIS_NODE_HOME", str(home))
    assert cli.main(["status"]) == 0
    out = capsys.readouterr().out
    assert "agent:        not running" in out
    assert agent.status.doc["lastError"] and f"last problem: {agent.status.doc['lastError']}" in out
