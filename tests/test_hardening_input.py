"""Hostile input on every face (issue 31): deeply nested JSON, oversized bodies, URIs and
headers, rate limits on the node and review routes, 405 with Allow, empty parameters."""
from __future__ import annotations

import json

import pytest
from sqlalchemy import select

from coordinator.core.db.models import SweepLease, SweepResult
from coordinator.faces.http import json_depth_exceeds, parse_json
from tests.test_error_shape import assert_error_shape
from tests.test_review_kit import reviewer
from tests.test_sweeps_kit import CENTRE, enrolled, photos, request_sweep, sweeps_db, sweeps_sqlite  # noqa: F401

DEEP = "[" * 5000 + "]" * 5000                       # 10 KB: RecursionError in json.loads
DEEP_OBJECT = '{"a":' * 2500 + "1" + "}" * 2500
JUST_DEEP = "[" * 33 + "]" * 33                        # one level past the bound


def test_the_json_reader_bounds_depth_without_recursing():
    assert json_depth_exceeds(JUST_DEEP.encode()) and not json_depth_exceeds(("[" * 32 + "]" * 32).encode())
    assert not json_depth_exceeds(b'{"text": "[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[["}')
    assert parse_json(b'{"a": [1, {"b": "x\\"]"}]}') == {"a": [1, {"b": 'x"]'}]}
    for body, why in ((DEEP, "deeper than 32"), (DEEP_OBJECT, "deeper than 32"),
                      ("[" * 100_000, "not valid JSON"), ('{"a": [' * 20_000, "not valid JSON")):
        try:
            parse_json(body)
        except ValueError as exc:      # never a RecursionError
            assert why in str(exc), (body[:10], exc)
        else:
            raise AssertionError("a deep body was read")


async def test_deep_json_is_400_on_sweep_request_enrol_and_review_bodies(sweeps_sqlite):
    auth = await reviewer(sweeps_sqlite)
    for path, headers in (("/earth/sweep-request", {}), ("/node/v1/enrol", {}),
                          ("/review/v1/jobs/1/approve", auth), ("/review/v1/sweeps/sr_x/approve", auth)):
        for body in (DEEP, DEEP_OBJECT, JUST_DEEP):
            r = await sweeps_sqlite.post(path, body, headers={**headers, "Content-Type": "application/json"})
            assert r.status == 400, (path, r.status, r.body[:200])
            assert_error_shape(r.json(), "bad_parameter")
            assert "deeper than 32" in r.json()["error"]["message"]


async def test_deep_json_on_mcp_is_a_parse_error(sweeps_sqlite):
    for body in (DEEP, DEEP_OBJECT):
        r = await sweeps_sqlite.post("/mcp", body, headers={"Content-Type": "application/json",
                                                            "Accept": "application/json"})
        assert r.status == 400, r.body[:200]
        doc = r.json()
        assert doc["error"]["code"] == -32700 and "deeper than 32" in doc["error"]["message"]


# In UTF-16 the character U+4E22 is the bytes 22 4E: a quote to a check that reads bytes, so the
# brackets after it hid in a fake string and a body 900 levels deep reached the parser.
HIDDEN_DEEP = ('{"lat":["\u4e22",' + "[" * 900 + "]" * 900 + ',"b"],"lon":107.6}')


def test_bodies_are_read_as_utf8_only():
    assert parse_json("\ufeff{\"a\": \"\u00e9\"}".encode()) == {"a": "\u00e9"}     # a UTF-8 BOM is let pass
    for body in (HIDDEN_DEEP.encode("utf-16-le"), '{"a": 1}'.encode("utf-16"), '{"a": 1}'.encode("utf-32"),
                 b'{"a": "\xed\xa0\x80"}', b'{"a": "\xff"}'):     # the last two: a surrogate in UTF-8, a stray byte
        try:
            parse_json(body)
        except ValueError as exc:
            assert "not UTF-8" in str(exc), (body[:12], exc)
        else:
            raise AssertionError(f"read {body[:12]!r}")


