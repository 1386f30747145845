"""Results are kept per coordinator: one leased from a coordinator is submitted there only, and
waits, kept, while the node points at another one (which would refuse it for good: the lease
is not its). A spool of an earlier agent, whose files name no coordinator, is read as its node's."""
from __future__ import annotations

import asyncio
import json

import pytest

from node_agent import cli, identity
from node_agent.files import read_json, write_json
from node_agent.loop import EXIT_UNSENT
from node_agent.spool import Spool, legacy_owner

from .support import (FakeEngine, bring_up, db_counts, make_agent, request_sweep, start_sweep_coordinator,
                      stop_sweep_coordinator, take_down)

A, B = "https://a.example.org", "https://b.example.org"


def test_a_spool_gives_each_coordinator_its_own_results(tmp_path):
    Spool(tmp_path / "spool", A).put("ls_a", "job-1", {"jobId": "job-1"})
    Spool(tmp_path / "spool", B + "/").put("ls_b", "job-9", {"jobId": "job-9"})
    at_a, at_b = Spool(tmp_path / "spool", "HTTPS://a.example.org:443"), Spool(tmp_path / "spool", B)
    assert [s.lease_id for s in at_a.pending()] == ["ls_a"] and len(at_a) == 1
    assert [s.lease_id for s in at_b.pending()] == ["ls_b"] and at_b.elsewhere() == {A: 1}
    assert Spool(tmp_path / "spool").waiting() == {A: 1, B: 1} and len(Spool(tmp_path / "spool")) == 2


def _identity(path, last: str) -> None:
    write_json(path, {"installId": "i1", "name": "n", "coordinator": last, "nodeId": "nd_b", "token": "t",
                      "enrolments": {A: {"nodeId": "nd_a", "token": "ta"}, B: {"nodeId": "nd_b", "token": "tb"}}})


def _earlier_agents(folder, lease_id: str, node_id: str | None) -> None:
    """A file as an agent before results were kept per coordinator wrote it: no coordinator."""
    write_json(folder / f"{lease_id}.json", {"leaseId": lease_id, "jobId": "job-1", "attempts": 2, "spooledAt": 1.0,
                                            "result": {"jobId": "job-1", **({"nodeId": node_id} if node_id else {})},
                                            "stats": {}})


def test_an_earlier_agents_result_is_its_node_ids_coordinators_else_the_one_used_last(tmp_path):
    _identity(tmp_path / "identity.json", last=B)
    folder = tmp_path / "spool"
    folder.mkdir()
    _earlier_agents(folder, "ls_1", "nd_a")     # leased from A, whose enrolment gave nd_a
    _earlier_agents(folder, "ls_2", "nd_x")     # a node id no enrolment holds now (a token dropped after a 401)
    _earlier_agents(folder, "ls_3", None)
    spool = Spool(folder, A, legacy_owner(tmp_path / "identity.json", A))
    assert {s.lease_id: s.coordinator for s in spool._all()} == {"ls_1": A, "ls_2": B, "ls_3": B}
    assert spool.adopt() == 3
    assert read_json(folder / "ls_1.json")["coordinator"] == A and read_json(folder / "ls_2.json")["coordinator"] == B
    assert [s.lease_id for s in Spool(folder, A).pending()] == ["ls_1"]       # named now: no identity needed
    assert read_json(folder / "ls_1.json")["attempts"] == 2


def test_an_earlier_agents_result_is_not_taken_as_a_typos_the_node_never_enrolled_at(tmp_path):
    """Agents before 991ac2f recorded a failed enrolment's URL (a typo) as the one used last: an
    earlier agent's results and journals naming no coordinator were taken as the typo's, put
    aside for a coordinator that never leased them, and their leases lapsed. They are the
    coordinator's the node points at now."""
    from node_agent.journal import Journals

    typo = "http://127.0.0.1:1"
    write_json(tmp_path / "identity.json", {"installId": "i1", "name": "n", "coordinator": typo, "nodeId": None,
                                            "token": None, "enrolments": {A: {"nodeId": "nd_a", "token": "ta"}}})
    folder = tmp_path / "spool"
    folder.mkdir()
    _earlier_agents(folder, "ls_3", None)
    spool = Spool(folder, A, legacy_owner(tmp_path / "identity.json", A))
    assert {s.lease_id: s.coordinator for s in spool._all()} == {"ls_3": A}
    from node_agent import identity as ident_mod
    from node_agent.config import Paths
    from node_agent.spool import last_enrolled
    paths = Paths(tmp_path / "home", tmp_path / "home").ensure()
    write_json(paths.current_job_file, {"leaseId": "ls_4", "jobId": "job-4"})     # an earlier agent's: no coordinator
    assert Journals(paths, A).sort_out(last_enrolled(ident_mod.load(tmp_path / "identity.json")) or A) == []
    assert read_json(paths.current_job_file)["leaseId"] == "ls_4"               # resumed here, not put aside


