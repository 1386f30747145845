"""HTTP statuses of JSON-RPC errors by protocol era.

In the handshake era (no MCP-Protocol-Version header, or 2025-11-25 and earlier)
a JSON-RPC error answering a request whose id was read is HTTP 200, as the SDK's
handshake server sends it: the ``mcp`` 1.x client calls ``raise_for_status()``
and ends its whole session on a 4xx, so one unknown tool ended every later call.
Transport refusals (no id read: not JSON, not one request, 406, 415, 413) keep
their 4xx (413: tests/test_mcp_transport_wire.py). At 2026-07-28 errors keep the SDK modern entry's table statuses."""
from __future__ import annotations

from typing import Any

import mcp
import pytest
from mcp.shared.exceptions import MCPError

from coordinator.catalogue import all_tools
from coordinator.core.errors import RateLimited
from coordinator.core.honesty import Answer
from coordinator.core.registry import Tool, ToolRegistry
from tests.support import make_settings, start_coordinator, stop_coordinator

MODERN = "2026-07-28"
CAPS = {"io.modelcontextprotocol/protocolVersion": MODERN, "io.modelcontextprotocol/clientCapabilities": {}}
JSON = {"Accept": "application/json, text/event-stream", "Content-Type": "application/json"}
HANDSHAKE_HEADERS = [None, "2024-11-05", "2025-03-26", "2025-06-18", "2025-11-25"]


def handshake(version: str | None) -> dict[str, str]:
    return {**JSON, **({"MCP-Protocol-Version": version} if version else {})}


def modern(method: str, name: str | None = None) -> dict[str, str]:
    return {**JSON, "MCP-Protocol-Version": MODERN, "Mcp-Method": method, **({"Mcp-Name": name} if name else {})}


def rpc(method: str, params: Any = None, rid: int | str = 1, meta: dict | None = None) -> dict:
    p = params if params is not None else {}
    if meta is not None:
        p = {**p, "_meta": meta}
    return {"jsonrpc": "2.0", "id": rid, "method": method, "params": p}


async def _throttled(ctx: Any, params: dict) -> Answer:
    raise RateLimited("too many requests from this address", {"limit": 120, "window": "minute"},
                      headers={"Retry-After": "17"})


THROTTLED = Tool(name="throttled", title="Throttled", description="rate limited", handler=_throttled,
                 routes={"earth": "/throttled"})


@pytest.fixture
async def throttling(sqlite_url, upstream):
    c = await start_coordinator(make_settings(sqlite_url, upstream), ToolRegistry([*all_tools(), THROTTLED]))
    yield c
    await stop_coordinator(c)


# Requests whose id is read and which the handshake era refuses with a JSON-RPC error.
REFUSED = [
    ("unknown tool", rpc("tools/call", {"name": "no_such_tool", "arguments": {}}), -32602),
    ("usage without a key", rpc("tools/call", {"name": "usage", "arguments": {}}), 401),
    ("method not served", rpc("resources/list"), -32601),
    ("discover without a modern header", rpc("server/discover"), -32601),
    ("a cursor", rpc("tools/list", {"cursor": "x"}), -32602),
    ("no tool name", rpc("tools/call", {"arguments": {}}), -32602),
    ("arguments not an object", rpc("tools/call", {"name": "limits", "arguments": [1]}), -32602),
    ("params not an object", rpc("tools/list", [1], rid=42), -32602),
    ("method not a string", {"jsonrpc": "2.0", "id": 43, "method": 7}, -32600),
    ("initialize without a version", rpc("initialize", {}), -32602),
]


@pytest.mark.parametrize("path", ["/mcp", "/legacy/mcp"])
@pytest.mark.parametrize("version", HANDSHAKE_HEADERS)
async def test_a_handshake_era_json_rpc_error_to_a_read_request_is_http_200(coordinator, path, version):
    for case, body, code in REFUSED:
        if path == "/legacy/mcp" and body.get("params", {}) == {"name": "usage", "arguments": {}}:
            code = -32602        # usage is a direct-family tool: unknown on the legacy endpoint
        r = await coordinator.post(path, body, headers=handshake(version))
        assert r.status == 200, (case, version, r.status, r.body)
        assert r.headers["Content-Type"] == "application/json"
        answer = r.json()
        assert answer["id"] == body["id"] and answer["error"]["code"] == code, (case, answer)