async def test_a_body_in_another_encoding_is_400_or_a_parse_error_on_every_face(sweeps_sqlite):
    body = HIDDEN_DEEP.encode("utf-16-le")
    for path in ("/earth/sweep-request", "/node/v1/enrol"):
        r = await sweeps_sqlite.post(path, body, headers={"Content-Type": "application/json"})
        assert r.status == 400, (path, r.status, r.body[:200])
        assert_error_shape(r.json(), "bad_parameter")
        assert "not UTF-8" in r.json()["error"]["message"]
    rpc = ('{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"seen_layer","arguments":'
           '{"lat":["\u4e22",' + "[" * 40 + "]" * 40 + ',"b"],"lon":107.6}}}').encode("utf-16-le")
    r = await sweeps_sqlite.post("/mcp", rpc, headers={"Content-Type": "application/json",
                                                       "Accept": "application/json"})
    assert r.status < 500, r.body[:200]
    assert r.json()["error"]["code"] == -32700 and "not UTF-8" in r.json()["error"]["message"]


async def test_a_result_in_another_encoding_is_recorded_invalid(sweeps_db, photos):
    """An honest result sent in UTF-16 was accepted: what orjson refused went to json.loads, which
    guesses the encoding (and reads the depth check's blind spot)."""
    photos.scatter(*CENTRE, radius_m=300, n=6, seed=1)
    await request_sweep(sweeps_db, radius=300)
    (node,) = await enrolled(sweeps_db)
    doc = await node.lease()
    lid = doc["lease"]["leaseId"]
    r = await node.submit(lid, json.dumps(node.honest(doc)).encode("utf-16"))
    assert r.status == 422, r.body[:300]
    assert_error_shape(r.json(), "invalid_result")
    assert any("not UTF-8" in x for x in r.json()["error"]["details"]["reasons"])
    from coordinator.sweeps.validation import SchemaError, _parse
    with pytest.raises(SchemaError):             # without a BOM, ASCII in UTF-16 is UTF-8 with NULs
        _parse(json.dumps(node.honest(doc)).encode("utf-16-le"))


async def test_a_deep_result_is_recorded_invalid_and_ends_its_lease(sweeps_db, photos):
    photos.scatter(*CENTRE, radius_m=300, n=6, seed=1)
    await request_sweep(sweeps_db, radius=300)
    (node,) = await enrolled(sweeps_db)
    doc = await node.lease()
    lid = doc["lease"]["leaseId"]
    r = await node.submit(lid, DEEP)
    assert r.status == 422, r.body[:300]
    assert_error_shape(r.json(), "invalid_result")
    assert any("deeper than 32" in x for x in r.json()["error"]["details"]["reasons"])
    async with sweeps_db.services.db.read() as s:
        lease = (await s.execute(select(SweepLease).where(SweepLease.id == lid))).scalar_one()
        result = (await s.execute(select(SweepResult).where(SweepResult.lease_id == lid))).scalar_one()
    assert lease.state != "active" and result.state == "invalid"
    again = await node.submit(lid, DEEP)                       # the same submission: the same answer
    assert again.status == 422 and json.loads(again.body)["error"]["details"]["duplicate"] is True


# ---- bodies over a route's limit: 413 before the body is read (item 4) ---------------------

async def raw_exchange(base_url: str, head: bytes, body_chunks=(), timeout: float = 5.0) -> tuple[int, dict, bytes]:
    """Send ``head`` (request line and headers), then each chunk of ``body_chunks``, and
    read the answer: its status, headers and body. The answer is awaited before any chunk
    is sent when ``body_chunks`` is empty: a server that waits for the body never answers."""
    import asyncio

    host, port = base_url.rsplit("/", 1)[-1].split(":")
    reader, writer = await asyncio.open_connection(host, int(port))
    try:
        writer.write(head)
        await writer.drain()
        for chunk in body_chunks:
            writer.write(chunk)
            await writer.drain()
        raw = await asyncio.wait_for(reader.read(65536), timeout)
        while b"\r\n\r\n" not in raw:
            more = await asyncio.wait_for(reader.read(65536), timeout)
            if not more:
                break
            raw += more
        head_text, _, rest = raw.partition(b"\r\n\r\n")
        lines = head_text.decode("latin-1").split("\r\n")
        headers = {k.strip().lower(): v.strip() for k, _, v in (x.partition(":") for x in lines[1:])}
        length = int(headers.get("content-length", "0"))
        while len(rest) < length:
            more = await asyncio.wait_for(reader.read(65536), timeout)
            if not more:
                break
            rest += more
        return int(lines[0].split()[1]), headers, rest
    finally:
        writer.close()