async def _spooled_while_down(coord, home) -> tuple[str, str]:
    """A job done at ``coord`` whose result could not be sent (it went down): its lease and job ids."""
    await request_sweep(coord)
    engine = FakeEngine(hold=True)
    agent = make_agent(home, coord.base_url, engine, max_jobs=1, work_ahead=False)
    task = asyncio.create_task(agent.run())
    await asyncio.to_thread(engine.started.wait, 20)
    await take_down(coord)
    engine.gate.set()
    assert await asyncio.wait_for(task, 30) == EXIT_UNSENT
    [item] = agent.spool.pending()
    return item.lease_id, item.job_id


async def _idle_at(home, url: str):
    agent = make_agent(home, url, FakeEngine())
    task = asyncio.create_task(agent.run())
    await agent.wait_until(lambda: agent.status.doc.get("state") == "idle", 60)
    agent.request_stop()
    assert await asyncio.wait_for(task, 20) == 0
    return agent


@pytest.mark.parametrize("spooled_by", ["this agent", "an earlier agent"])
async def test_a_result_waits_for_its_own_coordinator_while_the_node_points_at_another(coord, photos, tmp_path,
                                                                                      monkeypatch, capsys, spooled_by):
    """It was sent to the other coordinator, which refused it for good ("no such lease for this
    node"): the result was lost for the coordinator that leased the job."""
    home = tmp_path / "a"
    lease_id, job_id = await _spooled_while_down(coord, home)
    if spooled_by == "an earlier agent":
        doc = read_json(home / "spool" / f"{lease_id}.json")
        del doc["coordinator"]
        write_json(home / "spool" / f"{lease_id}.json", doc)
    other = await start_sweep_coordinator(f"sqlite+aiosqlite:///{tmp_path}/other.db", photos)
    try:
        agent = await _idle_at(home, other.base_url)
        assert (await db_counts(other))["results"] == []
        assert not agent.spool.rejected_dir.exists() and len(Spool(home / "spool")) == 1     # neither sent nor lost
        assert agent.spool.elsewhere() == {coord.base_url: 1}
        assert agent.status.doc["spooledElsewhere"] == {coord.base_url: 1} and agent.status.doc["spooled"] == 0
        assert read_json(home / "spool" / f"{lease_id}.json")["coordinator"] == coord.base_url
        monkeypatch.setenv("SIS_NODE_HOME", str(home))
        assert cli.main(["status"]) == 0
        out = capsys.readouterr().out
        assert f"spooled:      0 results waiting to be acknowledged by {other.base_url}" in out
        assert (f"elsewhere:    1 result(s) wait for {coord.base_url}, which this node no longer points at: kept, "
                f"and sent when it points there again (sis-node run --coordinator {coord.base_url})") in out
        assert cli.main(["status", "--json"]) == 0
        assert json.loads(capsys.readouterr().out)["spooledElsewhere"] == {coord.base_url: 1}
    finally:
        await stop_sweep_coordinator(other)
    bring_up(coord)
    agent = await _idle_at(home, coord.base_url)          # pointed back: sent where it was leased
    assert len(Spool(home / "spool")) == 0 and not agent.spool.rejected_dir.exists()
    assert job_id in [r.body["jobId"] for r in (await db_counts(coord))["results"]]
    assert identity.load(home / "identity.json").coordinator == coord.base_url


def test_status_counts_the_results_of_the_coordinator_the_running_agent_works_for(tmp_path, monkeypatch, capsys):
    """`sis-node status` took node.toml's coordinator for the agent's: an agent running against
    another (SIS_NODE_COORDINATOR, or --coordinator before enrolment there succeeded) had its own
    results listed as waiting for a coordinator it "no longer points at", and the others' counted."""
    import os

    from node_agent.config import Paths

    home = tmp_path / "home"
    paths = Paths(home, home).ensure()
    (home / "node.toml").write_text(f'coordinator = "{A}"\n', encoding="utf-8")
    _identity(paths.identity_file, last=B)
    write_json(paths.status_file, {"state": "idle", "pid": os.getpid(), "coordinator": B})    # running, at B
    Spool(paths.spool_dir, B).put("ls_1", "job-1", {"jobId": "job-1", "nodeId": "nd_b"})
    monkeypatch.setenv("SIS_NODE_HOME", str(home))
    assert cli.main(["status"]) == 0
    out = capsys.readouterr().out
    assert "spooled:      1 results waiting to be acknowledged" in out and "elsewhere:" not in out, out
