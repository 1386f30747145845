"""The MCP endpoint on the wire: era routing by MCP-Protocol-Version, the
2026-07-28 envelope ladder, JSON-RPC errors and their HTTP statuses, and the
-32022 fallback the SDK's auto mode takes. The SDK client never sends most of
these requests, so they are written by hand here; the constants the server
spells itself are pinned to the SDK's."""
from __future__ import annotations

from typing import Any

import mcp
import mcp_types
import pytest
from mcp.shared import inbound
from mcp_types import version as sdk_version

from coordinator.faces.mcp import protocol
from coordinator.faces.http import MAX_JSON_BODY

MODERN = "2026-07-28"
CAPS = {"io.modelcontextprotocol/protocolVersion": MODERN, "io.modelcontextprotocol/clientCapabilities": {}}
JSON = {"Accept": "application/json, text/event-stream", "Content-Type": "application/json"}


def modern_headers(method: str, name: str | None = None, version: str = MODERN) -> dict[str, str]:
    h = {**JSON, "MCP-Protocol-Version": version, "Mcp-Method": method}
    if name is not None:
        h["Mcp-Name"] = name
    return h


def rpc(method: str, params: dict[str, Any] | None = None, rid: int | str = 1, meta: dict | None = CAPS) -> dict:
    p = dict(params or {})
    if meta is not None:
        p["_meta"] = meta
    return {"jsonrpc": "2.0", "id": rid, "method": method, "params": p}


def test_wire_constants_are_the_sdks():
    assert protocol.HANDSHAKE_VERSIONS == sdk_version.HANDSHAKE_PROTOCOL_VERSIONS
    assert protocol.MODERN_VERSIONS == sdk_version.MODERN_PROTOCOL_VERSIONS
    assert protocol.LATEST_HANDSHAKE == sdk_version.LATEST_HANDSHAKE_VERSION
    assert protocol.PROTOCOL_VERSION_META == mcp_types.PROTOCOL_VERSION_META_KEY
    assert protocol.CLIENT_CAPABILITIES_META == mcp_types.CLIENT_CAPABILITIES_META_KEY
    assert protocol.CLIENT_INFO_META == mcp_types.CLIENT_INFO_META_KEY
    assert protocol.SERVER_INFO_META == mcp_types.SERVER_INFO_META_KEY
    assert protocol.HEADER_MISMATCH == mcp_types.HEADER_MISMATCH
    assert protocol.UNSUPPORTED_PROTOCOL_VERSION == mcp_types.UNSUPPORTED_PROTOCOL_VERSION
    assert protocol.INVALID_PARAMS == mcp_types.INVALID_PARAMS
    assert protocol.METHOD_NOT_FOUND == mcp_types.METHOD_NOT_FOUND
    assert dict(protocol.HTTP_STATUS_BY_RPC_CODE) == dict(inbound.ERROR_CODE_HTTP_STATUS)
    assert dict(protocol.NAME_BEARING_METHODS) == dict(inbound.NAME_BEARING_METHODS)
    assert [h.lower() for h in protocol.ROUTING_HEADERS] == [
        inbound.MCP_PROTOCOL_VERSION_HEADER, inbound.MCP_METHOD_HEADER, inbound.MCP_NAME_HEADER]
    for value in ("plain", "naïve – ünïcode", " edge "):
        assert protocol.decode_header_value(inbound.encode_header_value(value)) == value


@pytest.mark.parametrize("path", ["/mcp", "/legacy/mcp"])
@pytest.mark.parametrize("method", ["GET", "DELETE", "PUT"])
async def test_only_post_is_served(coordinator, path, method):
    r = await coordinator.request(method, path, headers={"Accept": "text/event-stream"})
    assert r.status == 405 and r.headers["Allow"] == "POST"
    assert r.json()["error"]["code"] == "method_not_allowed"


@pytest.mark.parametrize("version", [None, "2025-11-25", MODERN])
async def test_malformed_json_is_a_parse_error_400(coordinator, version):
    headers = dict(JSON, **({"MCP-Protocol-Version": version} if version else {}))
    r = await coordinator.post("/mcp", b'{"jsonrpc": "2.0", "id": 1, "method": ', headers=headers)
    assert r.status == 400
    assert r.json() == {"jsonrpc": "2.0", "id": None,
                        "error": {"code": -32700, "message": "Parse error: the body is not valid JSON"}}


