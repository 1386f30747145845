"""GET /public/v1/{cred}/hazard-index: InaRISK identify answers from the recorded samples; the
accepted (202) flow: a cold point answers 202 with Retry-After, the same URL answers 200 once
ready, and concurrent requests share one computation (each service asked once); NoData is
unknown; a failing service makes the answer degraded, naming it."""
from __future__ import annotations

import asyncio
import os
import random
import uuid

import pytest

from coordinator.demo.upstream import Canned, sample
from coordinator.panels.hazard_index import SERVICES, hazard_class
from tests.support import make_settings, start_coordinator, stop_coordinator

URL = "/public/v1/anon/hazard-index?lat=-6.1754&lon=106.8272"


def path(service: str) -> str:
    return f"/inarisk/{service}/ImageServer/identify"


@pytest.fixture
async def c(db_url, upstream):
    c = await start_coordinator(make_settings(db_url, upstream))
    yield c
    await stop_coordinator(c)


async def until_ready(c, url: str = URL, tries: int = 100):
    for _ in range(tries):
        r = await c.get(url)
        if r.status != 202:
            return r
        await asyncio.sleep(0.05)
    raise AssertionError("never ready")


async def test_a_cold_point_is_accepted_then_answered(c, upstream):
    r = await c.get(URL)
    assert r.status == 202 and r.headers["Retry-After"] == "3"
    body = r.json()
    assert body["accepted"] is True and body["retryAfterS"] == 3 and list(body)[0] == "caveats"
    r = await until_ready(c)
    body = r.json()
    assert r.status == 200 and list(body)[0] == "caveats"
    flood = body["hazards"][0]
    assert flood == {"hazard": "flood", "service": "INDEKS_BAHAYA_BANJIR",
                     "index": {"value": 0.7216, "confidence": "high", "scale": "0-1"}, "class": "tinggi",
                     "license": "BNPB InaRISK (terms unstated)"}
    assert len(body["hazards"]) == 11
    volcano = next(h for h in body["hazards"] if h["hazard"] == "volcano")
    assert volcano["index"]["value"] is None and volcano["index"]["confidence"] == "unknown"
    assert volcano["class"] is None
    assert body["multiHazard"]["index"]["value"] == 0.5871 and body["multiHazard"]["class"] == "sedang"
    assert body["health"]["degraded"] is False
    assert (await c.get(URL)).status == 200                 # from the cache now
    assert all(upstream.hits[path(s)] == 1 for s in SERVICES)


async def test_concurrent_requests_share_one_computation(c, upstream):
    slow = path("INDEKS_BAHAYA_TSUNAMI")
    upstream.set(slow, Canned(200, upstream.routes[slow].body, "application/json", delay_s=0.4))
    first = await asyncio.gather(*(c.get(URL) for _ in range(6)))
    assert [r.status for r in first] == [202] * 6
    await until_ready(c)
    assert all(upstream.hits[path(s)] == 1 for s in SERVICES)


async def test_a_failing_service_is_degraded_and_handed_over_once(c, upstream):
    upstream.set_json(path("INDEKS_BAHAYA_GEMPABUMI"),
                      {"error": {"code": 500, "message": "Error performing identify"}})
    assert (await c.get(URL)).status == 202
    r = await until_ready(c)
    body = r.json()
    assert r.status == 200 and body["health"]["degraded"] is True
    bad = [s for s in body["health"]["sources"] if not s["ok"]]
    assert bad == [{"name": "BNPB InaRISK INDEKS_BAHAYA_GEMPABUMI", "ok": False,
                    "license": "BNPB InaRISK (terms unstated)", "error": "ArcGIS error 500: Error performing identify"}]
    # one source per service asked: 12 queried, 11 answered (it said 2 and 1)
    assert (body["health"]["sourcesQueried"], body["health"]["sourcesUsable"]) == (len(SERVICES), len(SERVICES) - 1)
    assert "1 of 12 sources" in body["caveats"][0]
    quake = next(h for h in body["hazards"] if h["hazard"] == "earthquake")
    assert quake["index"]["value"] is None and "Error performing identify" in quake["index"]["reason"]
    assert body["caveats"][0].startswith("Degraded")
    upstream.set_json(path("INDEKS_BAHAYA_GEMPABUMI"),
                      sample("inarisk", "INDEKS_BAHAYA_GEMPABUMI/ImageServer/identify"))
    assert (await c.get(URL)).status == 202                 # not cached: computed anew
    assert (await until_ready(c)).json()["health"]["degraded"] is False


async def test_bounds_are_checked_before_anything_is_computed(c, upstream):
    r = await c.get("/public/v1/anon/hazard-index?lat=-96&lon=106.8")
    assert r.status == 400 and r.json()["error"]["details"]["parameter"] == "lat"
    assert not any(p.startswith("/inarisk/") for p in upstream.hits)


@pytest.mark.parametrize("value, cls", [(0.0, "rendah"), (0.33, "rendah"), (0.34, "sedang"), (0.66, "sedang"),
                                        (0.67, "tinggi"), (1.0, "tinggi"), (None, None)])
def test_classes(value, cls):
    assert hazard_class(value) == cls


REDIS_URL = os.environ.get("SIS_TEST_REDIS_URL", "")


@pytest.mark.skipif(not REDIS_URL, reason="Redis tests: set SIS_TEST_REDIS_URL")
async def test_two_coordinators_sharing_redis_compute_a_point_once(sqlite_url, tmp_path, upstream):
    prefix = f"t{uuid.uuid4().hex[:8]}"
    url = f"/public/v1/anon/hazard-index?lat={-6 - random.random():.6f}&lon=106.8272"   # a point no run has cached
    slow = path("INDEKS_BAHAYA_TSUNAMI")
    upstream.set(slow, Canned(200, upstream.routes[slow].body, "application/json", delay_s=0.4))
    a = await start_coordinator(make_settings(sqlite_url, upstream, redis_url=REDIS_URL, rate_limit_prefix=prefix))
    b = await start_coordinator(make_settings(f"sqlite+aiosqlite:///{tmp_path}/b.db", upstream, redis_url=REDIS_URL,
                                              rate_limit_prefix=prefix))
    try:
        first = await asyncio.gather(*(x.get(url) for x in [a, b] * 3))
        assert [r.status for r in first] == [202] * 6
        ra, rb = await until_ready(a, url), await until_ready(b, url)
        assert ra.status == rb.status == 200 and ra.json() == rb.json()
        assert all(upstream.hits[path(s)] == 1 for s in SERVICES)
        assert a.services.cache.shared and b.services.cache.shared
    finally:
        await stop_coordinator(a)
        await stop_coordinator(b)
