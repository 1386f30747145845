"""What an agent meets on /mcp: a tool list it can afford to read (no 1679-id enum), a widget
manifest that answers a page by default and says how to ask the next, structuredContent that
matches each tool's outputSchema, hints set per tool, the key sent where a keyed tool's
description says, and refusals (unknown tool, unknown widget, an argument no tool declares)
that say how to correct the call."""
from __future__ import annotations

import json

import mcp
import pytest
from jsonschema import Draft202012Validator

from coordinator.core.honesty import Answer
from coordinator.core.registry import INTEGER, STRING, Param, Tool, ToolRegistry
from coordinator.faces.mcp.tools import KEY_ON_MCP, descriptor
from coordinator.widgets.tools import catalogue

NEW = {"MCP-Protocol-Version": "2025-11-25", "Content-Type": "application/json",
       "Accept": "application/json, text/event-stream"}
OLD = {**NEW, "MCP-Protocol-Version": "2025-06-18"}
TOKEN_BUDGET_BYTES = 25_000 * 4 // 2      # half of Claude Code's default limit on a tool result (25k tokens)


async def rpc(c, method: str, params: dict | None = None, headers: dict = NEW, path: str = "/mcp"):
    r = await c.post(path, {"jsonrpc": "2.0", "id": 1, "method": method, **({"params": params} if params else {})},
                     headers=headers)
    return r, r.json()


async def listed(c, path: str = "/mcp") -> tuple[int, dict]:
    r, j = await rpc(c, "tools/list", path=path)
    return len(r.body), {t["name"]: t for t in j["result"]["tools"]}


async def call(c, name: str, arguments: dict, headers: dict = NEW, path: str = "/mcp"):
    r, j = await rpc(c, "tools/call", {"name": name, "arguments": arguments}, headers, path)
    return r, j


def schema_errors(schema: dict, value) -> list[str]:
    return [f"{list(e.path)}: {e.message}" for e in Draft202012Validator(schema).iter_errors(value)]


async def test_the_tool_list_has_no_id_enum_and_every_widget_id_passes_its_schema(coordinator):
    size, tools = await listed(coordinator)
    assert size < 40_000, size                   # 65,458 B with the enum of 1679 ids (36,233 B of it)
    schema = tools["widget"]["inputSchema"]
    assert "enum" not in schema["properties"]["id"] and "pattern" in schema["properties"]["id"]
    validator = Draft202012Validator(schema)
    assert all(validator.is_valid({"id": i}) for i in catalogue().widgets)
    assert not validator.is_valid({"id": "twin_earth"})


async def test_widget_manifest_answers_a_page_on_mcp_that_an_agent_can_read(coordinator):
    _, tools = await listed(coordinator)
    manifest = tools["widget_manifest"]
    props = manifest["inputSchema"]["properties"]
    assert props["limit"]["default"] == 50 and props["fields"]["default"] == "compact"
    assert {"offset", "nextOffset", "total", "q", "category"} <= set(manifest["description"].replace(",", " ")
                                                                        .replace("(", " ").replace(")", " ").split())
    for args in ({}, {"category": "Macro"}, {"q": "gdp"}, {"fields": "full"}, {"offset": 1650},
                 {"limit": 5, "offset": 10, "fields": "full"}):
        r, j = await call(coordinator, "widget_manifest", args)
        result = j["result"]
        assert result["isError"] is False, result
        text, body = result["content"][0]["text"], result["structuredContent"]
        assert json.loads(text) == body
        assert not schema_errors(manifest["outputSchema"], body), (args, schema_errors(manifest["outputSchema"], body))
        assert len(text) < TOKEN_BUDGET_BYTES, (args, len(text))       # was 1,305,042 B for {}
        assert body["count"] == len(body["widgets"]) <= args.get("limit", 50)
    first = (await call(coordinator, "widget_manifest", {}))[1]["result"]["structuredContent"]
    assert (first["total"], first["offset"], first["nextOffset"], first["fields"]) == (1679, 0, 50, "compact")
    assert set(first["widgets"][0]) == {"id", "title", "category", "source"}
    assert "offset=50" in " ".join(first["caveats"])
    nxt = (await call(coordinator, "widget_manifest", {"offset": first["nextOffset"]}))[1]["result"]
    rest = (await coordinator.get("/earth/widgets.json?fields=compact&limit=100")).json()["widgets"]
    assert first["widgets"] + nxt["structuredContent"]["widgets"] == rest


async def test_every_mcp_answer_matches_its_declared_output_schema_on_the_sdk(coordinator):
    """The SDK client checks structuredContent against outputSchema itself: it raises on a mismatch."""
    async with mcp.Client(coordinator.base_url + "/mcp", mode="auto") as client:
        for args in ({}, {"fields": "full", "limit": 3}, {"category": "Crypto", "limit": 2000}):
            result = await client.call_tool("widget_manifest", args)
            assert result.is_error is False and result.structured_content["widgets"]


async def test_an_unknown_widget_is_refused_with_the_closest_ids(coordinator):
    _, j = await call(coordinator, "widget", {"id": "cg-bitcoim"})
    result = j["result"]
    assert result["isError"] is True
    err = result["structuredContent"]["error"]
    assert err["code"] == "not_found" and err["details"]["didYouMean"][0] == "cg-bitcoin"