async def test_an_oversized_body_is_413_invalid_request(coordinator):
    big = rpc("tools/call", {"name": "limits", "arguments": {"pad": "x" * MAX_JSON_BODY}}, meta=None)
    r = await coordinator.post("/legacy/mcp", big, headers=JSON)
    assert r.status == 413
    assert r.json()["error"]["code"] == -32600 and r.json()["error"]["data"] == {"maxBytes": MAX_JSON_BODY}


async def test_a_batch_or_a_non_request_is_an_invalid_request_400(coordinator):
    for body in ([rpc("ping", meta=None)], {"id": 1, "method": "ping"}, {"jsonrpc": "2.0", "id": True, "method": "x"}):
        r = await coordinator.post("/mcp", body, headers=JSON)
        assert r.status == 400 and r.json()["error"]["code"] == -32600, body


async def test_media_types_are_checked(coordinator):
    r = await coordinator.post("/mcp", rpc("ping", meta=None), headers={"Accept": "text/html",
                                                                        "Content-Type": "application/json"})
    assert r.status == 406
    r = await coordinator.post("/mcp", rpc("ping", meta=None), headers={"Accept": "*/*",
                                                                        "Content-Type": "text/plain"})
    assert r.status == 415


# ---- the handshake era ---------------------------------------------------------

async def test_initialize_negotiates_a_handshake_version_and_issues_no_session(coordinator):
    for requested, agreed in (("2025-06-18", "2025-06-18"), ("2099-01-01", "2025-11-25")):
        body = rpc("initialize", {"protocolVersion": requested, "capabilities": {},
                                  "clientInfo": {"name": "t", "version": "0"}}, meta=None)
        r = await coordinator.post("/legacy/mcp", body, headers=JSON)
        assert r.status == 200 and "Mcp-Session-Id" not in r.headers
        result = r.json()["result"]
        assert result["protocolVersion"] == agreed
        assert result["capabilities"] == {"tools": {"listChanged": False}}
        assert result["serverInfo"]["name"] == "spatial-intelligence-service"
        assert "resultType" not in result


async def test_notifications_are_accepted_with_202_and_no_body(coordinator):
    note = {"jsonrpc": "2.0", "method": "notifications/initialized"}
    r = await coordinator.post("/mcp", note, headers=dict(JSON, **{"MCP-Protocol-Version": "2025-11-25"}))
    assert r.status == 202 and r.body == b""
    r = await coordinator.post("/mcp", {"jsonrpc": "2.0", "method": "notifications/cancelled",
                                        "params": {"requestId": 3}}, headers=modern_headers("notifications/cancelled"))
    assert r.status == 202 and r.body == b""


async def test_ping_and_list_are_served_without_a_handshake(coordinator):
    """Stateless: every POST stands alone, so a handshake-era client that skips
    initialize (or reaches another process) is still served."""
    r = await coordinator.post("/mcp", rpc("ping", meta=None, rid="a"), headers=JSON)
    assert r.json() == {"jsonrpc": "2.0", "id": "a", "result": {}}
    r = await coordinator.post("/mcp", rpc("tools/list", meta=None), headers=JSON)
    result = r.json()["result"]
    assert [t["name"] for t in result["tools"]] == [t.name for t in coordinator.services.registry
                                                    if t.mcp and "earth" in t.routes]
    assert "ttlMs" not in result and "resultType" not in result


async def test_a_discover_without_a_version_header_is_a_handshake_era_unknown_method(coordinator):
    r = await coordinator.post("/mcp", rpc("server/discover"), headers=JSON)
    assert r.status == 200 and r.json()["error"]["code"] == -32601    # handshake era: JSON-RPC errors are 200


# ---- the 2026-07-28 era ------------------------------------------------------------

async def test_discover_answers_versions_capabilities_and_cache_hints(coordinator):
    r = await coordinator.post("/mcp", rpc("server/discover"), headers=modern_headers("server/discover"))
    assert r.status == 200 and "Mcp-Session-Id" not in r.headers
    result = r.json()["result"]
    assert result["supportedVersions"] == [MODERN]
    assert result["capabilities"] == {"tools": {"listChanged": False}}
    assert result["resultType"] == "complete" and result["cacheScope"] == "public" and result["ttlMs"] > 0
    assert result["_meta"]["io.modelcontextprotocol/serverInfo"]["name"] == "spatial-intelligence-service"
    mcp_types.methods.validate_server_result("server/discover", MODERN, result)


