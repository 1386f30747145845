"""Both MCP endpoints driven by the official SDK client, in both protocol eras:
``mode="auto"`` speaks 2026-07-28 (server/discover, no initialize), and
``mode="legacy"`` the 2025-11-25 initialize handshake."""
from __future__ import annotations

import json
from typing import Any

import mcp
import pytest
from mcp.shared.exceptions import MCPError

from coordinator.core.errors import NotFound, RateLimited
from coordinator.core.honesty import Answer
from coordinator.faces.mcp.tools import mcp_tools
from coordinator.core.registry import BBOX, INTEGER, LONLAT_LIST, NUMBER, Param, Tool, ToolRegistry, radius
from coordinator.catalogue import all_tools, default_registry
from tests.support import make_settings, start_coordinator, stop_coordinator

MODES = {"auto": "2026-07-28", "legacy": "2025-11-25"}
ENDPOINTS = {"/mcp": "earth", "/legacy/mcp": "legacy"}


def sample_arguments(tool: Tool) -> dict[str, Any]:
    """Valid arguments read off the declaration: every required parameter, inside its bounds."""
    args: dict[str, Any] = {}
    for p in tool.params:
        if not p.required:
            continue
        if p.kind in (NUMBER, INTEGER):
            lo = p.minimum if p.minimum is not None else 0
            hi = p.maximum if p.maximum is not None else lo + 2
            mid = (lo + hi) / 2
            args[p.name] = int(mid) if p.kind == INTEGER else mid
        elif p.kind == BBOX:
            side = min(p.max_side_deg or 0.01, 0.01)
            args[p.name] = f"106.8,-6.2,{106.8 + side},{-6.2 + side}"
        elif p.kind == LONLAT_LIST:
            args[p.name] = "106.8,-6.21;106.81,-6.21;106.81,-6.2"
        elif p.enum:
            args[p.name] = p.enum[0]
        else:
            args[p.name] = STRING_SAMPLES.get((tool.name, p.name), STRING_SAMPLES.get(p.name, "x"))
    return args


STRING_SAMPLES = {"brand": "Q99999901", "id": "gdacs:EQ:1569499",     # strings whose declared pattern "x" does not match
                  ("widget", "id"): "swpc-noaa-planetary-k-index"}    # the widget id is a pattern, not an enum


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("path", ENDPOINTS)
async def test_sdk_connects_and_lists_the_family_tools_from_their_declarations(coordinator, mode, path):
    family = ENDPOINTS[path]
    registry = coordinator.services.registry
    async with mcp.Client(coordinator.base_url + path, mode=mode) as client:
        assert client.protocol_version == MODES[mode]
        assert client.server_info is not None and client.server_info.name == "spatial-intelligence-service"
        listed = (await client.list_tools()).tools
    expected = mcp_tools(registry, family)
    assert [t.name for t in listed] == [t.name for t in expected] and expected
    for wire, tool in zip(listed, expected):
        assert wire.input_schema == tool.input_schema(mcp=True)     # with the MCP defaults
        assert wire.output_schema and wire.output_schema["type"] == "object"
        assert wire.description.startswith(tool.description_for(family))   # a keyed tool: + how to send the key
        assert wire.title == tool.title


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("path", ENDPOINTS)
async def test_sdk_calls_each_tool_and_gets_what_the_rest_route_serves(coordinator, mode, path):
    family = ENDPOINTS[path]
    prefix = "/earth" if family == "earth" else "/legacy"
    tools = mcp_tools(coordinator.services.registry, family)
    async with mcp.Client(coordinator.base_url + path, mode=mode) as client:
        for tool in tools:
            if not tool.keyless:
                continue    # usage: asked with a key in test_usage_is_on_the_mcp_face_like_every_direct_tool
            args = sample_arguments(tool)
            result = await client.call_tool(tool.name, args)
            assert result.is_error is False, (tool.name, result.content)
            body = result.structured_content
            assert json.loads(result.content[0].text) == body
            assert list(body)[0] == "caveats", "caveats come first"
            path, query = tool.routes[family], {**tool.mcp_defaults(), **args}   # MCP's defaults, asked of REST
            for p in tool.params:             # path parameters travel in the path (the widget's id)
                if p.location == "path":
                    path = path.replace("{" + p.name + "}", str(query.pop(p.name)))
            rest = await coordinator.request(tool.method, prefix + path + _query(query))
            assert rest.status == 200
            # A degraded answer is computed again for the REST call (never cached): only the
            # time it was made may differ (the event brief's generatedAt, to the second).
            assert _stable(rest.json()) == _stable(body), f"{tool.name}: the MCP result is not the REST body"


def _stable(body: dict) -> dict:
    if body.get("health", {}).get("degraded"):
        return {k: v for k, v in body.items() if k != "generatedAt"}
    return body


def _query(args: dict[str, Any]) -> str:
    from urllib.parse import urlencode
    return "?" + urlencode(args) if args else ""


