"""A coordinator that stops accepting the node's engine build (a new node-app release, its
SIS_ENGINE_BUILDS or signed manifests changed, an upgrade under --demo): the agent stops at the
first refusal, saying so in one line and in ``sis-node status``, and leases no further job. It
leased on before: every job ran on the volunteer's GPU for a result refused 422, one after another."""
from __future__ import annotations

import asyncio
import logging
import socket
import threading

import tornado.web
from tornado.httpserver import HTTPServer
from tornado.netutil import bind_sockets
from sqlalchemy import select

from coordinator.core.db.models import SweepLease
from coordinator.sweeps.service import sweeps_of
from node_agent import cli
from node_agent.files import read_json
from node_agent.protocol import Client, NoWork, Refused
from node_agent import refusals

from .support import (TEST_BUILD, FakeEngine, db_counts, make_agent, request_sweep, start_photos,
                      start_sweep_coordinator, stop_sweep_coordinator)

NEW_BUILD = "sha256:" + "e" * 64      # the build of the node app released since


def withdraw(coord) -> None:
    """The operator accepts only the new release's build from now on."""
    sweeps_of(coord.services).settings.engine_builds = NEW_BUILD


def said(coord) -> str:
    return (f"{coord.base_url} no longer accepts this node's engine build ({TEST_BUILD[:12]}…), so it gets no "
            f"more jobs there: download the current node app (its coordinator lists it at {coord.base_url}"
            "/earth/node-app) and run that instead of this one")


async def lease_states(coord) -> list[str]:
    async with coord.services.db.read() as s:
        return list((await s.execute(select(SweepLease.state).order_by(SweepLease.leased_at))).scalars().all())


class GatedEngine(FakeEngine):
    """Each job waits for its own gate (``gates[i]`` for the i-th job), so a test decides when
    each ends."""

    def __init__(self, jobs: int):
        super().__init__()
        self.gates = [threading.Event() for _ in range(jobs)]
        self.running = [threading.Event() for _ in range(jobs)]

    def run_job(self, job, images):
        i = len(self.jobs)
        self.running[i].set()
        if not self.gates[i].wait(timeout=60):
            raise TimeoutError("the test never released the engine")
        return super().run_job(job, images)


def release_all(engine: GatedEngine) -> None:
    for g in engine.gates:
        g.set()


async def test_an_agent_whose_build_is_withdrawn_stops_at_its_first_lease_saying_so(coord, tmp_path, monkeypatch,
                                                                                    capsys, caplog):
    caplog.set_level(logging.INFO, logger="sis.node")
    await request_sweep(coord)
    home = tmp_path / "a"
    first = make_agent(home, coord.base_url, FakeEngine(), max_jobs=1)
    assert await asyncio.wait_for(first.run(), 60) == 0          # enrolled, one job done
    before = await lease_states(coord)
    withdraw(coord)
    engine = FakeEngine()
    agent = make_agent(home, coord.base_url, engine)
    assert await asyncio.wait_for(agent.run(), 30) == 2
    assert await lease_states(coord) == before and engine.jobs == []       # no job leased, none run
    assert agent.status.doc["stoppedBecause"] == said(coord) == agent.status.doc["lastError"]
    assert [r.getMessage() for r in caplog.records if r.levelno == logging.ERROR] == [said(coord)]
    monkeypatch.setenv("SIS_NODE_HOME", str(home))
    assert cli.main(["status"]) == 0
    out = capsys.readouterr().out
    assert "agent:        not running" in out and f"stopped:      {said(coord)}" in out


async def test_a_build_withdrawn_mid_run_stops_the_agent_at_the_first_refused_result(sqlite_url, tmp_path, caplog):
    """Withdrawn while the engine runs a job with the next held ahead: the first result refused
    for its build (422) stops the agent. The job running then is given back unfinished (its
    result would be refused too), queued again at once with no failure counted, and no job
    is leased after the refusal."""
    caplog.set_level(logging.INFO, logger="sis.node")
    photos = await start_photos(n=15)                # jobs of 3 photos: more than the agent could take
    coord = await start_sweep_coordinator(sqlite_url, photos)
    engine = GatedEngine(3)
    try:
        await request_sweep(coord)
        home = tmp_path / "a"
        agent = make_agent(home, coord.base_url, engine)
        task = asyncio.create_task(agent.run())
        await asyncio.to_thread(engine.running[0].wait, 20)
        await agent.wait_until(lambda: agent._ahead is not None, 20)      # job 2 held ahead
        ahead = agent._ahead.job.job_id
        withdraw(coord)
        engine.gates[0].set()                         # job 1 ends; its result goes as job 2 runs
        assert await asyncio.wait_for(task, 30) == 2
        assert engine.running[1].is_set() and not engine.running[2].is_set()    # job 2 started, no job 3
        assert await lease_states(coord) == ["submitted", "cancelled"]       # job 2 given back; nothing after
        counts = await db_counts(coord)
        ((state, _node, reasons, _body),) = counts["results"]
        assert state == "invalid" and any(r.startswith("engineBuild:") for r in reasons)
        assert all(failures == 0 for _id, _state, failures in counts["jobs"])
        assert agent.status.doc["stoppedBecause"] == said(coord)
        kept = list(agent.spool.rejected_dir.glob("*.json"))
        assert len(kept) == 1 and "engineBuild" in read_json(kept[0])["reason"] and len(agent.spool) == 0
        assert not agent.paths.current_job_file.exists() and not agent.paths.ahead_job_file.exists()
        errors = [r.getMessage() for r in caplog.records if r.levelno == logging.ERROR]
        assert errors[-1] == said(coord)
        assert any(m.startswith(f"job {ahead} ") and "given back unfinished" in m for m in
                   (r.getMessage() for r in caplog.records))
    finally:
        release_all(engine)
        await stop_sweep_coordinator(coord)
        await photos.stop()


