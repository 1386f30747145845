"""Smaller wire facts of POST /mcp: batches, an unsupported MCP-Protocol-Version
header, a body over the limit, and the 202 of a notification."""
from __future__ import annotations

import json
from pathlib import Path

import mcp_types
import pytest

from coordinator.faces.http import MAX_JSON_BODY
from coordinator.faces.mcp import protocol

JSON = {"Accept": "application/json, text/event-stream", "Content-Type": "application/json"}
MODERN = "2026-07-28"
SUPPORTED = [MODERN, *protocol.HANDSHAKE_VERSIONS]
DOC = Path(__file__).parent.parent / "docs" / "mcp.md"


def rpc(method: str, params: dict | None = None, rid: int = 1) -> dict:
    return {"jsonrpc": "2.0", "id": rid, "method": method, "params": params or {}}


# ---- batches ---------------------------------------------------------------------

@pytest.mark.parametrize("version", [None, "2025-03-26", "2025-11-25", MODERN])
async def test_a_batch_is_refused_saying_batches_are_not_served(coordinator, version):
    headers = {**JSON, **({"MCP-Protocol-Version": version} if version else {})}
    for batch in ([rpc("ping"), rpc("tools/list", rid=2)], []):
        r = await coordinator.post("/mcp", batch, headers=headers)
        assert r.status == 400 and r.json()["id"] is None
        err = r.json()["error"]
        assert err["code"] == -32600 and "batches are not served" in err["message"], (version, err)


def test_the_docs_date_the_removal_of_batches_and_state_the_2025_03_26_deviation():
    doc = DOC.read_text()
    assert "2025-11-25 removed them" not in doc
    assert "2025-06-18" in doc and "2025-03-26" in doc and "batch" in doc.lower()
    i = doc.lower().index("batch")
    assert "2025-06-18" in doc[i - 400:i + 800] and "2025-03-26" in doc[i - 400:i + 800]


# ---- an unsupported MCP-Protocol-Version header -------------------------------------

@pytest.mark.parametrize("value", ["banana", "2024-10-07", "2099-01-01", "2026-12-01"])
@pytest.mark.parametrize("method", ["tools/list", "tools/call", "initialize", "ping"])
async def test_an_unsupported_version_header_is_told_so_with_the_versions_served(coordinator, value, method):
    headers = {**JSON, "MCP-Protocol-Version": value}
    params = {"name": "limits"} if method == "tools/call" else {}
    r = await coordinator.post("/mcp", rpc(method, params), headers=headers)
    assert r.status == 400, (value, method, r.body)
    err = r.json()["error"]
    assert r.json()["id"] == 1
    assert err["code"] == -32022 and err["message"] == "Unsupported protocol version"
    assert err["data"] == {"supported": SUPPORTED, "requested": value}
    mcp_types.UnsupportedProtocolVersionErrorData.model_validate(err["data"])


async def test_a_modern_request_missing_its_envelope_is_still_told_of_the_envelope(coordinator):
    headers = {**JSON, "MCP-Protocol-Version": MODERN, "Mcp-Method": "tools/list"}
    r = await coordinator.post("/mcp", rpc("tools/list"), headers=headers)
    assert r.status == 400 and r.json()["error"]["code"] == -32602
    assert "_meta" in r.json()["error"]["message"]


# ---- a body over the limit ---------------------------------------------------------------

@pytest.mark.parametrize("version", [None, "2025-11-25", MODERN])
@pytest.mark.parametrize("path", ["/mcp", "/legacy/mcp"])
async def test_a_body_over_the_limit_is_413_invalid_request_with_the_limit(coordinator, version, path):
    """413, as the SDK's server answers a body over its limit (RequestBodyLimitMiddleware); the JSON
    in it may be valid, so it is no parse error: -32600 with the limit in data."""
    headers = {**JSON, **({"MCP-Protocol-Version": version} if version else {})}
    big = rpc("tools/call", {"name": "limits", "arguments": {"pad": "x" * MAX_JSON_BODY}})
    r = await coordinator.post(path, big, headers=headers)
    assert r.status == 413
    assert r.json()["id"] is None
    err = r.json()["error"]
    assert err["code"] == -32600 and err["data"] == {"maxBytes": MAX_JSON_BODY}
    assert str(MAX_JSON_BODY) in err["message"]


async def test_a_chunked_body_over_the_limit_is_413_too(coordinator):
    """A body sent without a Content-Length is read up to the limit and refused at its end."""
    from tornado.httpclient import AsyncHTTPClient, HTTPRequest
    payload = ("{" + '"pad": "' + "x" * (MAX_JSON_BODY + 10) + '"}').encode()

    async def producer(write):
        for i in range(0, len(payload), 8192):
            await write(payload[i:i + 8192])

    req = HTTPRequest(coordinator.base_url + "/mcp", method="POST", headers=JSON, body_producer=producer)
    resp = await AsyncHTTPClient().fetch(req, raise_error=False)
    assert resp.code == 413
    err = json.loads(resp.body)["error"]
    assert err["code"] == -32600 and err["data"] == {"maxBytes": MAX_JSON_BODY}


# ---- 202 -------------------------------------------------------------------------------

@pytest.mark.parametrize("version", [None, "2025-11-25", MODERN])
async def test_a_notification_is_202_with_no_body_and_no_content_type(coordinator, version):
    headers = {**JSON, **({"MCP-Protocol-Version": version} if version else {})}
    messages = [{"jsonrpc": "2.0", "method": "notifications/initialized"}]
    if version != MODERN:
        messages.append({"jsonrpc": "2.0", "id": 5, "result": {}})    # a posted response, acknowledged
    for message in messages:
        r = await coordinator.post("/mcp", message, headers=headers)
        assert r.status == 202 and r.body == b""
        assert "Content-Type" not in r.headers, (version, message, r.headers.get("Content-Type"))