@pytest.mark.parametrize("version", ["2025-06-18", None])
async def test_refused_arguments_of_an_early_client_are_http_200_with_the_rest_error(coordinator, version):
    body = rpc("tools/call", {"name": "site_intel", "arguments": {"lat": "north"}})
    r = await coordinator.post("/mcp", body, headers=handshake(version))
    assert r.status == 200
    err = r.json()["error"]
    assert err["code"] == -32602 and err["data"]["code"] == "bad_parameter" and err["data"]["status"] == 400


async def test_a_handshake_era_rate_limit_is_http_200_and_keeps_retry_after(throttling):
    for version in (None, "2025-11-25"):
        r = await throttling.post("/mcp", rpc("tools/call", {"name": "throttled", "arguments": {}}, rid=7),
                                  headers=handshake(version))
        assert r.status == 200 and r.headers["Retry-After"] == "17", version
        assert r.json()["id"] == 7 and r.json()["error"]["code"] == 429
        assert r.json()["error"]["data"]["status"] == 429


async def test_the_modern_era_keeps_the_sdk_table_statuses(coordinator, throttling):
    cases = [
        (rpc("tools/call", {"name": "no_such_tool"}, meta=CAPS), modern("tools/call", "no_such_tool"), 400, -32602),
        (rpc("resources/list", meta=CAPS), modern("resources/list"), 404, -32601),
        (rpc("tools/call", {"name": "usage"}, meta=CAPS), modern("tools/call", "usage"), 401, 401),
        (rpc("tools/list", meta=None), modern("tools/list"), 400, -32602),
        (rpc("tools/list", meta=CAPS), modern("tools/call"), 400, -32020),
    ]
    for body, headers, status, code in cases:
        r = await coordinator.post("/mcp", body, headers=headers)
        assert r.status == status and r.json()["error"]["code"] == code, (body, r.body)
    r = await throttling.post("/mcp", rpc("tools/call", {"name": "throttled"}, meta=CAPS),
                              headers=modern("tools/call", "throttled"))
    assert r.status == 429 and r.headers["Retry-After"] == "17" and r.json()["error"]["code"] == 429


@pytest.mark.parametrize("version", [None, "2025-11-25"])
async def test_transport_refusals_keep_their_4xx_in_the_handshake_era(coordinator, version):
    cases = [
        (b'{"jsonrpc": "2.0", "id": 1, "method": ', handshake(version), 400, -32700),
        ([rpc("ping")], handshake(version), 400, -32600),
        ({"jsonrpc": "1.0", "id": 1, "method": "ping"}, handshake(version), 400, -32600),
        ({"jsonrpc": "2.0", "id": None, "method": "ping"}, handshake(version), 400, -32600),
        (rpc("ping"), {**handshake(version), "Accept": "text/html"}, 406, -32600),
        (rpc("ping"), {**handshake(version), "Content-Type": "text/plain"}, 415, -32600),
    ]
    for body, headers, status, code in cases:
        r = await coordinator.post("/mcp", body, headers=headers)
        assert r.status == status, (body if not isinstance(body, dict) else body.get("method"), r.status, r.body[:200])
        assert r.json()["id"] is None and r.json()["error"]["code"] == code


async def test_the_installed_sdk_client_sees_http_200_for_every_error_and_keeps_its_session(coordinator):
    """The installed (2.x) SDK client at the handshake: every answer it reads is 200 or 202, and after
    an unknown tool, a method not served and a keyless usage call the same session still serves."""
    import httpx2
    from mcp.client.streamable_http import streamable_http_client

    statuses: list[int] = []

    async def record(response: Any) -> None:
        statuses.append(response.status_code)

    async with httpx2.AsyncClient(event_hooks={"response": [record]}) as http:
        async with mcp.Client(streamable_http_client(coordinator.base_url + "/mcp", http_client=http),
                              mode="legacy") as client:
            assert client.protocol_version == "2025-11-25"
            with pytest.raises(MCPError) as info:
                await client.call_tool("no_such_tool", {})
            assert info.value.error.code == -32602
            with pytest.raises(MCPError) as info:
                await client.call_tool("usage", {})
            assert info.value.error.code == 401
            with pytest.raises(MCPError) as info:
                await client.list_resources()
            assert info.value.error.code == -32601
            result = await client.call_tool("limits", {})
            assert result.is_error is False
    assert statuses and set(statuses) <= {200, 202}, statuses
