"""First run: an identity is made, the node enrols once, the token is readable by the user only."""
from __future__ import annotations

import asyncio
import logging
import os
import stat

import pytest
from sqlalchemy import func, select

from coordinator.core.db.models import Node
from node_agent import cli, identity
from node_agent.files import read_json, write_json

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
        assert "takes only nodes with its enrolment secret: ask its operators for it, and give it with " \
               "--enrol-secret-file FILE (or SIS_NODE_ENROL_SECRET)" in without.status.doc["lastError"]
        with_secret = make_agent(tmp_path / "b", coord.base_url, FakeEngine())
        with_secret.enrol_secret = "s3cret"
        await _start_and_stop(with_secret)
        assert identity.load(with_secret.paths.identity_file).enrolled
    finally:
        await stop_sweep_coordinator(coord)


def test_coordinator_urls_are_normalised_to_key_their_enrolments():
    n = identity.normalise
    assert n("HTTPS://Sis.Example.org:443/") == n("https://sis.example.org") == "https://sis.example.org"
    assert n("http://127.0.0.1:80//") == "http://127.0.0.1"
    assert n("http://127.0.0.1:8080/") == "http://127.0.0.1:8080"
    assert n("https://user:secret@sis.example.org/nodes/#x") == "https://sis.example.org/nodes"
    assert n("https://sis.example.org/A") != n("https://sis.example.org/a")   # a path keeps its case
    assert n("https://[::1]:8443/") == "https://[::1]:8443"


def test_each_coordinator_keeps_its_own_enrolment_and_going_back_reuses_it(tmp_path, caplog):
    path = tmp_path / "identity.json"
    a = identity.for_coordinator(path, "https://a.example.org", "garage-pc")
    identity.enrolled(path, a, "nd_a", "sisn_a")
    b = identity.for_coordinator(path, "https://b.example.org/")
    assert not b.enrolled and b.install_id == a.install_id and b.name == "garage-pc"
    identity.enrolled(path, b, "nd_b", "sisn_b")
    caplog.set_level(logging.INFO, logger="sis.node")
    caplog.clear()
    back = identity.for_coordinator(path, "HTTPS://A.example.org/")
    assert (back.node_id, back.token, back.coordinator) == ("nd_a", "sisn_a", "https://a.example.org")
    assert "enrolment there (node nd_a) is used again" in caplog.text and "enrols" not in caplog.text
    assert identity.load(path).node_id == "nd_a"          # the coordinator used last
    assert identity.load(path, "https://b.example.org").token == "sisn_b"
    assert identity.enrolments(path) == {"https://a.example.org": "nd_a", "https://b.example.org": "nd_b"}
    # A token one coordinator forgets (401) costs only that enrolment.
    identity.forget_token(path, identity.load(path, "https://b.example.org"))
    assert identity.enrolments(path) == {"https://a.example.org": "nd_a"}
    assert stat.S_IMODE(os.stat(path).st_mode) == 0o600


def test_an_identity_file_of_one_enrolment_is_migrated_in_place(tmp_path):
    path = tmp_path / "identity.json"
    legacy = {"installId": "f" * 32, "name": "garage-pc", "coordinator": "https://a.example.org",
              "nodeId": "nd_a", "token": "sisn_a", "enrolledAt": 1700000000.0}
    write_json(path, legacy)
    assert identity.load(path).token == "sisn_a"          # readable as it is (`sis-node status`)
    again = identity.for_coordinator(path, "https://a.example.org/")
    assert (again.install_id, again.node_id, again.token) == ("f" * 32, "nd_a", "sisn_a")
    doc = read_json(path)
    assert doc["enrolments"] == {"https://a.example.org": {"nodeId": "nd_a", "token": "sisn_a",
                                                          "enrolledAt": 1700000000.0}}
    assert {k: doc[k] for k in legacy} == legacy          # what an older agent reads, as it was
    assert stat.S_IMODE(os.stat(path).st_mode) == 0o600
    # Another coordinator no longer replaces it.
    identity.enrolled(path, identity.for_coordinator(path, "https://b.example.org"), "nd_b", "sisn_b")
    assert identity.for_coordinator(path, "https://a.example.org").token == "sisn_a"


