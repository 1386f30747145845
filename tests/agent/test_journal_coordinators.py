"""The job journals are kept per coordinator, as the spool is: a job journalled for one
coordinator is neither resumed against nor dropped by another; pointed back, the node resumes
it on its lease, or gives back the job it held ahead, as after any restart."""
from __future__ import annotations

import asyncio
import json

import pytest

from coordinator.core.db.models import SweepLease, SweepResult
from node_agent import cli
from node_agent.files import read_json, write_json
from node_agent.config import Paths
from node_agent.journal import Journals, kept

from .support import (FakeEngine, db_counts, make_agent, request_sweep, run_holding_ahead, start_sweep_coordinator,
                      stop_sweep_coordinator)

A, B = "https://a.example.org", "https://b.example.org"


def test_a_journal_for_another_coordinator_is_put_aside_and_taken_up_again_there(tmp_path):
    paths = Paths(tmp_path, tmp_path).ensure()
    Journals(paths, A).write(paths.current_job_file, {"leaseId": "ls_1", "jobId": "job-1"})
    write_json(paths.ahead_job_file, {"leaseId": "ls_2", "jobId": "job-2"})    # an earlier agent's: no coordinator
    at_b = Journals(paths, B + "/")
    assert [(k.coordinator, k.name, k.lease_id) for k in at_b.sort_out(unnamed=A)] == [
        (A, "ahead-job.json", "ls_2"), (A, "current-job.json", "ls_1")]
    assert not paths.current_job_file.exists() and not paths.ahead_job_file.exists()
    at_b.write(paths.current_job_file, {"leaseId": "ls_9", "jobId": "job-9"})     # B's own job meanwhile
    assert at_b.sort_out(unnamed=B) != [] and read_json(paths.current_job_file)["leaseId"] == "ls_9"
    assert kept(paths, but=B) == at_b.elsewhere() and len(kept(paths)) == 2

    paths.current_job_file.unlink()      # B's job done
    assert Journals(paths, "HTTPS://a.example.org:443").sort_out(unnamed=B) == []
    assert read_json(paths.current_job_file)["leaseId"] == "ls_1" and read_json(paths.ahead_job_file)["leaseId"] == "ls_2"
    assert read_json(paths.ahead_job_file)["coordinator"] == A and kept(paths) == []


async def _idle_at(home, url: str):
    agent = make_agent(home, url, FakeEngine())
    task = asyncio.create_task(agent.run())
    await agent.wait_until(lambda: agent.status.doc.get("state") == "idle", 60)
    agent.request_stop()
    assert await asyncio.wait_for(task, 20) == 0
    return agent


@pytest.mark.parametrize("journalled_by", ["this agent", "an earlier agent"])
async def test_a_journalled_job_waits_for_its_own_coordinator_while_the_node_points_at_another(
        coord, photos, tmp_path, monkeypatch, capsys, journalled_by):
    """The other coordinator was asked about the lease, refused it ("no such lease for this
    node"), and the journal was dropped: the job's lease lapsed at its own coordinator, counting
    a failure on it, and the job held ahead was never given back."""
    await request_sweep(coord)
    home = tmp_path / "a"
    engine = FakeEngine(hold=True)
    agent = make_agent(home, coord.base_url, engine)

    async def unanswered_release(lease_id, reason):
        await asyncio.sleep(60)
    agent.client.release = unanswered_release
    task = await run_holding_ahead(agent, engine)
    current, held = agent.status.doc["job"]["leaseId"], agent._ahead.lease.lease_id
    agent.request_stop()
    agent.request_stop()        # at once: the job left to its lease, the one held ahead not given back
    assert await asyncio.wait_for(task, 10) == 0
    engine.gate.set()
    journals = {p.name: read_json(p) for p in (agent.paths.current_job_file, agent.paths.ahead_job_file)}
    assert [j["leaseId"] for j in journals.values()] == [current, held]
    if journalled_by == "an earlier agent":
        for name, doc in journals.items():
            del doc["coordinator"]
            write_json(home / name, doc)

    other = await start_sweep_coordinator(f"sqlite+aiosqlite:///{tmp_path}/other.db", photos)
    try:
        at_other = await _idle_at(home, other.base_url)
        assert (await db_counts(other))["results"] == []
        assert at_other.status.doc["jobsElsewhere"] == [
            {"coordinator": coord.base_url, "jobId": journals["ahead-job.json"]["jobId"], "leaseId": held,
             "heldAhead": True},
            {"coordinator": coord.base_url, "jobId": journals["current-job.json"]["jobId"], "leaseId": current,
             "heldAhead": False}]
        monkeypatch.setenv("SIS_NODE_HOME", str(home))
        assert cli.main(["status"]) == 0
        out = capsys.readouterr().out
        assert (f"elsewhere:    job {journals['current-job.json']['jobId']} (lease {current}) leased from "
                f"{coord.base_url}, which this node no longer points at, is kept: resumed if its lease still holds "
                f"when it points there again (sis-node run --coordinator {coord.base_url})") in out
        assert f"held ahead (lease {held}), leased from {coord.base_url}" in out
        assert cli.main(["status", "--json"]) == 0
        assert len(json.loads(capsys.readouterr().out)["jobsElsewhere"]) == 2
    finally:
        await stop_sweep_coordinator(other)
    async with coord.services.db.read() as s:
        assert {(await s.get(SweepLease, lease)).state for lease in (current, held)} == {"active"}

    # Pointed back: the job held ahead is given back, the journalled one resumed on its lease.
    again = make_agent(home, coord.base_url, FakeEngine())
    task = asyncio.create_task(again.run())
    await again.wait_until(lambda: again.contribution.read()["jobs"] >= 1, 60)
    again.request_stop()
    assert await asyncio.wait_for(task, 20) == 0
    async with coord.services.db.read() as s:
        assert (await s.get(SweepLease, held)).state == "cancelled"
        assert (await s.get(SweepLease, current)).state == "submitted"
        assert (await s.execute(SweepResult.__table__.select().where(SweepResult.lease_id == current))).first()
    assert [failures for _, _, failures in (await db_counts(coord))["jobs"]] == [0] * len((await db_counts(coord))["jobs"])
    assert kept(again.paths) == [] and again.status.doc["jobsElsewhere"] == []