def _post_head(path: str, length: int | None, extra: str = "") -> bytes:
    size = f"Content-Length: {length}\r\n" if length is not None else "Transfer-Encoding: chunked\r\n"
    return (f"POST {path} HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n{size}{extra}\r\n").encode()


async def test_a_50_mb_body_is_answered_413_before_it_is_sent(sweeps_sqlite):
    auth = await reviewer(sweeps_sqlite)
    key = auth.get("X-Api-Key") or auth["Authorization"].split()[-1]
    (node,) = await enrolled(sweeps_sqlite)
    for path, extra, limit in (("/earth/sweep-request?lat=48.85&lon=2.35&radius=300", "", 64 * 1024),
                               ("/node/v1/enrol", "", 16 * 1024),
                               ("/node/v1/lease", f"Authorization: {node.auth['Authorization']}\r\n", 16 * 1024),
                               ("/review/v1/jobs/1/approve", f"X-Api-Key: {key}\r\n", 16 * 1024),
                               ("/mcp", "Accept: application/json\r\n", 64 * 1024)):
        status, headers, body = await raw_exchange(sweeps_sqlite.base_url, _post_head(path, 50_000_000, extra))
        if path == "/mcp":
            doc = json.loads(body)          # 413, as the SDK's own server answers, with a JSON-RPC error
            assert status == 413 and doc["error"]["code"] == -32600 and doc["error"]["data"] == {"maxBytes": limit}
            continue
        assert status == 413, (path, status, body[:200])
        assert_error_shape(json.loads(body), "payload_too_large")
        assert json.loads(body)["error"]["details"]["maxBytes"] == limit
    # A method the route does not answer is refused as such first, whatever the body's size, as on every route.
    status, headers, body = await raw_exchange(sweeps_sqlite.base_url, _post_head("/healthz", 50_000_000, ""))
    assert status == 405 and headers["connection"] == "close", (status, headers)


async def test_a_review_route_answers_401_before_reading_a_body(sweeps_sqlite):
    status, _, body = await raw_exchange(sweeps_sqlite.base_url, _post_head("/review/v1/jobs/1/approve", 10_000))
    assert status == 401, body[:200]
    assert_error_shape(json.loads(body), "unauthorized")


async def test_a_chunked_body_over_the_limit_is_dropped_as_it_arrives_and_answered_413(sweeps_sqlite):
    chunk = b"x" * 8192
    chunks = [b"%x\r\n%s\r\n" % (len(chunk), chunk)] * 40 + [b"0\r\n\r\n"]      # 320 KB over a 64 KB route
    status, _, body = await raw_exchange(sweeps_sqlite.base_url,
                                         _post_head("/earth/sweep-request?lat=48.85&lon=2.35&radius=300", None),
                                         chunks)
    assert status == 413, body[:200]
    assert_error_shape(json.loads(body), "payload_too_large")


# ---- rate limits on node and review routes, 414, 431, 405 with Allow, empty values (item 8) ----

async def test_node_routes_are_rate_limited_per_node_and_per_address(sqlite_url, photos):
    from tests.support import stop_coordinator
    from tests.test_sweeps_kit import start

    c = await start(sqlite_url, photos, node_per_minute=3, node_ip_per_minute=8)
    try:
        a, b = await enrolled(c, 2)                        # enrolment counts in the address's window: 2
        statuses = [(await c.get("/node/v1/me", headers=a.auth)).status for _ in range(4)]
        assert statuses == [200, 200, 200, 429], statuses      # a's own window: 3
        r = await c.get("/node/v1/me", headers=a.auth)
        assert_error_shape(r.json(), "rate_limited")
        assert r.json()["error"]["details"]["limit"] == "nodePerMinute" and int(r.headers["Retry-After"]) >= 1
        assert (await c.get("/node/v1/me", headers=b.auth)).status == 200     # b has its own
        r = await c.get("/node/v1/me", headers={"Authorization": "Bearer sisn_guess"})
        assert r.status == 429 and r.json()["error"]["details"]["limit"] == "nodeIpPerMinute"   # 8 from here
    finally:
        await stop_coordinator(c)