async def test_an_agent_pointed_at_another_coordinator_and_back_keeps_its_first_enrolment(coord, photos, tmp_path,
                                                                                         caplog):
    from .support import start_sweep_coordinator, stop_sweep_coordinator

    caplog.set_level(logging.INFO, logger="sis.node")
    home = tmp_path / "a"
    await _start_and_stop(make_agent(home, coord.base_url, FakeEngine()))
    first = identity.load(home / "identity.json")
    other = await start_sweep_coordinator(f"sqlite+aiosqlite:///{tmp_path}/other.db", photos)
    try:
        await _start_and_stop(make_agent(home, other.base_url, FakeEngine()))
        assert await _nodes(other) == 1
    finally:
        await stop_sweep_coordinator(other)
    await _start_and_stop(make_agent(home, coord.base_url + "/", FakeEngine()))
    back = identity.load(home / "identity.json")
    assert (back.node_id, back.token) == (first.node_id, first.token)
    assert await _nodes(coord) == 1                       # not enrolled a second time
    assert "enrols again" not in caplog.text and f"(node {first.node_id}) is used again" in caplog.text


@pytest.mark.parametrize("spoilt", ["", '{"installId": "f', '"y"', "[1]", "{}"])
async def test_an_identity_file_that_cannot_be_read_is_never_taken_for_a_first_run(coord, tmp_path, caplog, spoilt,
                                                                                     monkeypatch, capsys):
    """An empty or cut-short identity.json made a new identity over the node's enrolment."""
    home = tmp_path / "a"
    await _start_and_stop(make_agent(home, coord.base_url, FakeEngine()))
    path = home / "identity.json"
    path.write_text(spoilt)
    again = make_agent(home, coord.base_url, FakeEngine())
    assert await asyncio.wait_for(again.run(), 20) == 2
    assert path.read_text() == spoilt                     # kept as it was, for the volunteer to restore
    assert await _nodes(coord) == 1                       # no second enrolment
    why = again.status.doc["lastError"]
    assert str(path) in why and "restore it" in why and "move it away to start as a new node" in why
    assert why in caplog.text
    with pytest.raises(identity.IdentityUnreadable):
        identity.load(path)
    monkeypatch.setenv("SIS_NODE_HOME", str(home))
    assert cli.main(["status"]) == 0                      # says so, without a traceback
    assert f"its identity file {path} cannot be read" in capsys.readouterr().out


async def test_a_coordinator_url_whose_scheme_is_in_capitals_is_taken(coord, photos, tmp_path):
    """HTTP://127.0.0.1:8080 was refused as "not an http(s) URL": a scheme's case means nothing."""
    from .support import request_sweep

    await request_sweep(coord)
    url = coord.base_url.replace("http://", "HTTP://")
    agent = make_agent(tmp_path / "a", url, FakeEngine(), max_jobs=1)
    assert await asyncio.wait_for(agent.run(), 30) == 0
    assert agent.contribution.read()["jobs"] == 1
    assert identity.load(agent.paths.identity_file).coordinator == coord.base_url    # keyed as normalised


async def test_a_result_spooled_before_the_node_enrolled_again_is_set_aside_saying_why(coord, tmp_path):
    """A result spooled as one node, whose token the coordinator then refused (401) so that the
    node enrolled again as another, cannot be submitted: its lease is the first node's, and the
    coordinator refuses it from the second ("no such lease for this node"). It is kept in
    spool/rejected/ as before, but said for what it is: it read as if the result had been refused.
    (Avoiding the loss needs the coordinator: see docs/node-agent.md, Identity.)"""
    from node_agent.loop import EXIT_UNSENT

    from .support import bring_up, request_sweep, take_down

    await request_sweep(coord)
    home = tmp_path / "a"
    engine = FakeEngine(hold=True)
    agent = make_agent(home, coord.base_url, engine, max_jobs=1, work_ahead=False)
    task = asyncio.create_task(agent.run())
    await asyncio.to_thread(engine.started.wait, 20)
    await take_down(coord)
    engine.gate.set()
    assert await asyncio.wait_for(task, 30) == EXIT_UNSENT      # spooled, not sent
    first = identity.load(agent.paths.identity_file)
    first_node = first.node_id
    first.token = "sisn_forgotten"         # a token the coordinator does not know (an identity file's older copy)
    identity.save(agent.paths.identity_file, first)
    bring_up(coord)

    again = make_agent(home, coord.base_url, FakeEngine())
    task = asyncio.create_task(again.run())
    await again.wait_until(lambda: again.results_rejected == 1, 60)
    again.request_stop()
    assert await asyncio.wait_for(task, 20) == 0
    second_node = identity.load(agent.paths.identity_file).node_id
    assert second_node not in (None, first_node)
    [kept] = [read_json(p) for p in again.spool.rejected_dir.glob("*.json")]
    assert kept["reason"] == (
        f"submit: the coordinator answered 404: no such lease for this node; it was spooled when this node was "
        f"{first_node} at {coord.base_url}, and it is {second_node} there now (it enrolled again): a lease of "
        f"{first_node}'s can be submitted by {first_node} alone")
    assert again.status.doc["lastRejected"]["reason"] == kept["reason"]