async def test_modern_list_and_call_results_carry_result_type_and_validate_against_the_sdk(coordinator):
    r = await coordinator.post("/mcp", rpc("tools/list"), headers=modern_headers("tools/list"))
    listing = r.json()["result"]
    assert listing["resultType"] == "complete" and listing["cacheScope"] == "public" and listing["ttlMs"] > 0
    mcp_types.methods.validate_server_result("tools/list", MODERN, listing)
    r = await coordinator.post("/mcp", rpc("tools/call", {"name": "limits", "arguments": {}}),
                               headers=modern_headers("tools/call", "limits"))
    result = r.json()["result"]
    assert result["resultType"] == "complete" and result["isError"] is False
    mcp_types.methods.validate_server_result("tools/call", MODERN, result)


@pytest.mark.parametrize("case,headers,body,code", [
    ("no _meta", modern_headers("tools/list"), rpc("tools/list", meta=None), -32602),
    ("no capabilities", modern_headers("tools/list"),
     rpc("tools/list", meta={"io.modelcontextprotocol/protocolVersion": MODERN}), -32602),
    ("method header differs", modern_headers("tools/call", "limits"), rpc("tools/list"), -32020),
    ("name header differs", modern_headers("tools/call", "hazard_events"),
     rpc("tools/call", {"name": "limits"}), -32020),
    ("name header missing", modern_headers("tools/call"), rpc("tools/call", {"name": "limits"}), -32020),
    ("version header differs from _meta", modern_headers("tools/list", version="2026-12-01"),
     rpc("tools/list"), -32020),
])
async def test_the_envelope_ladder_rejects_with_400(coordinator, case, headers, body, code):
    r = await coordinator.post("/mcp", body, headers=headers)
    assert r.status == 400, case
    assert r.json()["error"]["code"] == code, case
    assert r.json()["id"] == body["id"]


async def test_a_base64_wrapped_name_header_matches(coordinator):
    headers = modern_headers("tools/call", inbound.encode_header_value(" limits"))
    r = await coordinator.post("/mcp", rpc("tools/call", {"name": " limits"}), headers=headers)
    assert r.status == 400 and r.json()["error"]["code"] == -32602   # got past the header rung: no such tool


async def test_a_routing_header_given_twice_is_refused(coordinator):
    from tornado.httputil import HTTPHeaders
    h = HTTPHeaders(modern_headers("tools/list"))
    h.add("Mcp-Method", "tools/list")
    r = await coordinator.post("/mcp", rpc("tools/list"), headers=h)
    assert r.status == 400 and r.json()["error"]["code"] == -32020


async def test_an_unknown_modern_version_is_32022_naming_every_served_version(coordinator):
    meta = {**CAPS, "io.modelcontextprotocol/protocolVersion": "2099-01-01"}
    r = await coordinator.post("/mcp", rpc("server/discover", meta=meta),
                               headers=modern_headers("server/discover", version="2099-01-01"))
    assert r.status == 400
    err = r.json()["error"]
    assert err["code"] == -32022
    assert err["data"] == {"supported": [MODERN, *protocol.HANDSHAKE_VERSIONS], "requested": "2099-01-01"}
    mcp_types.UnsupportedProtocolVersionErrorData.model_validate(err["data"])


@pytest.mark.parametrize("method", ["ping", "initialize", "prompts/list", "resources/list"])
async def test_methods_not_served_at_2026_are_method_not_found_404(coordinator, method):
    r = await coordinator.post("/mcp", rpc(method), headers=modern_headers(method))
    assert r.status == 404 and r.json()["error"]["code"] == -32601


async def test_the_sdk_falls_back_to_initialize_when_the_modern_version_is_not_served(coordinator, monkeypatch):
    """The SDK's auto mode probes server/discover; a -32022 answer that lists the handshake
    versions sends it to the initialize handshake. Narrowing the served modern versions to
    none shows the endpoint gives that answer and then serves the fallback."""
    monkeypatch.setattr(protocol, "MODERN_VERSIONS", ())
    async with mcp.Client(coordinator.base_url + "/mcp", mode="auto") as client:
        assert client.protocol_version == "2025-11-25"
        result = await client.call_tool("limits", {})
        assert result.is_error is False


