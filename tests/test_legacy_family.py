"""The legacy family: exactly the ten paths of SPEC.md, the same tools with the
legacy differences, the sweep-side tools absent (404), and its own MCP
endpoint and tool contract document."""
from __future__ import annotations

from typing import Any

import mcp
import pytest

from coordinator.core.honesty import Answer
from coordinator.core.registry import LEGACY_ABSENT_TOOLS, LEGACY_PATHS, Tool, ToolRegistry
from coordinator.catalogue import all_tools, default_registry
from tests.support import make_settings, start_coordinator, stop_coordinator

SPEC_LEGACY_PATHS = ["/legacy/events", "/legacy/event-brief", "/legacy/event-changes", "/legacy/site-intel",
                     "/legacy/site-scan", "/legacy/places", "/legacy/infrastructure", "/legacy/w/twin_earth",
                     "/legacy/place-trends", "/legacy/fingerprint"]
# The six sweep-side tools and their direct-family routes (SPEC.md, Direct family).
SWEEP_SIDE = {"street_measure": ("GET", "/street-measure"), "sweep_request": ("POST", "/sweep-request"),
              "node_app": ("GET", "/node-app"), "seen_layer": ("GET", "/seen"),
              "environment_features": ("GET", "/environment"), "road_geometry": ("GET", "/road-geometry")}


async def _stand_in(ctx: Any, params: dict) -> Answer:
    return Answer({"standIn": True})


def stand_in(name: str, method: str, path: str, **kw: Any) -> Tool:
    """A declaration with the routes a real tool will have; its handler is a stand-in,
    because what is tested is where the tool is (and is not) routed."""
    return Tool(name=name, title=name, description=f"stand-in for {name}", handler=_stand_in,
                routes={"earth": path, **kw.pop("routes", {})}, method=method, **kw)


def test_the_legacy_paths_are_exactly_the_ten_of_the_spec():
    assert sorted("/legacy" + p for p in LEGACY_PATHS) == sorted(SPEC_LEGACY_PATHS)
    assert sorted(LEGACY_ABSENT_TOOLS) == sorted(SWEEP_SIDE)
    for tool in default_registry().in_family("legacy"):
        assert tool.routes["legacy"] in LEGACY_PATHS


@pytest.mark.parametrize("name", sorted(SWEEP_SIDE))
def test_the_registry_refuses_a_sweep_side_tool_in_the_legacy_family(name):
    method, path = SWEEP_SIDE[name]
    with pytest.raises(ValueError, match="absent from the legacy family"):
        ToolRegistry([stand_in(name, method, path, routes={"legacy": path})])


def test_the_registry_refuses_a_legacy_path_outside_the_ten():
    with pytest.raises(ValueError, match="not a legacy path"):
        ToolRegistry([stand_in("limits_again", "GET", "/limits2", routes={"legacy": "/limits"})])


async def test_legacy_events_carry_extent_bboxes_and_direct_events_fixed_squares(coordinator):
    legacy = (await coordinator.get("/legacy/events")).json()
    direct = (await coordinator.get("/earth/events")).json()
    # The contract's bbox is the upstream's rectangle; only the direct family's is a fixed square.
    public = (await coordinator.get("/public/v1/anon/events")).json()
    assert public["events"] == legacy["events"] and public["caveats"] == legacy["caveats"]
    assert "extent rectangle taken from the upstream alert feed" in legacy["caveats"][0]
    assert "fixed square" in direct["caveats"][0] and "not the hazard's extent" in direct["caveats"][0]
    kinds = {e["id"]: e["bboxKind"] for e in legacy["events"]}
    assert "upstream-extent" in kinds.values()
    assert {e["bboxKind"] for e in direct["events"]} == {"fixed-square"}
    assert {e["id"] for e in direct["events"]} == set(kinds)
    for e in legacy["events"]:
        assert e["posQuality"] == "modeled-bbox"


async def test_legacy_event_changes_is_served(coordinator):
    r = await coordinator.get("/legacy/event-changes")
    assert r.status == 200 and "history" in r.json() and r.json()["caveats"]


