"""One declaration per tool, every face generated from it: the REST routes of
each family, the OpenAPI document, the MCP tool list of each MCP endpoint and
the tool contract documents. Adding a declaration adds all of them."""
from __future__ import annotations

from typing import Any
from urllib.parse import urlencode

import mcp
from openapi_spec_validator import validate

from coordinator.core.honesty import Answer
from coordinator.faces.mcp.tools import ANSWER_OUTPUT_SCHEMA
from coordinator.core.registry import NUMBER, Param, Tool, ToolRegistry, bbox, lat, lon
from coordinator.catalogue import all_tools
from tests.support import Coordinator, make_settings, start_coordinator, stop_coordinator
from tests.test_mcp_sdk import sample_arguments

FAMILY_PREFIX = {"earth": "/earth", "legacy": "/legacy", "public": "/public/v1/{cred}"}
MCP_PATH = {"earth": "/mcp", "legacy": "/legacy/mcp"}


async def _probe(ctx: Any, params: dict) -> Answer:
    return Answer({"params": {k: v for k, v in params.items()}, "family": ctx.family})


NEW_TOOL = Tool(name="site_probe", title="Site probe", description="A tool added for this test.", handler=_probe,
                routes={"earth": "/site-intel", "legacy": "/site-intel"},
                params=(lat(), lon(), Param("radius", NUMBER, "Radius in metres", minimum=100, maximum=3000,
                                            default=450),),
                output_schema={"type": "object", "required": ["caveats", "params"],
                               "properties": {"caveats": {"type": "array"}, "params": {"type": "object"}}})


def others() -> list[Tool]:
    """Every declared tool but the real ones on the probes' paths (site_intel, site_scan):
    the probes stand on those paths so that adding a tool is seen on a path of the contract."""
    taken = {NEW_TOOL.routes["earth"], "/site-scan"}
    return [t for t in all_tools() if not taken & {t.routes.get("earth"), t.routes.get("legacy")}]


REST_ONLY = Tool(name="scan_probe", title="Scan probe", description="Declared without an MCP face.",
                 handler=_probe, routes={"earth": "/site-scan"}, params=(bbox(max_side=0.05),), mcp=False)


async def faces(c: Coordinator) -> dict[str, Any]:
    """What each face publishes, read from the running coordinator."""
    out: dict[str, Any] = {"openapi": (await c.get("/openapi.json")).json()}
    for fam, path in MCP_PATH.items():
        async with mcp.Client(c.base_url + path, mode="auto") as client:
            out[f"mcp:{fam}"] = {t.name: t for t in (await client.list_tools()).tools}
        out[f"contract:{fam}"] = {t["name"]: t for t in (await c.get(f"/{fam}/tools.json")).json()["tools"]}
    return out


def rest_url(tool: Tool, family: str, args: dict[str, Any]) -> str:
    prefix = FAMILY_PREFIX[family].replace("{cred}", "anon")
    path, args = tool.routes[family], dict(args)
    for p in tool.params:                 # path parameters travel in the path (the widget's id)
        if p.location == "path" and p.name in args:
            path = path.replace("{" + p.name + "}", str(args.pop(p.name)))
    return prefix + path + ("?" + urlencode(args) if args else "")


async def test_adding_a_tool_adds_its_rest_routes_openapi_paths_mcp_tools_and_contract_entries(sqlite_url,
                                                                                              upstream):
    settings = make_settings(sqlite_url, upstream)
    args = {"lat": -6.2, "lon": 106.8, "radius": 900}
    before = await start_coordinator(settings, ToolRegistry(others()))
    try:
        seen = await faces(before)
        for fam in ("earth", "legacy"):
            assert (await before.get(rest_url(NEW_TOOL, fam, args))).status == 404
            assert FAMILY_PREFIX[fam] + "/site-intel" not in seen["openapi"]["paths"]
            assert NEW_TOOL.name not in seen[f"mcp:{fam}"]
            assert NEW_TOOL.name not in seen[f"contract:{fam}"]
    finally:
        await stop_coordinator(before)

    after = await start_coordinator(settings, ToolRegistry([*others(), NEW_TOOL]))
    try:
        seen = await faces(after)
        for fam in ("earth", "legacy"):
            r = await after.get(rest_url(NEW_TOOL, fam, args))
            assert r.status == 200 and r.json()["params"] == {"lat": -6.2, "lon": 106.8, "radius": 900.0}
            op = seen["openapi"]["paths"][FAMILY_PREFIX[fam] + "/site-intel"]["get"]
            assert op["x-tool"] == NEW_TOOL.name
            listed = seen[f"mcp:{fam}"][NEW_TOOL.name]
            assert listed.input_schema == NEW_TOOL.input_schema()
            assert listed.output_schema == NEW_TOOL.output_schema
            # The OpenAPI parameters and the MCP input schema are the same declared schemas.
            assert {p["name"]: p["schema"] for p in op["parameters"]} == listed.input_schema["properties"]
            assert [p["name"] for p in op["parameters"] if p["required"]] == listed.input_schema["required"]
            assert seen[f"contract:{fam}"][NEW_TOOL.name]["inputSchema"] == NEW_TOOL.input_schema()
            async with mcp.Client(after.base_url + MCP_PATH[fam], mode="legacy") as client:
                result = await client.call_tool(NEW_TOOL.name, args)
            assert result.structured_content == r.json()
    finally:
        await stop_coordinator(after)


