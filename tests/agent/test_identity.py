"""First run: an identity is made, the node enrols once, the token is readable by the user only."""
from __future__ import annotations

import asyncio
import os
import stat

from sqlalchemy import func, select

from coordinator.core.db.models import Node
from node_agent import identity

from .support import FakeEngine, make_agent


async def _nodes(coord) -> int:
    async with coord.services.db.read() as s:
        return (await s.execute(select(func.count()).select_from(Node))).scalar_one()


async def _start_and_stop(agent) -> None:
    task = asyncio.create_task(agent.run())
    await agent.wait_until(lambda: agent.status.doc.get("state") == "idle", 60)
    agent.request_stop()
    assert await asyncio.wait_for(task, 20) == 0


async def test_first_run_enrols_and_keeps_the_token_for_the_user_only(coord, tmp_path):
    home = tmp_path / "a"
    agent = make_agent(home, coord.base_url, FakeEngine(), name="garage-pc")
    await _start_and_stop(agent)
    ident = identity.load(agent.paths.identity_file)
    assert ident.enrolled and ident.node_id.startswith("nd_") and ident.token.startswith("sisn_")
    assert ident.name == "garage-pc" and ident.coordinator == coord.base_url
    assert stat.S_IMODE(os.stat(agent.paths.identity_file).st_mode) == 0o600
    assert identity.user_only(agent.paths.identity_file)
    assert await _nodes(coord) == 1
    r = await coord.get("/node/v1/me", headers={"Authorization": f"Bearer {ident.token}"})
    assert r.status == 200 and r.json()["name"] == "garage-pc"

    # A second start reuses the identity: no second enrolment.
    await _start_and_stop(make_agent(home, coord.base_url, FakeEngine(), name="garage-pc"))
    assert await _nodes(coord) == 1
    assert identity.load(agent.paths.identity_file).token == ident.token


async def test_a_token_the_coordinator_no_longer_knows_leads_to_a_new_enrolment(coord, tmp_path):
    home = tmp_path / "a"
    agent = make_agent(home, coord.base_url, FakeEngine())
    await _start_and_stop(agent)
    ident = identity.load(agent.paths.identity_file)
    ident.token = "sisn_forgotten"
    identity.save(agent.paths.identity_file, ident)
    again = make_agent(home, coord.base_url, FakeEngine())
    await _start_and_stop(again)
    assert identity.load(agent.paths.identity_file).token not in ("sisn_forgotten", None)
    assert await _nodes(coord) == 2


async def test_an_engine_build_the_coordinator_does_not_publish_stops_the_agent_with_its_reason(coord, tmp_path):
    engine = FakeEngine()
    engine.build = "sha256:" + "0" * 64
    agent = make_agent(tmp_path / "a", coord.base_url, engine)
    assert await asyncio.wait_for(agent.run(), 20) == 2
    assert "not among the published builds" in agent.status.doc["lastError"]
    assert not identity.load(agent.paths.identity_file).enrolled


async def test_a_coordinator_with_an_enrolment_secret_takes_only_nodes_that_carry_it(sqlite_url, photos, tmp_path):
    from .support import start_sweep_coordinator, stop_sweep_coordinator

    coord = await start_sweep_coordinator(sqlite_url, photos, node_enrol_secret="s3cret")
    try:
        without = make_agent(tmp_path / "a", coord.base_url, FakeEngine())
        assert await asyncio.wait_for(without.run(), 20) == 2
        assert "X-Enrol-Secret" in without.status.doc["lastError"]
        with_secret = make_agent(tmp_path / "b", coord.base_url, FakeEngine())
        with_secret.enrol_secret = "s3cret"
        await _start_and_stop(with_secret)
        assert identity.load(with_secret.paths.identity_file).enrolled
    finally:
        await stop_sweep_coordinator(coord)