async def test_every_served_method_answers_and_is_documented(coordinator):
    from pathlib import Path

    from coordinator.faces.mcp.endpoint import HANDSHAKE_METHODS, MODERN_METHODS
    from coordinator.core.registry import LEGACY_ABSENT_TOOLS, LEGACY_PATHS
    params = {"tools/call": {"name": "limits"}, "initialize": {"protocolVersion": "2025-11-25"}}
    for method in MODERN_METHODS:
        r = await coordinator.post("/mcp", rpc(method, params.get(method)),
                                   headers=modern_headers(method, params.get(method, {}).get("name")))
        assert r.status == 200 and "result" in r.json(), method
    for method in HANDSHAKE_METHODS:
        r = await coordinator.post("/mcp", rpc(method, params.get(method), meta=None), headers=JSON)
        assert r.status == 200 and "result" in r.json(), method
    doc = (Path(__file__).parent.parent / "docs" / "mcp.md").read_text()
    for name in (*MODERN_METHODS, *HANDSHAKE_METHODS, *LEGACY_ABSENT_TOOLS, "/mcp", "/legacy/mcp",
                 "/earth/tools.json", "/legacy/tools.json", *("/legacy" + p for p in LEGACY_PATHS)):
        assert f"`{name}`" in doc, f"docs/mcp.md does not mention {name}"


async def test_a_call_without_a_tool_name_is_invalid_params(coordinator):
    r = await coordinator.post("/mcp", rpc("tools/call", {"arguments": {}}, meta=None), headers=JSON)
    assert r.status == 200 and r.json()["error"]["code"] == -32602 and "params.name" in r.json()["error"]["message"]
    r = await coordinator.post("/mcp", rpc("tools/call", {"name": "limits", "arguments": [1]}, meta=None),
                               headers=JSON)
    assert r.status == 200 and r.json()["error"]["message"] == "arguments must be an object"


async def test_a_request_refused_after_its_id_was_read_is_answered_with_that_id(coordinator):
    r = await coordinator.post("/mcp", {"jsonrpc": "2.0", "id": 42, "method": "tools/list", "params": [1]},
                               headers=JSON)
    assert r.status == 200 and r.json()["id"] == 42 and r.json()["error"]["code"] == -32602
    r = await coordinator.post("/mcp", {"jsonrpc": "2.0", "id": 43, "method": 7}, headers=JSON)
    assert r.status == 200 and r.json()["id"] == 43 and r.json()["error"]["code"] == -32600


async def test_a_bbox_is_text_as_its_schema_says_and_the_schema_takes_what_the_server_reads(coordinator):
    import re

    from coordinator.core.registry import BBOX_PATTERN
    for bbox in ([106.8, -6.21, 106.81, -6.2], {"106.8": 1, "-6.21": 2, "106.81": 3, "-6.2": 4}):
        r = await coordinator.post("/mcp", rpc("tools/call", {"name": "places_bbox", "arguments": {"bbox": bbox}},
                                               meta=None), headers=JSON)
        assert r.status == 200 and r.json()["error"]["code"] == -32602, bbox
    for text in ("106.8, -6.21, 106.81, -6.2", "1.068e2,-6.21,106.81,-6.2", "+106.8,-6.21,106.81,-6.2"):
        assert re.search(BBOX_PATTERN, text)
        r = await coordinator.post("/mcp", rpc("tools/call", {"name": "places_bbox", "arguments": {"bbox": text}},
                                               meta=None), headers=JSON)
        assert r.status == 200 and "result" in r.json(), text
    assert not re.search(BBOX_PATTERN, "1,2,3") and not re.search(BBOX_PATTERN, "１,2,3,4")


async def test_openapi_lists_the_statuses_the_endpoint_answers(coordinator):
    doc = (await coordinator.get("/openapi.json")).json()
    for path in ("/mcp", "/legacy/mcp"):
        assert {"200", "202", "400", "401", "403", "404", "405", "406", "415", "429"} <= \
            set(doc["paths"][path]["post"]["responses"]), path
