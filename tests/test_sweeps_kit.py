"""Shared pieces of the sweep and node tests (no tests of its own): a fake photo provider,
a coordinator pointed at it, and a simulated node speaking the node protocol over HTTP."""
from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any, AsyncIterator

import pytest
from sqlalchemy import select, update

from coordinator.core.db.models import Node
from coordinator.demo.photos import DEV_ENGINE_BUILD, FakePhotoProvider, honest_result
from coordinator.sweeps.service import sweeps_of
from tests.support import Coordinator, Response, make_settings, start_coordinator, stop_coordinator

CENTRE = (48.8566, 2.3522)


@pytest.fixture
async def photos() -> AsyncIterator[FakePhotoProvider]:
    fake = await FakePhotoProvider().start()
    yield fake
    await fake.stop()


def sweep_settings(db_url: str, photos: FakePhotoProvider, **kw: Any):
    kw.setdefault("engine_builds", DEV_ENGINE_BUILD)
    kw.setdefault("lease_sweep_interval_s", 0)
    return make_settings(db_url, None, photos_url=photos.api_url, **kw)


async def migrate(db_url: str) -> None:
    """PostgreSQL refuses to serve an old schema (``sis migrate`` first); SQLite migrates itself."""
    if db_url.startswith("sqlite"):
        return
    from sqlalchemy.ext.asyncio import create_async_engine

    from coordinator.core.db import migrate as migrations
    engine = create_async_engine(db_url)
    try:
        await migrations.upgrade_async(engine, db_url)
    finally:
        await engine.dispose()


async def start(db_url: str, photos: FakePhotoProvider, **kw: Any) -> Coordinator:
    await migrate(db_url)
    return await start_coordinator(sweep_settings(db_url, photos, **kw))


@pytest.fixture
async def sweeps_db(db_url, photos) -> AsyncIterator[Coordinator]:
    """A coordinator on each database backend, its photo provider the fake."""
    c = await start(db_url, photos)
    yield c
    await stop_coordinator(c)


@pytest.fixture
async def sweeps_sqlite(sqlite_url, photos) -> AsyncIterator[Coordinator]:
    c = await start(sqlite_url, photos)
    yield c
    await stop_coordinator(c)


async def request_sweep(c: Coordinator, lat: float = CENTRE[0], lon: float = CENTRE[1], radius: float = 450) -> Response:
    return await c.post("/earth/sweep-request", {"lat": lat, "lon": lon, "radius": radius})


@dataclass
class SimNode:
    """A node speaking the protocol over HTTP, with what it holds."""

    c: Coordinator
    node_id: str = ""
    token: str = ""
    leases: dict[str, dict] = field(default_factory=dict)

    @property
    def auth(self) -> dict[str, str]:
        return {"Authorization": f"Bearer {self.token}"}

    async def enrol(self, build: str = DEV_ENGINE_BUILD, **kw: Any) -> Response:
        body = {"platform": "Linux-6.8-x86_64", "gpu": "NVIDIA RTX 3060 12GB", "engineVersion": "0.1.0",
                "engineBuild": build, **kw}
        r = await self.c.post("/node/v1/enrol", body)
        if r.status == 201:
            self.node_id, self.token = r.json()["nodeId"], r.json()["token"]
        return r

    async def lease(self) -> dict | None:
        r = await self.c.post("/node/v1/lease", {}, headers=self.auth)
        if r.status == 204:
            return None
        assert r.status == 200, r.body
        doc = r.json()
        self.leases[doc["lease"]["leaseId"]] = doc
        return doc

    async def heartbeat(self, lease_id: str) -> Response:
        return await self.c.post(f"/node/v1/leases/{lease_id}/heartbeat", {}, headers=self.auth)

    async def release(self, lease_id: str, body: Any = None) -> Response:
        data = b"" if body is None else body if isinstance(body, (bytes, str)) else json.dumps(body)
        return await self.c.post(f"/node/v1/leases/{lease_id}/release", data,
                                 headers={**self.auth, "Content-Type": "application/json"})

    async def submit(self, lease_id: str, body: Any, next_: str | None = None) -> Response:
        data = body if isinstance(body, (bytes, str)) else json.dumps(body)
        query = f"?next={next_}" if next_ is not None else ""
        return await self.c.post(f"/node/v1/leases/{lease_id}/result{query}", data,
                                 headers={**self.auth, "Content-Type": "application/json"})

    def honest(self, lease: dict, **kw: Any) -> dict:
        return honest_result(lease["job"], self.node_id, **kw)


async def enrolled(c: Coordinator, n: int = 1, trusted: bool = False) -> list[SimNode]:
    nodes = []
    for _ in range(n):
        node = SimNode(c)
        assert (await node.enrol()).status == 201
        nodes.append(node)
    if trusted:
        await set_trusted(c, [x.node_id for x in nodes])
    return nodes


async def set_trusted(c: Coordinator, node_ids: list[str]) -> None:
    """Give nodes their trust directly (as if they had earned it), for tests about single replicas."""
    sw = sweeps_of(c.services)
    async with sw.db.write() as s:
        await s.execute(update(Node).where(Node.id.in_(node_ids))
                        .values(trusted=True, streak=sw.settings.trust_streak))


async def node_row(c: Coordinator, node_id: str) -> Node:
    async with c.services.db.read() as s:
        return (await s.execute(select(Node).where(Node.id == node_id))).scalar_one()