async def test_review_routes_are_rate_limited_per_reviewer_and_per_address(sqlite_url, photos):
    from tests.support import stop_coordinator
    from tests.test_sweeps_kit import start

    c = await start(sqlite_url, photos, reviewer_per_minute=2, review_ip_per_minute=4)
    try:
        auth = await reviewer(c)
        assert [(await c.get("/review/v1/me", headers=auth)).status for _ in range(3)] == [200, 200, 429]
        r = await c.get("/review/v1/me", headers={"X-Api-Key": "sisr_guess"})
        assert r.status == 401                                            # the address's 4th
        r = await c.get("/review/v1/me", headers={"X-Api-Key": "sisr_guess"})
        assert r.status == 429 and r.json()["error"]["details"]["limit"] == "reviewIpPerMinute"
        assert_error_shape(r.json(), "rate_limited")
    finally:
        await stop_coordinator(c)


async def test_a_long_query_is_414_and_large_headers_431_in_the_one_shape(sweeps_sqlite):
    for path in ("/earth/events?bbox=" + "1" * 100_000, "/node/v1/me?x=" + "a" * 100_000,
                 "/no-such-path?" + "q" * 100_000):
        r = await sweeps_sqlite.get(path)
        assert r.status == 414, (path[:30], r.status)
        assert_error_shape(r.json(), "uri_too_long")
    r = await sweeps_sqlite.post("/node/v1/leases/ls_x/result?next=" + "1" * 100_000, {})
    assert r.status == 414
    assert_error_shape(r.json(), "uri_too_long")
    r = await sweeps_sqlite.get("/earth/events", headers={f"X-Pad-{i}": "v" * 1000 for i in range(40)})
    assert r.status == 431
    assert_error_shape(r.json(), "headers_too_large")


async def test_405_answers_carry_allow(sweeps_sqlite):
    for method, path, allow in (("POST", "/earth/events", "GET, HEAD, OPTIONS"), ("GET", "/node/v1/lease", "POST"),
                                ("DELETE", "/review/v1/me", "GET, HEAD"), ("POST", "/healthz", "GET, HEAD"),
                                ("GET", "/mcp", "POST"), ("HEAD", "/earth/sweep-request", "POST, OPTIONS")):
        r = await sweeps_sqlite.request(method, path, b"{}" if method == "POST" else None)
        assert r.status == 405, (method, path, r.status)
        if method != "HEAD":
            assert_error_shape(r.json(), "method_not_allowed")
        assert r.headers.get("Allow") == allow, (path, r.headers.get("Allow"))


async def test_an_empty_value_is_400_not_silently_the_default(sweeps_sqlite):
    auth = await reviewer(sweeps_sqlite)
    for path, name, headers in (("/earth/street-measure?lat=48.85&lon=2.35&maxM=", "maxM", {}),
                                ("/earth/seen?lat=48.85&lon=2.35&radius=", "radius", {}),
                                ("/earth/sweep-queue?state=", "state", {}),
                                ("/earth/sweep-queue?limit=", "limit", {}),
                                ("/review/v1/pending?limit=", "limit", auth)):
        r = await sweeps_sqlite.get(path, headers=headers)
        assert r.status == 400, (path, r.status, r.body[:200])
        assert_error_shape(r.json(), "bad_parameter")
        assert r.json()["error"]["details"]["parameter"] == name and "empty" in r.json()["error"]["message"]
    assert (await sweeps_sqlite.get("/earth/sweep-queue")).status == 200          # left out: the default


async def test_openapi_lists_every_answer_of_tool_routes_too(sweeps_sqlite):
    doc = (await sweeps_sqlite.get("/openapi.json")).json()
    for path, item in doc["paths"].items():
        for method, op in item.items():
            if "x-tool" not in op:
                continue
            assert {"400", "401", "404", "429"} <= set(op["responses"]), (path, method)
            if method == "post":
                assert "413" in op["responses"], path