async def test_every_declared_tool_has_every_face_of_its_families(sqlite_url, upstream):
    registry = ToolRegistry([*others(), NEW_TOOL, REST_ONLY])
    c = await start_coordinator(make_settings(sqlite_url, upstream), registry)
    try:
        seen = await faces(c)
        validate(seen["openapi"])
        for tool in registry:
            for fam in tool.families:
                path = FAMILY_PREFIX[fam] + tool.routes[fam]
                assert seen["openapi"]["paths"][path][tool.method.lower()]["x-tool"] == tool.name
                args = sample_arguments(tool)
                body = {} if tool.method == "POST" else None
                r = await c.request(tool.method, rest_url(tool, fam, args), body=body)
                # A tool that is not keyless refuses the anonymous caller (docs/access.md); it answers a key.
                ok = 202 if tool.cold == "accepted" else 200   # an accepted tool's cold request: 202 first
                assert r.status == (ok if tool.keyless else 401 if fam != "public" else 403), \
                    (tool.name, fam, r.body[:200])
                if fam in MCP_PATH:
                    assert (tool.name in seen[f"mcp:{fam}"]) == tool.mcp, (tool.name, fam)
                    assert seen[f"contract:{fam}"][tool.name]["mcp"] == tool.mcp
            for fam in set(MCP_PATH) - set(tool.families):
                assert tool.name not in seen[f"mcp:{fam}"] and tool.name not in seen[f"contract:{fam}"]
    finally:
        await stop_coordinator(c)


async def test_the_openapi_document_names_the_mcp_endpoints_and_contract_documents(coordinator):
    doc = (await coordinator.get("/openapi.json")).json()
    validate(doc)
    for path in ("/mcp", "/legacy/mcp"):
        assert set(doc["paths"][path]) == {"post"}
    for path in ("/earth/tools.json", "/legacy/tools.json"):
        assert set(doc["paths"][path]) == {"get"}


def test_a_tool_without_its_own_output_schema_publishes_the_shared_answer_schema():
    from coordinator.faces.mcp.tools import descriptor
    d = descriptor(REST_ONLY, "earth")
    assert d["outputSchema"] == ANSWER_OUTPUT_SCHEMA and "$ref" not in str(ANSWER_OUTPUT_SCHEMA)
    assert d["annotations"]["readOnlyHint"] is True


async def test_healthz_counts_the_tools_each_face_serves(coordinator):
    """/healthz said 13 tools where an MCP client listed 8: it now counts per face, and
    each count is what that face serves."""
    import mcp
    body = (await coordinator.get("/healthz")).json()["tools"]
    registry = coordinator.services.registry
    assert body["declared"] == len(registry)
    assert body["rest"] == {f: len(registry.in_family(f)) for f in ("earth", "legacy", "public")}
    for fam, path in MCP_PATH.items():
        async with mcp.Client(coordinator.base_url + path, mode="auto") as client:
            assert body["mcp"][fam] == len((await client.list_tools()).tools)


async def test_the_root_points_to_the_api_documents(coordinator):
    r = await coordinator.get("/")
    assert r.status == 200
    body = r.json()
    for path in (body["openapi"], *body["toolContracts"].values(), body["healthz"], body["review"]):
        assert (await coordinator.get(path)).status == 200, path