@pytest.fixture
async def with_sweep_side(sqlite_url, upstream):
    existing = {t.name for t in all_tools()}
    extra = [stand_in(n, m, p) for n, (m, p) in SWEEP_SIDE.items() if n not in existing]
    c = await start_coordinator(make_settings(sqlite_url, upstream), ToolRegistry([*all_tools(), *extra]))
    yield c
    await stop_coordinator(c)


async def test_sweep_side_tools_are_404_in_legacy_and_absent_from_its_mcp_and_contract(with_sweep_side):
    c = with_sweep_side
    for name, (method, path) in SWEEP_SIDE.items():
        body = {} if method == "POST" else None
        direct = await c.request(method, "/earth" + path, body=body)
        # The route exists in the direct family (a real tool may refuse the empty call with 400).
        assert direct.status in (200, 400), name
        assert direct.json().get("error", {}).get("code") != "not_found", name
        r = await c.request(method, "/legacy" + path, body=body)
        assert r.status == 404, name
        assert r.json()["error"]["code"] == "not_found"
    async with mcp.Client(c.base_url + "/legacy/mcp", mode="auto") as client:
        legacy_names = {t.name for t in (await client.list_tools()).tools}
    async with mcp.Client(c.base_url + "/mcp", mode="auto") as client:
        direct_names = {t.name for t in (await client.list_tools()).tools}
    assert set(SWEEP_SIDE) <= direct_names
    assert not set(SWEEP_SIDE) & legacy_names
    doc = (await c.get("/legacy/tools.json")).json()
    assert sorted(doc["absentTools"]) == sorted(SWEEP_SIDE)
    assert not {t["name"] for t in doc["tools"]} & set(SWEEP_SIDE)


async def test_the_fingerprint_publishes_the_legacy_cold_bound(coordinator):
    """The legacy difference of the fingerprint (cold latency 5-20 s, not 5-60 s) reaches the
    contract and MCP faces from its declaration (coordinator/fingerprint/tools.py)."""
    bounds = {}
    for fam in ("earth", "legacy"):
        doc = (await coordinator.get(f"/{fam}/tools.json")).json()
        bounds[fam] = next(t["coldBoundS"] for t in doc["tools"] if t["name"] == "environmental_fingerprint")
    assert bounds == {"earth": 60, "legacy": 20}
    async with mcp.Client(coordinator.base_url + "/legacy/mcp", mode="legacy") as client:
        listed = {t.name: t for t in (await client.list_tools()).tools}
    assert "Cold 5-20 s" in listed["environmental_fingerprint"].description


@pytest.mark.parametrize("family", ["earth", "legacy"])
async def test_the_tool_contract_document_is_version_1_and_lists_the_family(coordinator, family):
    r = await coordinator.get(f"/{family}/tools.json")
    assert r.status == 200 and r.headers["Cache-Control"] == "public, max-age=300"
    doc = r.json()
    assert doc["version"] == 1 and doc["family"] == family
    declared = coordinator.services.registry.in_family(family)
    assert [t["name"] for t in doc["tools"]] == [t.name for t in declared]
    for entry, tool in zip(doc["tools"], declared):
        assert entry["path"] == f"/{family}{tool.routes[family]}"
        assert entry["inputSchema"] == tool.input_schema()
        assert entry["description"] == tool.description_for(family)
    assert doc["mcp"]["endpoint"] == ("/mcp" if family == "earth" else "/legacy/mcp")
    assert doc["mcp"]["protocolVersions"][0] == "2026-07-28"
    assert ("absentTools" in doc) == (family == "legacy")


async def test_openapi_describes_hazard_events_as_each_family_serves_it(coordinator):
    """Each family's OpenAPI operation carries that family's description, as MCP and the contract do."""
    paths = (await coordinator.get("/openapi.json")).json()["paths"]
    direct = paths["/earth/events"]["get"]["description"]
    legacy = paths["/legacy/events"]["get"]["description"]
    assert "fixed square" in direct and "extent" in legacy and direct != legacy