async def test_head_answers_wherever_get_does_with_its_headers_and_no_body(sweeps_sqlite):
    for path in ("/earth/events", "/healthz", "/openapi.json", "/earth/seen?lat=48.85&lon=2.35", "/legacy/events"):
        got, head = await sweeps_sqlite.get(path), await sweeps_sqlite.request("HEAD", path)
        assert head.status == got.status == 200 and head.body == b"", path
        assert head.headers["Content-Type"] == got.headers["Content-Type"], path
    r = await sweeps_sqlite.request("HEAD", "/earth/seen?lat=91&lon=2")
    assert r.status == 400 and r.body == b""        # refused as GET is, its body left out
    # A GET that mints something (an embed token's renewal) is not one HEAD may run unseen.
    r = await sweeps_sqlite.request("HEAD", "/public/v1/anon/renew")
    assert r.status == 405 and r.headers["Allow"] == "GET, OPTIONS"


async def test_values_json_cannot_encode_as_is_are_still_answered_in_the_one_shape(sweeps_sqlite):
    """A client's integer past 64 bits or lone surrogate, echoed in an error's details, once
    left the answer with no body (the encoder refused it); MCP answered a bare 500."""
    for body, message in (('{"lat": 12345678901234567890123456789, "lon": 2}', "between -90 and 90"),
                          ('{"lat": 1' + "0" * 400 + ', "lon": 2}', "finite number"),
                          ('{"lat": "\\ud800", "lon": 2}', "must be a number"),
                          ('{"\\ud800": 1}', "unknown parameter")):
        r = await sweeps_sqlite.post("/earth/sweep-request", body, headers={"Content-Type": "application/json"})
        assert r.status == 400, (body[:40], r.status)
        assert_error_shape(r.json(), "bad_parameter")
        assert message in r.json()["error"]["message"], r.json()
    mcp = {"Content-Type": "application/json", "Accept": "application/json"}
    for rid, call, code in ((2 ** 64, "ping", None),
                            (1, {"name": "seen_layer", "arguments": {"lat": 10 ** 400, "lon": 1}}, -32602),
                            (1, {"name": "\ud800"}, -32602)):       # a lone surrogate, escaped by json.dumps
        method, params = (call, {}) if isinstance(call, str) else ("tools/call", call)
        body = json.dumps({"jsonrpc": "2.0", "id": rid, "method": method, "params": params})
        r = await sweeps_sqlite.post("/mcp", body, headers=mcp)
        doc = r.json()
        assert doc["jsonrpc"] == "2.0" and doc["id"] == rid, doc
        # A JSON-RPC error to a request whose id was read is HTTP 200 in the handshake era (docs/mcp.md).
        assert (doc["error"]["code"] == code) if code else ("result" in doc)
        assert r.status == 200


async def test_numbers_are_ascii_decimal_and_unknown_names_are_read_as_utf8(sweeps_sqlite):
    for query in ("lat=%EF%BC%91&lon=2", "lat=%D9%A3&lon=2", "lat=1_0&lon=2", "lat=0x10&lon=2"):
        r = await sweeps_sqlite.get(f"/earth/seen?{query}")
        assert r.status == 400 and r.json()["error"]["message"] == "'lat' must be a number", query
    assert (await sweeps_sqlite.get("/earth/seen?lat=4.885e1&lon=+2.35")).status == 200
    r = await sweeps_sqlite.get("/earth/events?caf%C3%A9=1")
    assert r.status == 400 and r.json()["error"]["details"]["parameter"] == "café"


async def test_a_value_in_both_query_and_body_may_be_spelled_differently(sweeps_sqlite):
    ok = await sweeps_sqlite.post("/earth/sweep-request?lat=48.85", {"lat": 48.850, "lon": 2.35})
    assert ok.status in (200, 201, 202), ok.body[:200]
    r = await sweeps_sqlite.post("/earth/sweep-request?lat=48.86", {"lat": 48.85, "lon": 2.35})
    assert r.status == 400 and "differently" in r.json()["error"]["message"]


