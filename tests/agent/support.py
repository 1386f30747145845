"""Agent test support: a real coordinator with its sweep queue on loopback, the fake
street-photo provider, controllable engines, and an in-process agent."""
from __future__ import annotations

import asyncio
import io
import json
import threading
import time
from pathlib import Path
from typing import Any

import tornado.web
from sqlalchemy import func, select
from tornado.httpclient import AsyncHTTPClient, HTTPRequest

from coordinator.faces.app import make_app
from coordinator.core.db.models import SweepJob, SweepLease, SweepResult
from coordinator.demo.photos import DEV_ENGINE_BUILD, FakePhotoProvider, honest_result
from sweep_engine.schema import Job, Result
from node_agent.config import Config, Paths
from node_agent.loop import Agent, Device
from node_agent.policy import Policy
from node_agent.progress import Progress
from tests.support import Coordinator, free_port, make_settings, start_coordinator

CENTRE = (-6.9147, 107.6098)
TEST_BUILD = DEV_ENGINE_BUILD
CPU = Device("cpu (development run, --allow-cpu: not a GPU result)", False, "none: CPU development run (tests)")


class FakeEngine:
    """An engine that answers what a correct engine would for the fake provider's photos,
    and can be held (``gate``) so a test decides when a job is mid-way."""

    version = "0.1.0"
    build = TEST_BUILD

    def __init__(self, truth: dict[str, Any] | None = None, hold: bool = False, fail: bool = False):
        self.truth = truth
        self.gate = threading.Event()
        if not hold:
            self.gate.set()
        self.started = threading.Event()
        self.fail = fail
        self.jobs: list[str] = []
        self.images_seen: list[int] = []

    def run_job(self, job: Job, images: dict[str, bytes]) -> Result:
        self.jobs.append(job.job_id)
        self.images_seen.append(len(images))
        self.started.set()
        if not self.gate.wait(timeout=120):
            raise TimeoutError("the test never released the engine")
        if self.fail:
            raise RuntimeError("engine failure (test)")
        doc = job.to_dict()
        doc["photos"] = [p for p in doc["photos"] if p["id"] in images]
        t0 = time.monotonic()
        out = honest_result(doc, node_id="set-by-agent", truth=self.truth, elapsed_s=0.01)
        out["timings"]["inferS"] = max(0.001, time.monotonic() - t0)
        return Result.from_dict(out)


def agent_config(url: str, **kw: Any) -> Config:
    base = dict(coordinator=url, heartbeat_interval_s=0.2, backoff_base_s=0.1, backoff_max_s=0.8, idle_poll_s=0.2,
                pause_poll_s=0.05, cpu_busy_percent=0.0, pause_when_user_active=False, pause_on_battery=False,
                request_timeout_s=5.0, photo_timeout_s=5.0, check_updates=False)
    base.update(kw)
    return Config(**base).check()


def make_agent(home: Path, url: str, engine: Any, *, idle=None, battery=None, other_cpu=None,
               max_jobs: int = 0, **cfg: Any) -> Agent:
    config = agent_config(url, **cfg)
    paths = Paths(home, home).ensure()
    policy = Policy(config, paths.pause_file, idle=idle or (lambda: None), battery=battery or (lambda: None),
                    other_cpu=other_cpu or (lambda: None))
    return Agent(config, paths, engine, CPU, policy=policy, progress=Progress(io.StringIO(), tty=False),
                 max_jobs=max_jobs)


async def run_holding_ahead(agent: Agent, engine: FakeEngine) -> asyncio.Task:
    """Start ``agent``, whose ``engine`` holds its jobs, and return its task once the first job is in
    the engine and the next one is held ahead (leased, its photos being fetched)."""
    task = asyncio.create_task(agent.run())
    await asyncio.to_thread(engine.started.wait, 20)
    await agent.wait_until(lambda: agent._ahead is not None, 20)
    return task


def heartbeats_running() -> list[asyncio.Task]:
    """The agents' heartbeat tasks still running in this event loop."""
    return [t for t in asyncio.all_tasks() if t.get_coro().__qualname__ == "Leasing._heartbeats" and not t.done()]


async def start_photos(n: int = 6, radius_m: float = 250, seed: int = 3) -> FakePhotoProvider:
    fake = FakePhotoProvider()
    fake.scatter(*CENTRE, radius_m=radius_m, n=n, seed=seed)
    return await fake.start()


