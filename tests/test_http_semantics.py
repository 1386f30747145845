"""HTTP as clients, proxies and browsers see it (audit h41).

- A refusal answered from ``prepare`` (a 404, a 405, a reviewer's 401) closed the keep-alive
  connection without ``Connection: close``: the request a client sent next on it was reset
  (48 of 50 times straight after a 404). A request with no body is refused from its method
  now, the connection kept; one whose body is still coming says ``Connection: close``.
- A gzipped body was read as its bytes ("not UTF-8 (byte 1)"): 415.
- The 404 of a path no route serves and the public documents had no
  ``Access-Control-Allow-Origin``; POST /mcp had no CORS for the origins an operator allows.
- The review page's files answered errors as Tornado's HTML, and a 405 without ``Allow``.
- The review API's 401 named no scheme (``WWW-Authenticate``).
- The access line named a trusted proxy, not the client it forwarded, and no request id."""
from __future__ import annotations

import asyncio
import gzip
import json
import logging

import pytest

from tests.support import make_settings, start_coordinator, stop_coordinator


class Conn:
    """One keep-alive connection, written and read by hand."""

    def __init__(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.reader, self.writer = reader, writer

    @classmethod
    async def open(cls, base_url: str) -> "Conn":
        host, port = base_url.split("//")[1].split(":")
        return cls(*await asyncio.open_connection(host, int(port)))

    async def send(self, method: str, path: str, headers: dict[str, str] | None = None,
                   body: bytes | None = None) -> tuple[int, dict[str, str], bytes]:
        head = {"Host": "127.0.0.1", **(headers or {})}
        if body is not None:
            head["Content-Length"] = str(len(body))
        lines = [f"{method} {path} HTTP/1.1", *(f"{k}: {v}" for k, v in head.items()), "", ""]
        self.writer.write("\r\n".join(lines).encode() + (body or b""))
        await self.writer.drain()
        top = await asyncio.wait_for(self.reader.readuntil(b"\r\n\r\n"), 10)
        status_line, *header_lines = top.decode("latin-1").rstrip("\r\n").split("\r\n")
        got = {k.strip().lower(): v.strip() for k, _, v in (h.partition(":") for h in header_lines)}
        size = 0 if method == "HEAD" else int(got.get("content-length", "0"))
        payload = await asyncio.wait_for(self.reader.readexactly(size), 10)
        return int(status_line.split()[1]), got, payload

    async def closed(self) -> bool:
        """Whether the server closed its side (EOF within a second)."""
        try:
            return await asyncio.wait_for(self.reader.read(1), 1) == b""
        except asyncio.TimeoutError:
            return False

    def close(self) -> None:
        self.writer.close()


@pytest.fixture
async def served(sqlite_url, upstream):
    c = await start_coordinator(make_settings(sqlite_url, upstream, mcp_allowed_origins="https://app.example"))
    yield c
    await stop_coordinator(c)


REFUSALS = [
    ("GET", "/earth/no-such-tool", None, 404),
    ("GET", "/favicon.ico", None, 404),
    ("HEAD", "/earth/no-such-tool", None, 404),
    ("POST", "/earth/events", b"", 405),                  # a GET route, Content-Length: 0
    ("DELETE", "/node/v1/lease", None, 405),
    ("GET", "/review/v1/me", None, 401),                  # no reviewer key
    ("GET", "/mcp", None, 405),
    ("GET", "/earth/events?radius=abc", None, 400),
]


@pytest.mark.parametrize("method,path,body,status", REFUSALS)
async def test_a_refusal_of_a_request_without_a_body_keeps_the_connection(served, method, path, body, status):
    conn = await Conn.open(served.base_url)
    try:
        got, headers, payload = await conn.send(method, path, body=body)
        assert got == status and headers.get("connection", "").lower() != "close"
        if method != "HEAD":
            assert set(json.loads(payload)["error"]) == {"code", "message", "details"}
        again, _, body2 = await conn.send("GET", "/healthz")      # the same connection, answered
        assert again == 200 and json.loads(body2)["status"] == "ok"
    finally:
        conn.close()


async def test_a_refusal_before_a_body_is_read_says_the_connection_closes(served):
    conn = await Conn.open(served.base_url)
    try:
        status, headers, _ = await conn.send("POST", "/earth/no-such-tool", {"Content-Type": "application/json"},
                                             b'{"lat": 1}')
        assert status == 404 and headers["connection"] == "close"
        assert await conn.closed()
    finally:
        conn.close()


async def test_a_compressed_request_body_is_refused_415(served):
    body = gzip.compress(json.dumps({"lat": -6.2, "lon": 106.8}).encode())
    r = await served.post("/earth/sweep-request", body, headers={"Content-Type": "application/json",
                                                                  "Content-Encoding": "gzip"})
    assert r.status == 415, r.body
    assert r.json()["error"]["details"] == {"contentEncoding": "gzip"}
    assert "encoded" in r.json()["error"]["message"]


@pytest.mark.parametrize("path", ["/earth/no-such-tool", "/openapi.json", "/", "/earth/tools.json"])
async def test_public_documents_and_the_404_are_readable_from_any_origin(served, path):
    r = await served.get(path, headers={"Origin": "https://elsewhere.example"})
    assert r.headers.get("Access-Control-Allow-Origin") == "*", (path, r.status)


async def test_mcp_answers_the_preflight_and_the_post_of_an_allowed_origin(served):
    pre = await served.request("OPTIONS", "/mcp", headers={
        "Origin": "https://app.example", "Access-Control-Request-Method": "POST",
        "Access-Control-Request-Headers": "content-type,mcp-protocol-version"})
    assert pre.status == 204 and pre.headers["Access-Control-Allow-Origin"] == "https://app.example"
    allowed = {h.strip().lower() for h in pre.headers["Access-Control-Allow-Headers"].split(",")}
    assert {"content-type", "mcp-protocol-version", "x-api-key"} <= allowed
    assert pre.headers["Access-Control-Allow-Methods"] == "POST"
    ping = {"jsonrpc": "2.0", "id": 1, "method": "ping"}
    r = await served.post("/mcp", ping, headers={"Origin": "https://app.example", "Accept": "application/json"})
    assert r.status == 200 and r.headers["Access-Control-Allow-Origin"] == "https://app.example"
    assert "Origin" in r.headers["Vary"]
    foreign = await served.request("OPTIONS", "/mcp", headers={"Origin": "https://evil.example",
                                                               "Access-Control-Request-Method": "POST"})
    assert foreign.status == 403 and "Access-Control-Allow-Origin" not in foreign.headers
    assert (await served.request("OPTIONS", "/mcp")).status == 405            # no Origin: no preflight
    r = await served.post("/mcp", ping, headers={"Accept": "application/json"})
    assert r.status == 200 and "Access-Control-Allow-Origin" not in r.headers


async def test_the_review_pages_files_answer_errors_in_the_one_shape(served):
    missing = await served.get("/review/static/nope.js")
    assert missing.status == 404 and missing.headers["Content-Type"].startswith("application/json")
    assert missing.json()["error"]["code"] == "not_found" and missing.headers["X-Request-Id"]
    posted = await served.post("/review/static/review.js", b"x")
    assert posted.status == 405 and posted.headers["Allow"] == "GET, HEAD"
    assert posted.json()["error"]["message"] == "method POST is not allowed on /review/static/review.js"
    assert (await served.get("/review/static/review.js")).status == 200


async def test_the_review_apis_401_names_its_scheme(served):
    r = await served.get("/review/v1/me")
    assert r.status == 401 and r.headers["WWW-Authenticate"] == 'Bearer realm="review"'
    r = await served.get("/review/v1/me", headers={"Authorization": "Bearer sisk_" + "A" * 32})
    assert r.status == 401 and 'error="invalid_token"' in r.headers["WWW-Authenticate"]


async def test_the_access_line_names_the_forwarded_client_and_the_request_id(sqlite_url, upstream, caplog):
    """Behind a trusted proxy the line named the proxy alone, so an operator could not tell whom the
    limits refused; and no line named the id a client's 4xx carries. A /healthz answered well, a
    balancer's probe every few seconds, is logged at DEBUG."""
    caplog.set_level(logging.INFO, logger="tornado.access")
    c = await start_coordinator(make_settings(sqlite_url, upstream, trusted_proxies="127.0.0.1/32"))
    try:
        r = await c.get("/earth/no-such-tool", headers={"X-Forwarded-For": "203.0.113.9"})
        direct = await c.get("/openapi.json")
        assert (await c.get("/healthz")).status == 200
    finally:
        await stop_coordinator(c)
    lines = [x.getMessage() for x in caplog.records if x.name == "tornado.access"]
    assert any(line.startswith("404 GET /earth/no-such-tool (203.0.113.9 via 127.0.0.1) ")
               and line.endswith(" " + r.headers["X-Request-Id"]) for line in lines), lines
    assert any(line.startswith("200 GET /openapi.json (127.0.0.1) ") and line.endswith(direct.headers["X-Request-Id"])
               for line in lines), lines
    assert not any("GET /healthz" in line for line in lines)         # a balancer's probe: at DEBUG


async def test_options_on_a_tool_route_says_its_methods_and_browsers_may_read_the_etag(served):
    r = await served.request("OPTIONS", "/earth/events")
    assert r.status == 204 and r.headers["Allow"] == "GET, HEAD, OPTIONS"
    r = await served.get("/earth/events", headers={"Origin": "https://elsewhere.example"})
    assert "ETag" in [h.strip() for h in r.headers["Access-Control-Expose-Headers"].split(",")]


async def test_the_access_line_says_when_the_client_left_before_its_answer(served, upstream, caplog):
    """A request whose client gave up after a moment read as a 200 served in full."""
    from coordinator.demo.upstream import sample
    caplog.set_level(logging.INFO, logger="tornado.access")
    upstream.set_json("/gdacs/events/geteventlist/EVENTS4APP", sample("gdacs", "events/geteventlist/EVENTS4APP"),
                      delay_s=1.0)
    conn = await Conn.open(served.base_url)
    conn.writer.write(b"GET /earth/events HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n")
    await conn.writer.drain()
    await asyncio.sleep(0.2)
    conn.close()                                                   # gone before the answer
    for _ in range(60):
        lines = [x.getMessage() for x in caplog.records if x.name == "tornado.access" and "/earth/events" in
                 x.getMessage()]
        if lines:
            break
        await asyncio.sleep(0.1)
    assert lines and lines[0].endswith(" (the client left before the answer)"), lines
    r = await served.get("/earth/events")
    line = [x.getMessage() for x in caplog.records if x.name == "tornado.access"][-1]
    assert r.status == 200 and line.endswith(r.headers["X-Request-Id"]), line


async def test_a_method_tornado_does_not_know_is_answered_with_connection_close(served):
    """Refused by Tornado before prepare (TRACE, PROPFIND): the connection closes, said now."""
    conn = await Conn.open(served.base_url)
    try:
        status, headers, _ = await conn.send("TRACE", "/healthz")
        assert status == 405 and headers["connection"] == "close"
        assert await conn.closed()
    finally:
        conn.close()


async def test_the_review_files_log_no_credential_of_their_uri(served, caplog):
    """Tornado's own log line for the static files' refusals wrote the URI whole, a ?key= with it."""
    caplog.set_level(logging.INFO)
    key = "sisk_ABCDefghijklmnopqrstuvwxyz012345"
    assert (await served.get(f"/review/static/vendor?key={key}")).status in (403, 404)
    text = "\n".join(x.getMessage() for x in caplog.records)
    assert key[9:] not in text and "sisk_ABCD…" in text, text


async def test_mcp_answers_the_refusals_of_a_requests_head_in_json_rpc(served):
    """An encoded body (415), an over-long URI (414) and over-large headers (431) were answered in the
    REST error shape on /mcp, where every other answer, 413 included, is a JSON-RPC error."""
    ping = json.dumps({"jsonrpc": "2.0", "id": 1, "method": "ping"}).encode()
    head = {"Content-Type": "application/json", "Accept": "application/json"}
    cases = ((415, "/mcp", {**head, "Content-Encoding": "gzip"}),
             (414, "/mcp?x=" + "a" * 9000, head),
             (431, "/mcp", {**head, "X-Big": "b" * 33000}))
    for status, path, headers in cases:
        r = await served.post(path, ping, headers=headers)
        doc = r.json()
        assert r.status == status and doc["jsonrpc"] == "2.0" and doc["id"] is None, (status, r.body[:200])
        assert doc["error"]["code"] == -32600 and doc["error"]["message"]


@pytest.mark.parametrize("accept, gzipped", [("gzip", True), ("gzip, deflate, br", True), ("gzip;q=0.5", True),
                                             ("*", True), ("gzip;q=0", False), ("gzip;q=0, identity", False),
                                             ("br", False), ("*;q=0", False), ("", False)])
async def test_gzip_is_taken_only_where_the_client_weighs_it_over_zero(served, accept, gzipped):
    """Tornado looked for the word: gzip;q=0, a client's "never gzip", was answered gzipped."""
    from tornado.httpclient import AsyncHTTPClient, HTTPRequest
    req = HTTPRequest(served.base_url + "/openapi.json", headers={"Accept-Encoding": accept}, decompress_response=False)
    r = await AsyncHTTPClient().fetch(req, raise_error=False)
    assert r.code == 200 and (r.headers.get("Content-Encoding") == "gzip") is gzipped, (accept, dict(r.headers))
