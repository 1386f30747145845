"""Helpers shared by the access tests (no tests of its own): credentials made the
way an operator makes them, requests from many clients at once, and the
stand-in tools that let generic enforcement be checked before the real tools
exist."""
from __future__ import annotations

import asyncio
import os
import uuid
from datetime import timedelta
from typing import Any

from sqlalchemy import update
from tornado.httpclient import AsyncHTTPClient, HTTPRequest

from coordinator.core.access import credentials as creds
from coordinator.core.db.models import AccessUsage, EmbedToken
from coordinator.core.honesty import Answer
from coordinator.core.registry import BBOX, INTEGER, NUMBER, STRING, Param, Tool, ToolRegistry, radius
from coordinator.catalogue import all_tools
from tests.support import Coordinator

REDIS_URL = os.environ.get("SIS_TEST_REDIS_URL", "")


def unique_prefix() -> str:
    return f"sistest-{uuid.uuid4().hex[:10]}"


async def key(c: Coordinator, plan: str = "Free", scopes: list[str] | None = None) -> tuple[str, creds.KeyRecord]:
    return await creds.create_key(c.services.db, f"test {plan}", plan, scopes)


async def embed(c: Coordinator, key_secret: str, origin: str = "https://maps.example.org",
                budget: int | None = None) -> dict:
    body: dict[str, Any] = {"origin": origin}
    if budget is not None:
        body["budget"] = budget
    r = await c.post(f"/public/v1/{key_secret}/embed-tokens", body)
    assert r.status == 201, r.body
    return r.json()


async def expire_embed(c: Coordinator, token_id: str) -> None:
    async with c.services.db.write() as s:
        await s.execute(update(EmbedToken).where(EmbedToken.id == token_id)
                        .values(expires_at=creds.now() - timedelta(seconds=1)))


async def set_usage(c: Coordinator, subject: str, period: str, count: int) -> None:
    """Seed a persisted counter (as if that many requests had been made earlier)."""
    async with c.services.db.write() as s:
        row = await s.get(AccessUsage, (subject, period))
        if row is None:
            s.add(AccessUsage(subject=subject, period=period, count=count))
        else:
            row.count = count


async def burst(base_url: str, path: str, clients: int, per_client: int,
                headers: dict | None = None) -> list[int]:
    """``clients`` concurrent clients, each sending ``per_client`` requests back to back."""
    http = AsyncHTTPClient(force_instance=True, max_clients=clients)
    statuses: list[int] = []

    async def client() -> None:
        for _ in range(per_client):
            r = await http.fetch(HTTPRequest(base_url + path, headers=headers or {}, request_timeout=60),
                                 raise_error=False)
            statuses.append(r.code)

    try:
        await asyncio.gather(*(client() for _ in range(clients)))
    finally:
        http.close()
    return statuses


# ---- stand-in tools: generic enforcement, checked before the real tools exist ----

async def _echo_rows(ctx: Any, params: dict) -> Answer:
    return Answer({"params": {k: list(v) if isinstance(v, tuple) else v for k, v in params.items()},
                   "rows": list(range(3000))})


SITE_INTEL_STANDIN = Tool(
    name="site_intel_standin", title="Stand-in for site_intel", description="test only: the scope rule of site-intel",
    handler=_echo_rows, routes={"public": "/site-intel"}, scopes=("earth.site-intel",), keyless=False,
    params=(Param("lat", NUMBER, "lat", required=True, minimum=-90, maximum=90),
            Param("lon", NUMBER, "lon", required=True, minimum=-180, maximum=180),
            radius(100, 3000, 1000)))

PLACES_STANDIN = Tool(
    name="places_standin", title="Stand-in for places", description="test only: the places bbox ceiling",
    handler=_echo_rows, routes={"public": "/places"}, scopes=("earth.places",), bbox_ceiling_deg=0.6,
    params=(Param("bbox", BBOX, "bbox", required=True),))

AREA_PROBE = Tool(
    name="area_probe", title="Area probe", description="test only: plan caps on bbox, radius and rows",
    handler=_echo_rows, routes={"public": "/area-probe", "earth": "/area-probe"},
    params=(Param("bbox", BBOX, "bbox"), radius(100, 3000, 1000), Param("n", INTEGER, "n", minimum=0),
            Param("tag", STRING, "tag")))

STANDINS = (SITE_INTEL_STANDIN, PLACES_STANDIN, AREA_PROBE)


def registry_with_standins() -> ToolRegistry:
    return ToolRegistry([*all_tools(), *STANDINS])