async def test_hints_are_all_said_and_follow_the_declaration(coordinator):
    _, tools = await listed(coordinator)
    for name, t in tools.items():
        a = t["annotations"]
        assert {"readOnlyHint", "destructiveHint", "idempotentHint", "openWorldHint"} <= set(a), name
        if a["readOnlyHint"]:
            assert a["destructiveHint"] is False and a["idempotentHint"] is True, name
    assert tools["widget_manifest"]["annotations"]["openWorldHint"] is False     # the catalogue is this service's
    assert tools["widget"]["annotations"]["openWorldHint"] is True              # an upstream's answer
    assert tools["hazard_events"]["annotations"]["readOnlyHint"] is True


def test_declared_hints_are_published_and_contradictions_refused():
    async def handler(ctx, params):
        return Answer({})
    merge = Tool("merge", "Merge", "Adds or merges a queue entry", handler, routes={"earth": "/merge"}, method="POST",
                 destructive=False, idempotent=True, open_world=False)
    assert descriptor(merge, "earth")["annotations"] == {
        "title": "Merge", "readOnlyHint": False, "destructiveHint": False, "idempotentHint": True,
        "openWorldHint": False}
    plain = Tool("write", "Write", "Writes", handler, routes={"earth": "/write"}, method="POST")
    assert descriptor(plain, "earth")["annotations"]["destructiveHint"] is True    # said, not left to the default
    with pytest.raises(ValueError, match="read_only"):
        ToolRegistry([Tool("w", "W", "W", handler, routes={"earth": "/w2"}, method="POST", read_only=True)])
    with pytest.raises(ValueError, match="MCP default"):
        ToolRegistry([Tool("m", "M", "M", handler, routes={"earth": "/m"},
                           params=(Param("n", INTEGER, "n", minimum=1, maximum=10, mcp_default=50),))])


def test_an_mcp_default_is_published_and_applied_on_mcp_only():
    async def handler(ctx, params):
        return Answer({})
    t = Tool("d", "D", "D", handler, routes={"earth": "/d"},
             params=(Param("n", INTEGER, "n", minimum=1, maximum=100, mcp_default=5), Param("s", STRING, "s")))
    assert "default" not in t.input_schema()["properties"]["n"]
    assert t.input_schema(mcp=True)["properties"]["n"]["default"] == 5
    assert t.mcp_defaults() == {"n": 5}
    assert t.validate({}) == {"n": None, "s": None}                   # REST: absent is absent


async def test_usage_says_where_the_key_goes_and_a_key_argument_is_refused_as_no_parameter(coordinator):
    from coordinator.core.access.credentials import create_key
    secret, rec = await create_key(coordinator.services.db, "key as argument")
    _, tools = await listed(coordinator)
    assert KEY_ON_MCP in tools["usage"]["description"] and "?key= on the MCP endpoint URL" in KEY_ON_MCP
    assert KEY_ON_MCP not in tools["limits"]["description"]          # keyless tools need no key
    r, j = await call(coordinator, "usage", {"key": secret})
    assert r.status == 200 and j["result"]["isError"] is True, j  # was a 401 "needs a key" before validation
    err = j["result"]["structuredContent"]["error"]
    assert err["code"] == "bad_parameter" and err["details"]["parameter"] == "key" and "X-Api-Key" in err["message"]
    _, j = await call(coordinator, "usage", {"nope": 1})
    assert j["result"]["structuredContent"]["error"]["details"]["parameter"] == "nope"
    _, j = await call(coordinator, "usage", {}, path=f"/mcp?key={secret}")
    assert j["result"]["isError"] is False and j["result"]["structuredContent"]["key"]["id"] == rec.id


@pytest.mark.parametrize("path", ["/mcp", "/legacy/mcp"])
async def test_an_unknown_tool_carries_status_400_and_the_family_tools(coordinator, path):
    _, tools = await listed(coordinator, path)
    for headers in (NEW, OLD):
        _, j = await call(coordinator, "no_such_tool", {}, headers, path)
        err = j["error"]
        assert err["code"] == -32602 and err["data"]["code"] == "unknown_tool" and err["data"]["status"] == 400
        assert err["data"]["details"]["tools"] == list(tools)


async def test_hints_are_set_truthfully_per_tool(coordinator):
    """sweep_request only adds or merges a queue entry: not destructive; a repeat counts another ask and
    goes on with the ground not yet listed: not idempotent. Tools that read only this service's own state
    are closed-world."""
    _, tools = await listed(coordinator)
    a = tools["sweep_request"]["annotations"]
    assert (a["readOnlyHint"], a["destructiveHint"], a["idempotentHint"], a["openWorldHint"]) == (False, False, False, True)
    for name in ("limits", "usage", "sweep_queue", "node_app", "widget_manifest", "seen_layer", "street_measure"):
        assert tools[name]["annotations"]["openWorldHint"] is False, name
    for name in ("hazard_events", "widget", "twin_earth", "site_scan", "places_bbox"):
        assert tools[name]["annotations"]["openWorldHint"] is True, name