async def test_a_json_object_naming_a_key_twice_is_refused_on_every_face(sweeps_sqlite):
    """JSON leaves a repeated key to its reader (the last copy won here, the first in others), so a
    body meant one thing to a proxy that checked it and another to the service; a query that gives
    a parameter twice was already refused."""
    body = '{"lat": 95, "lat": 48.85, "lon": 2.35}'
    r = await sweeps_sqlite.post("/earth/sweep-request", body, headers={"Content-Type": "application/json"})
    assert r.status == 400 and r.json()["error"]["message"] == "the request body gives the key 'lat' more than once"
    rpc = ('{"jsonrpc": "2.0", "id": 1, "method": "tools/call", "params": {"name": "seen_layer", '
           '"arguments": {"lat": 95, "lat": 48.85, "lon": 2.35}}}')
    r = await sweeps_sqlite.post("/mcp", rpc, headers={"Content-Type": "application/json", "Accept": "application/json"})
    assert r.json()["error"]["code"] == -32700 and "'lat' more than once" in r.json()["error"]["message"]
    twice = '{"jsonrpc": "2.0", "id": 1, "method": "tools/list", "method": "tools/call", "params": {}}'
    r = await sweeps_sqlite.post("/mcp", twice, headers={"Content-Type": "application/json", "Accept": "application/json"})
    assert r.json()["error"]["code"] == -32700 and "'method' more than once" in r.json()["error"]["message"]


async def test_a_body_labelled_other_than_json_is_415_not_dropped_unread(sweeps_sqlite):
    """``curl -d`` labels a JSON text as a form: the body was dropped and the answer said "'lat' is
    required", or served the default radius for a text/plain ``{"radius": 999}``."""
    for ctype, body in (("application/x-www-form-urlencoded", "lat=48.85&lon=2.35"),
                        ("text/plain", '{"radius": 999}')):
        r = await sweeps_sqlite.post("/earth/sweep-request?lat=48.85&lon=2.35", body, headers={"Content-Type": ctype})
        assert r.status == 415, (ctype, r.status, r.body[:200])
        assert_error_shape(r.json(), "unsupported_media_type")
        assert ctype in r.json()["error"]["message"] and "application/json" in r.json()["error"]["message"]
    r = await sweeps_sqlite.post("/earth/sweep-request", '{"lat": 48.85, "lon": 2.35, "radius": 5000}', headers={})
    assert r.status == 400 and r.json()["error"]["details"].get("parameter") == "radius", r.body[:300]  # read as JSON


async def test_an_explicit_null_is_400_not_silently_the_default(sweeps_sqlite):
    """``{"radius": null}`` (and NaN, which JSON encoders write as null) answered the default 450 m."""
    r = await sweeps_sqlite.post("/earth/sweep-request", {"lat": 48.85, "lon": 2.35, "radius": None})
    assert r.status == 400 and r.json()["error"]["details"] == {"parameter": "radius", "value": None}
    assert r.json()["error"]["message"] == "'radius' is null: give a value, or leave the parameter out for its default (450)"
    rpc = {"jsonrpc": "2.0", "id": 1, "method": "tools/call",
           "params": {"name": "seen_layer", "arguments": {"lat": 48.85, "lon": 2.35, "radius": None}}}
    r = await sweeps_sqlite.post("/mcp", rpc, headers={"Content-Type": "application/json", "Accept": "application/json"})
    assert r.json()["error"]["code"] == -32602 and "'radius' is null" in r.json()["error"]["message"]


