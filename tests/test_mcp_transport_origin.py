"""The Origin header of POST /mcp and /legacy/mcp (Streamable HTTP, Security Warning: servers
MUST validate it and answer 403 when it is present and invalid).

A browser sends Origin on every cross-origin POST, and a "simple" one (no
Content-Type, or a form's) needs no preflight, so before this check a foreign
page could make a visitor's browser call sweep_request. A request without
Origin (every client but a browser) is served as before, a missing
Content-Type read as JSON as docs/mcp.md says."""
from __future__ import annotations

import asyncio
import json
from typing import Any

import pytest

from tests.support import make_settings, start_coordinator, stop_coordinator

JSON = {"Accept": "application/json", "Content-Type": "application/json"}
SWEEP = {"jsonrpc": "2.0", "id": 1, "method": "tools/call",
         "params": {"name": "sweep_request", "arguments": {"lat": -6.2, "lon": 106.8}}}
PING = {"jsonrpc": "2.0", "id": 1, "method": "ping"}


@pytest.fixture
def calls(monkeypatch) -> list[str]:
    """The tools that reached the one call path."""
    import coordinator.faces.mcp.tools as mcp_face
    seen: list[str] = []
    real = mcp_face.call_tool

    async def spy(services, tool, family, raw, facts):
        seen.append(tool.name)
        return await real(services, tool, family, raw, facts)

    monkeypatch.setattr(mcp_face, "call_tool", spy)
    return seen


async def raw_post(base_url: str, path: str, head: dict[str, str], body: bytes) -> tuple[int, dict[str, str], bytes]:
    """One POST written by hand: no header is added (the test client adds a Content-Type)."""
    host, port = base_url.split("//")[1].split(":")
    reader, writer = await asyncio.open_connection(host, int(port))
    lines = [f"POST {path} HTTP/1.1", *(f"{k}: {v}" for k, v in head.items()), f"Content-Length: {len(body)}",
             "Connection: close", "", ""]
    writer.write("\r\n".join(lines).encode() + body)
    await writer.drain()
    resp = await reader.read()
    writer.close()
    top, _, payload = resp.partition(b"\r\n\r\n")
    status_line, *header_lines = top.decode("latin-1").split("\r\n")
    headers = {k.strip().lower(): v.strip() for k, _, v in (h.partition(":") for h in header_lines)}
    return int(status_line.split()[1]), headers, payload


@pytest.mark.parametrize("path", ["/mcp", "/legacy/mcp"])
@pytest.mark.parametrize("origin", ["https://evil.example", "null", "http://127.0.0.1.evil.example", "file://",
                                    "garbage"])
async def test_a_foreign_origin_is_refused_403_before_any_tool_runs(coordinator, calls, path, origin):
    r = await coordinator.post(path, SWEEP, headers={**JSON, "Origin": origin})
    assert r.status == 403, (origin, r.body)
    answer = r.json()
    assert answer["id"] is None and answer["error"]["code"] == -32600
    assert answer["error"]["data"] == {"origin": origin}
    assert "SIS_MCP_ALLOWED_ORIGINS" in answer["error"]["message"]
    assert calls == []


async def test_the_cross_site_simple_post_of_the_audit_is_refused(coordinator, calls):
    """A foreign page's fetch of a Blob body sends Origin and no Content-Type, with no preflight."""
    status, _headers, payload = await raw_post(coordinator.base_url, "/mcp",
                                               {"Host": "x", "Origin": "https://evil.example"},
                                               json.dumps(SWEEP).encode())
    assert status == 403 and json.loads(payload)["error"]["code"] == -32600
    assert calls == []


async def test_a_request_without_origin_is_served_a_missing_content_type_read_as_json(coordinator, calls):
    status, headers, payload = await raw_post(coordinator.base_url, "/mcp", {"Host": "x"}, json.dumps(SWEEP).encode())
    assert status == 200 and headers["content-type"] == "application/json"
    assert json.loads(payload)["result"]["isError"] is False
    assert calls == ["sweep_request"]


async def test_the_services_own_origin_is_served_over_either_scheme(coordinator):
    host = coordinator.base_url.split("//")[1]
    for origin in (f"http://{host}", f"https://{host}", f"HTTP://{host.upper()}"):
        r = await coordinator.post("/mcp", PING, headers={**JSON, "Origin": origin})
        assert r.status == 200 and r.json()["result"] == {}, origin
    # The default port of the scheme may be left out on either side.
    for origin, given_host in (("https://mcp.example", "mcp.example:443"), ("http://mcp.example:80", "mcp.example")):
        r = await coordinator.post("/mcp", PING, headers={**JSON, "Origin": origin, "Host": given_host})
        assert r.status == 200, (origin, given_host)
    # Another port of the same host is another origin.
    r = await coordinator.post("/mcp", PING, headers={**JSON, "Origin": "http://127.0.0.1:1", "Host": "127.0.0.1:2"})
    assert r.status == 403


async def test_two_origin_headers_are_refused(coordinator):
    from tornado.httputil import HTTPHeaders
    host = coordinator.base_url.split("//")[1]
    h = HTTPHeaders(JSON)
    h.add("Origin", f"http://{host}")
    h.add("Origin", "https://evil.example")
    r = await coordinator.post("/mcp", PING, headers=h)
    assert r.status == 403


@pytest.fixture
async def allowing(sqlite_url, upstream) -> Any:
    c = await start_coordinator(make_settings(sqlite_url, upstream,
                                              mcp_allowed_origins=" https://app.example , http://localhost:6274",
                                              public_base_url="https://sis.example/"))
    yield c
    await stop_coordinator(c)


async def test_the_operator_allows_origins_and_the_public_base_url_is_the_services_own(allowing):
    for origin in ("https://app.example", "https://APP.example:443", "http://localhost:6274", "https://sis.example"):
        r = await allowing.post("/legacy/mcp", PING, headers={**JSON, "Origin": origin})
        assert r.status == 200, origin
    for origin in ("http://app.example", "https://app.example:8443", "http://localhost:6275", "https://evil.example"):
        r = await allowing.post("/legacy/mcp", PING, headers={**JSON, "Origin": origin})
        assert r.status == 403, origin


async def test_the_setting_is_documented_in_the_mcp_page():
    from pathlib import Path
    doc = (Path(__file__).parent.parent / "docs" / "mcp.md").read_text()
    assert "SIS_MCP_ALLOWED_ORIGINS" in doc and "403" in doc


def test_allowed_origins_are_read_as_browsers_send_them_and_a_non_origin_is_said(caplog):
    """A Unicode host in the allow-list never matched the xn-- form browsers send, and an entry
    that is no origin (no scheme) was dropped without a word."""
    import logging

    from coordinator.faces.mcp.endpoint import allowed_origins, origin_allowed
    caplog.set_level(logging.WARNING)
    allowed = allowed_origins("https://faß.de, example.net, https://Maps.Example.ORG:443", "")
    assert allowed == frozenset({"https://xn--fa-hia.de", "https://maps.example.org"})
    assert origin_allowed("https://xn--fa-hia.de", "svc.example:8080", allowed)
    assert origin_allowed("https://faß.de", "svc.example:8080", allowed)
    assert not origin_allowed("https://fass.de", "svc.example:8080", allowed)
    assert any("'example.net' is no origin" in r.getMessage() for r in caplog.records)