async def test_legacy_endpoint_describes_and_serves_extent_bboxes(coordinator):
    async with mcp.Client(coordinator.base_url + "/legacy/mcp", mode="auto") as client:
        listed = {t.name: t for t in (await client.list_tools()).tools}
        result = await client.call_tool("hazard_events", {})
    assert "extent bbox" in listed["hazard_events"].description
    events = result.structured_content["events"]
    assert {e["bboxKind"] for e in events} == {"upstream-extent", "fixed-square"}
    assert all(e["posQuality"] == "modeled-bbox" for e in events)
    async with mcp.Client(coordinator.base_url + "/mcp", mode="auto") as client:
        listed = {t.name: t for t in (await client.list_tools()).tools}
        result = await client.call_tool("hazard_events", {})
    assert "not the hazard's extent" in listed["hazard_events"].description
    assert {e["bboxKind"] for e in result.structured_content["events"]} == {"fixed-square"}


# ---- failures ----------------------------------------------------------------

async def _boom(ctx: Any, params: dict) -> Answer:
    raise RuntimeError("secret internal detail /etc/passwd")


async def _no_such_event(ctx: Any, params: dict) -> Answer:
    raise NotFound("no event with id 'EQ 1'", {"id": "EQ 1"})


async def _throttled(ctx: Any, params: dict) -> Answer:
    raise RateLimited("too many requests from this address", {"limit": 120, "window": "minute"},
                      headers={"Retry-After": "17"})


async def _echo(ctx: Any, params: dict) -> Answer:
    return Answer({"params": params})


FAILING = [
    Tool(name="boom", title="Boom", description="fails", handler=_boom, routes={"earth": "/boom"}),
    Tool(name="missing_event", title="Missing", description="not found", handler=_no_such_event,
         routes={"earth": "/missing"}),
    Tool(name="throttled", title="Throttled", description="rate limited", handler=_throttled,
         routes={"earth": "/throttled"}),
    Tool(name="echo", title="Echo", description="echo", handler=_echo, routes={"earth": "/echo"},
         params=(radius(100, 3000, 450), Param("n", INTEGER, "A count", minimum=1, maximum=5))),
]


@pytest.fixture
async def failing(sqlite_url, upstream):
    c = await start_coordinator(make_settings(sqlite_url, upstream), ToolRegistry([*all_tools(), *FAILING]))
    yield c
    await stop_coordinator(c)


@pytest.mark.parametrize("mode", MODES)
async def test_a_tool_failure_is_isError_with_a_safe_message(failing, mode):
    async with mcp.Client(failing.base_url + "/mcp", mode=mode) as client:
        result = await client.call_tool("boom", {})
        assert result.is_error is True
        text = result.content[0].text
        assert "secret" not in text and "Traceback" not in text and "RuntimeError" not in text
        err = json.loads(text)["error"]
        assert err["code"] == "internal_error" and err["details"]["requestId"]

        result = await client.call_tool("missing_event", {})
        assert result.is_error is True
        assert result.structured_content == (await failing.get("/earth/missing")).json()


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("args,query", [
    ({"radius": 5000}, "radius=5000"),
    ({"radius": "abc"}, "radius=abc"),
    ({"n": 2.5}, "n=2.5"),
    ({"colour": "red"}, "colour=red"),
])
async def test_bad_parameters_are_a_tool_error_with_the_rest_message(failing, mode, args, query):
    """Since protocol 2025-11-25 (SEP-1303) refused arguments are a tool result with isError, which
    the client hands to the model so that it can correct its call; a JSON-RPC error went to the
    application, and the model never saw why."""
    rest = (await failing.get("/earth/echo?" + query)).json()["error"]
    async with mcp.Client(failing.base_url + "/mcp", mode=mode) as client:
        result = await client.call_tool("echo", args)
    assert result.is_error is True
    err = result.structured_content["error"]
    assert err["code"] == "bad_parameter" and err["message"] == rest["message"]
    assert rest["message"] in result.content[0].text
    # The same error as REST; only the echoed raw value keeps its JSON type (5000, not "5000").
    if "value" in rest["details"]:
        assert err["details"]["value"] == args[rest["details"]["parameter"]]
        rest["details"]["value"] = err["details"]["value"]
    assert err == rest


async def test_a_client_of_an_earlier_version_is_told_of_bad_parameters_by_a_json_rpc_error(failing):
    """Before 2025-11-25 the protocol put invalid arguments among the protocol errors: a client that
    says it speaks 2025-06-18, or sends no version, gets -32602 with the REST error as its data."""
    rest = (await failing.get("/earth/echo?radius=5000")).json()["error"]
    rest["details"]["value"] = 5000                      # echoed with its JSON type
    call = {"jsonrpc": "2.0", "id": 1, "method": "tools/call", "params": {"name": "echo", "arguments": {"radius": 5000}}}
    for version in ("2025-06-18", None):
        headers = {"Content-Type": "application/json", "Accept": "application/json",
                   **({"MCP-Protocol-Version": version} if version else {})}
        r = await failing.post("/mcp", call, headers=headers)
        assert r.status == 200 and r.json()["error"]["code"] == -32602, (version, r.body)   # handshake era: 200
        assert r.json()["error"]["data"] == {**rest, "status": 400}