async def test_a_lease_refused_for_the_build_while_the_engine_runs_gives_the_running_job_back(coord, tmp_path):
    """The lease asked for ahead, while the first job runs, is refused 403: the agent stops there,
    and the job the engine runs is given back rather than finished for a refused result."""
    await request_sweep(coord)
    engine = GatedEngine(2)
    agent = make_agent(tmp_path / "a", coord.base_url, engine)
    real, asked = agent.client.lease, []

    async def lease(*args, **kw):
        asked.append(agent.client.engine_build)
        if len(asked) == 2:             # asked ahead, as the first job runs: the build is withdrawn now
            withdraw(coord)
        return await real(*args, **kw)

    agent.client.lease = lease
    try:
        assert await asyncio.wait_for(agent.run(), 30) == 2
        assert asked == [TEST_BUILD, TEST_BUILD] and engine.running[0].is_set() and not engine.running[1].is_set()
        assert await lease_states(coord) == ["cancelled"]          # given back: queued again, no failure
        assert all(failures == 0 for _id, _state, failures in (await db_counts(coord))["jobs"])
        assert agent.status.doc["stoppedBecause"] == said(coord) and len(agent.spool) == 0
        assert not agent.paths.current_job_file.exists()
    finally:
        release_all(engine)


async def test_a_refused_result_of_an_earlier_build_does_not_stop_the_agent(coord, tmp_path):
    """A result spooled by the node app the volunteer ran before (another build) is refused for
    its build: kept aside as any refused result, and this build goes on working."""
    agent = make_agent(tmp_path / "a", coord.base_url, FakeEngine())
    agent.build_refused = asyncio.Event()
    old = Refused("submit: the coordinator answered 422", status=422,
                  details={"reasons": ["engineBuild: 'sha256:0ld' is not among the published engine builds"],
                           "engineBuild": "sha256:0ld"})
    agent._raise_if_build_refused(old, "sha256:0ld")
    older = Refused("submit: the coordinator answered 422", status=422,      # a coordinator that names no build
                    details={"reasons": ["engineBuild: 'sha256:0ld' is not among the published engine builds"]})
    agent._raise_if_build_refused(older, "sha256:0ld")
    assert not agent.build_refused.is_set()
    mine = Refused("submit: the coordinator answered 422", status=422, details={"reasons": older.details["reasons"]})
    try:
        agent._raise_if_build_refused(mine, TEST_BUILD)
    except refusals.BuildRefused as exc:
        assert str(exc) == said(coord) and agent.build_refused.is_set()
    else:
        raise AssertionError("the agent's own build refused did not stop it")


async def test_a_coordinator_older_than_the_field_is_asked_again_without_it():
    """An older coordinator refuses a body field it does not declare (400 naming it): the agent
    would have retried that lease for ever, and worked for it no more."""
    bodies: list[bytes] = []

    class OldLease(tornado.web.RequestHandler):
        def post(self) -> None:
            bodies.append(self.request.body)
            if b"engineBuild" in self.request.body:
                self.set_status(400)
                self.finish({"error": {"code": "bad_parameter", "message": "unknown field 'engineBuild'",
                                       "details": {"parameter": "engineBuild", "allowed": []}}})
                return
            self.set_status(204)
            self.set_header("Retry-After", "7")

    server = HTTPServer(tornado.web.Application([(r"/node/v1/lease", OldLease)]))
    [sock] = bind_sockets(0, "127.0.0.1", family=socket.AF_INET)
    server.add_sockets([sock])
    port = sock.getsockname()[1]
    try:
        async with Client(f"http://127.0.0.1:{port}", token="t", engine_build=TEST_BUILD) as client:
            assert await client.lease() == NoWork(7.0)
            assert await client.lease() == NoWork(7.0)
        assert len(bodies) == 3 and b"engineBuild" in bodies[0] and bodies[1:] == [b"{}", b"{}"]
    finally:
        server.stop()
        await server.close_all_connections()