async def test_the_api_key_is_read_one_way_on_every_face(sweeps_sqlite):
    """Given twice, empty, or as two different keys (header and query), the key is refused alike on
    REST and MCP: MCP took the last of two query keys where REST refused them, the header won
    silently over a different query key, and an empty key was served as anonymous."""
    mcp = {"Content-Type": "application/json", "Accept": "application/json"}
    rpc = {"jsonrpc": "2.0", "id": 1, "method": "tools/call", "params": {"name": "limits", "arguments": {}}}
    for query, headers, said in (("key=sis_a&key=sis_a", {}, "more than once"),
                                 ("key=", {}, "empty"),
                                 ("", {"X-Api-Key": " "}, "empty"),
                                 ("key=sis_b", {"X-Api-Key": "sis_a"}, "two different API keys")):
        r = await sweeps_sqlite.get(f"/earth/limits?{query}", headers=headers)
        assert r.status == 400 and said in r.json()["error"]["message"], (query, headers, r.body[:200])
        assert r.json()["error"]["details"] == {"parameter": "key"} and "sis_a" not in r.body.decode()
        r = await sweeps_sqlite.post(f"/mcp?{query}", rpc, headers={**mcp, **headers})
        assert r.json()["error"]["code"] == -32602 and said in r.json()["error"]["message"], (query, r.body[:200])
    assert (await sweeps_sqlite.get("/earth/limits")).status == 200                      # none: anonymous


async def test_a_path_parameter_given_again_in_the_query_must_agree(sweeps_sqlite):
    r = await sweeps_sqlite.get("/earth/w/cg-bitcoin?id=cg-ethereum")
    assert r.status == 400 and r.json()["error"]["message"] == "'id' is given in both the path and the query, differently"


async def test_a_path_segment_that_is_not_utf8_is_answered_as_any_unknown_one(sweeps_sqlite):
    """Tornado refused such a segment with a bare 400 "Bad Request" outside the one error shape."""
    r = await sweeps_sqlite.get("/earth/w/%FF")
    assert r.status == 404, r.body[:200]
    assert_error_shape(r.json(), "not_found")
    r = await sweeps_sqlite.get("/public/v1/%FF%FE/limits")
    assert r.status == 401, r.body[:200]
    assert_error_shape(r.json(), "unauthorized")


async def test_text_that_cannot_be_stored_or_shown_is_400_naming_the_parameter(sweeps_db):
    """A lone surrogate or a NUL in a node's enrolment text was a 500 (no UTF-8 encodes the one,
    PostgreSQL's text refuses the other; SQLite stored the NUL), and an escape sequence reached
    the operator's terminal. Tab and line breaks stay allowed: reasons are prose."""
    from tests.test_sweeps_kit import SimNode
    for field, value, what in (("name", "\ud800", "lone surrogate"), ("gpu", "\udfff", "lone surrogate"),
                               ("platform", "Lin\x00ux", "U+0000"), ("engineVersion", "0.1\x00", "U+0000"),
                               ("platform", "Linux \x1b[31m", "U+001B")):
        r = await SimNode(sweeps_db).enrol(**{field: value})
        assert r.status == 400, (field, r.status, r.body[:200])
        assert_error_shape(r.json(), "bad_parameter")
        assert r.json()["error"]["details"]["parameter"] == field and what in r.json()["error"]["message"]
    assert (await SimNode(sweeps_db).enrol(name="rig\tone")).status == 201


async def test_an_error_echoes_a_bounded_part_of_what_it_refuses(sweeps_sqlite):
    """A parameter name of 20,000 characters came back in full (60 KB), an MCP tool name of
    30,000 three times (90 KB), a bbox of 15,000 numbers in details.value."""
    for query in ("/earth/limits?" + "x" * 6000 + "=1", "/earth/places?bbox=" + "1," * 3000):
        r = await sweeps_sqlite.get(query)
        assert r.status == 400 and len(r.body) < 3000, (query[:30], r.status, len(r.body))
        assert_error_shape(r.json(), "bad_parameter")
    r = await sweeps_sqlite.post("/earth/sweep-request", {"lat": 1, "lon": 2, "x" * 20_000: 1})
    assert r.status == 400 and len(r.body) < 3000, (r.status, len(r.body))
    body = json.dumps({"jsonrpc": "2.0", "id": 1, "method": "tools/call", "params": {"name": "x" * 30_000 + "\n"}})
    r = await sweeps_sqlite.post("/mcp", body, headers={"Content-Type": "application/json",
                                                        "Accept": "application/json"})
    assert r.json()["error"]["code"] == -32602 and len(r.body) < 3000, len(r.body)