@pytest.mark.parametrize("mode", MODES)
async def test_valid_arguments_reach_the_tool_typed(failing, mode):
    async with mcp.Client(failing.base_url + "/mcp", mode=mode) as client:
        result = await client.call_tool("echo", {"radius": 200, "n": 3})
    assert result.structured_content["params"] == {"radius": 200.0, "n": 3}


@pytest.mark.parametrize("mode", MODES)
async def test_an_unknown_tool_is_a_json_rpc_error(coordinator, mode):
    async with mcp.Client(coordinator.base_url + "/legacy/mcp", mode=mode) as client:
        with pytest.raises(MCPError) as info:
            await client.call_tool("limits", {})    # a direct-family tool only
        assert info.value.error.code == -32602
        with pytest.raises(MCPError) as info:
            await client.call_tool("no_such_tool", {})
        assert info.value.error.code == -32602 and "no_such_tool" in info.value.error.message


@pytest.mark.parametrize("mode", MODES)
async def test_an_access_error_carries_the_rest_error_and_status(failing, mode):
    rest = await failing.get("/earth/throttled")
    assert rest.status == 429
    async with mcp.Client(failing.base_url + "/mcp", mode=mode) as client:
        with pytest.raises(MCPError) as info:
            await client.call_tool("throttled", {})
    err = info.value.error
    assert err.code == 429
    assert err.message == rest.json()["error"]["message"]
    assert err.data == {**rest.json()["error"], "status": 429}


async def test_an_access_error_answers_the_rest_status_and_headers_on_the_wire(failing):
    """At 2026-07-28 the REST status; in the handshake era HTTP 200 (the 1.x client ends its session
    on a 4xx), the Retry-After header kept in both."""
    body = {"jsonrpc": "2.0", "id": 7, "method": "tools/call", "params": {"name": "throttled", "arguments": {}}}
    r = await failing.post("/mcp", body, headers={"Accept": "application/json"})
    assert r.status == 200 and r.headers["Retry-After"] == "17"
    assert r.json()["error"]["code"] == 429 and r.json()["id"] == 7


@pytest.mark.parametrize("mode", MODES)
async def test_a_degraded_answer_is_a_successful_result_saying_degraded(coordinator, upstream, mode):
    upstream.set_json("/gdacs/events/geteventlist/EVENTS4APP", {"error": "upstream down"}, status=503)
    async with mcp.Client(coordinator.base_url + "/mcp", mode=mode) as client:
        result = await client.call_tool("hazard_events", {})
    assert result.is_error is False
    health = result.structured_content["health"]
    assert health["degraded"] is True and health["sourcesUsable"] < health["sourcesQueried"]
    assert result.structured_content["caveats"][0].startswith("Degraded")


async def test_the_api_key_reaches_the_call_path_from_header_or_query(coordinator, monkeypatch):
    import httpx2
    from mcp.client.streamable_http import streamable_http_client

    import coordinator.faces.mcp.tools as mcp_face
    seen: list[Any] = []
    real = mcp_face.call_tool

    async def spy(services, tool, family, raw, facts):
        seen.append((family, facts.api_key, facts.credential))
        return await real(services, tool, family, raw, facts)

    from coordinator.core.access.credentials import create_key
    k_query, _ = await create_key(coordinator.services.db, "mcp query")     # unknown keys are refused (401)
    k_header, _ = await create_key(coordinator.services.db, "mcp header")
    monkeypatch.setattr(mcp_face, "call_tool", spy)
    async with mcp.Client(coordinator.base_url + f"/mcp?key={k_query}", mode="auto") as client:
        await client.call_tool("limits", {})
    async with httpx2.AsyncClient(headers={"X-Api-Key": k_header}) as http:
        async with mcp.Client(streamable_http_client(coordinator.base_url + "/legacy/mcp", http_client=http),
                              mode="legacy") as client:
            await client.call_tool("event_changes", {})
    assert seen == [("earth", k_query, None), ("legacy", k_header, None)]


async def test_default_registry_has_tools_on_both_endpoints():
    reg = default_registry()
    assert mcp_tools(reg, "earth") and mcp_tools(reg, "legacy")


async def test_usage_is_on_the_mcp_face_like_every_direct_tool(coordinator):
    """The contract says POST /mcp has the same tools: usage answers a keyed MCP client with
    the key's usage, and refuses a keyless one (401) as its REST route does."""
    import httpx2
    from mcp.client.streamable_http import streamable_http_client

    from coordinator.core.access.credentials import create_key
    secret, rec = await create_key(coordinator.services.db, "mcp usage")
    async with httpx2.AsyncClient(headers={"X-Api-Key": secret}) as http:
        async with mcp.Client(streamable_http_client(coordinator.base_url + "/mcp", http_client=http),
                              mode="auto") as client:
            assert "usage" in {t.name for t in (await client.list_tools()).tools}
            result = await client.call_tool("usage", {})
    assert result.is_error is False and result.structured_content["key"]["id"] == rec.id
    async with mcp.Client(coordinator.base_url + "/mcp", mode="auto") as client:
        with pytest.raises(MCPError) as err:
            await client.call_tool("usage", {})
    assert err.value.error.code == 401