async def start_sweep_coordinator(db_url: str, photos: FakePhotoProvider, port: int | None = None,
                                  **kw: Any) -> Coordinator:
    settings = make_settings(db_url, photos_url=photos.api_url,
                             engine_builds=kw.pop("engine_builds", TEST_BUILD),
                             lease_retry_after_s=1, job_max_photos=kw.pop("job_max_photos", 3),
                             lease_ttl_s=kw.pop("lease_ttl_s", 30), **kw)
    c = await start_coordinator(settings)
    if port is not None:  # move it to a chosen port (restart tests reuse the old one)
        c.server.stop()
        c.server = make_app(c.services).listen(port, "127.0.0.1")
        c.base_url = f"http://127.0.0.1:{port}"
    return c


def port_of(c: Coordinator) -> int:
    return int(c.base_url.rsplit(":", 1)[1])


async def _close_connections(server) -> None:
    """Close the server's open connections. Bounded: Tornado's close waits for each request in
    flight to finish, and one cut off mid-way (the point of an outage) can keep it waiting."""
    try:
        await asyncio.wait_for(server.close_all_connections(), 3)
    except asyncio.TimeoutError:
        pass


async def take_down(c: Coordinator) -> None:
    """The coordinator stops answering: its listening socket closes, new connections are
    refused (its database and state stay)."""
    c.server.stop()
    await _close_connections(c.server)


async def stop_sweep_coordinator(c: Coordinator) -> None:
    c.server.stop()
    await _close_connections(c.server)
    await c.services.close()


def bring_up(c: Coordinator) -> None:
    c.server = make_app(c.services).listen(port_of(c), "127.0.0.1")


async def request_sweep(c: Coordinator, radius: int = 300) -> dict[str, Any]:
    r = await c.post("/earth/sweep-request", {"lat": CENTRE[0], "lon": CENTRE[1], "radius": radius})
    assert r.status == 200, r.body
    doc = r.json()
    assert doc["queued"], doc
    return doc


async def db_counts(c: Coordinator) -> dict[str, Any]:
    db = c.services.db
    async with db.read() as s:
        leases = (await s.execute(select(func.count()).select_from(SweepLease))).scalar_one()
        results = list((await s.execute(select(SweepResult.state, SweepResult.node_id, SweepResult.reasons,
                                               SweepResult.body))).all())
        jobs = list((await s.execute(select(SweepJob.id, SweepJob.state, SweepJob.failures))).all())
    return {"leases": leases, "results": results, "jobs": jobs}


class MalformingProxy:
    """A loopback proxy in front of the coordinator that spoils the job of the first ``spoil``
    leases it passes on after the first ``skip`` (a buggy or tampered coordinator, as the agent
    must expect)."""

    def __init__(self, target: str, spoil: int = 1, skip: int = 0):
        self.target, self.spoil, self.skip, self.spoiled, self.passed = target, spoil, skip, 0, 0
        self.port = free_port()
        self.server = None

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def start(self) -> "MalformingProxy":
        proxy = self

        class Forward(tornado.web.RequestHandler):
            SUPPORTED_METHODS = ("GET", "POST")

            async def _forward(self) -> None:
                req = HTTPRequest(proxy.target + self.request.uri, method=self.request.method,
                                  headers={k: v for k, v in self.request.headers.items()
                                           if k.lower() in ("authorization", "content-type")},
                                  body=self.request.body if self.request.method == "POST" else None)
                resp = await AsyncHTTPClient().fetch(req, raise_error=False)
                body = resp.body or b""
                if self.request.path.endswith("/lease") and resp.code == 200 and proxy.passed < proxy.skip:
                    proxy.passed += 1
                elif self.request.path.endswith("/lease") and resp.code == 200 and proxy.spoiled < proxy.spoil:
                    doc = json.loads(body)
                    doc["job"]["photos"][0]["url"] = "file:///etc/passwd"
                    doc["job"]["radiusM"] = -5
                    doc["job"]["runThis"] = "import os; os.system('echo pwned')"
                    body = json.dumps(doc).encode()
                    proxy.spoiled += 1
                self.set_status(resp.code)
                for k in ("Content-Type", "Retry-After"):
                    if k in resp.headers:
                        self.set_header(k, resp.headers[k])
                if resp.code != 204:
                    self.write(body)

            async def get(self) -> None:
                await self._forward()

            async def post(self) -> None:
                await self._forward()

        self.server = tornado.web.Application([(r".*", Forward)]).listen(self.port, "127.0.0.1")
        return self

    async def stop(self) -> None:
        self.server.stop()
        await self.server.close_all_connections()
