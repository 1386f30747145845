"""The one error body shape, pinned: {"error": {"code", "message", "details"}}."""
from __future__ import annotations

import logging
import re
from typing import Any

from coordinator.core.access import credentials as creds
from coordinator.core.honesty import Answer
from coordinator.core.registry import NUMBER, Param, Tool, ToolRegistry
from coordinator.catalogue import all_tools
from tests.support import make_settings, start_coordinator, stop_coordinator


def assert_error_shape(body: dict, code: str) -> None:
    assert set(body) == {"error"}
    assert set(body["error"]) == {"code", "message", "details"}
    assert body["error"]["code"] == code
    assert isinstance(body["error"]["message"], str) and body["error"]["message"]
    assert isinstance(body["error"]["details"], dict)


async def test_bad_parameter_is_400_naming_the_unknown_parameter(coordinator):
    r = await coordinator.get("/earth/events?colour=red")
    assert r.status == 400
    assert_error_shape(r.json(), "bad_parameter")
    assert "colour" in r.json()["error"]["message"]
    assert r.headers["Cache-Control"] == "no-store"


async def test_a_key_in_the_query_of_the_credentialed_family_is_refused_not_ignored(coordinator):
    """There the credential is the path segment; served as ``anon`` with the key ignored, a caller who put
    it in the query would get anonymous caps without a word."""
    r = await coordinator.get("/public/v1/anon/events?key=sisk_" + "a" * 32)
    assert r.status == 400
    assert_error_shape(r.json(), "bad_parameter")
    assert "the credential is the path segment" in r.json()["error"]["message"]
    assert r.json()["error"]["details"]["parameter"] == "key"
    assert (await coordinator.get("/earth/events?key=sisk_" + "a" * 32)).status == 401   # the direct family reads it


async def test_unknown_path_is_404(coordinator):
    r = await coordinator.get("/earth/no-such-tool")
    assert r.status == 404
    assert_error_shape(r.json(), "not_found")


async def test_wrong_method_is_405(coordinator):
    r = await coordinator.post("/earth/events", {})
    assert r.status == 405
    assert_error_shape(r.json(), "method_not_allowed")


async def test_failing_tool_is_500_without_a_stack_trace(sqlite_url, upstream, caplog):
    async def boom(ctx: Any, params: dict) -> Answer:
        raise RuntimeError("secret internal detail /etc/passwd")

    registry = ToolRegistry([*all_tools(), Tool(name="boom", title="Boom", description="fails",
                                                handler=boom, routes={"earth": "/boom"})])
    c = await start_coordinator(make_settings(sqlite_url, upstream), registry)
    try:
        r = await c.get("/earth/boom")
        assert r.status == 500
        assert_error_shape(r.json(), "internal_error")
        assert b"secret" not in r.body and b"Traceback" not in r.body
        assert r.json()["error"]["details"]["requestId"] == r.headers["X-Request-Id"]
    finally:
        await stop_coordinator(c)


async def test_bound_violation_names_the_bound(sqlite_url, upstream):
    async def echo(ctx: Any, params: dict) -> Answer:
        return Answer({"params": params})

    registry = ToolRegistry([Tool(name="echo", title="Echo", description="echo", handler=echo,
                                  routes={"earth": "/echo"},
                                  params=(Param("radius", NUMBER, "Radius", minimum=100, maximum=3000,
                                                default=450),))])
    c = await start_coordinator(make_settings(sqlite_url, upstream), registry)
    try:
        r = await c.get("/earth/echo?radius=5000")
        assert r.status == 400
        assert_error_shape(r.json(), "bad_parameter")
        assert "between 100 and 3000" in r.json()["error"]["message"]
        assert r.json()["error"]["details"]["maximum"] == 3000
        r = await c.get("/earth/echo?radius=abc")
        assert r.status == 400 and "must be a number" in r.json()["error"]["message"]
        r = await c.get("/earth/echo")
        assert r.status == 200 and r.json()["params"] == {"radius": 450}
    finally:
        await stop_coordinator(c)


def test_an_answer_copied_with_new_headers_shares_its_encoding_but_not_a_new_body():
    import dataclasses
    import json

    a = Answer({"n": 1}, caveats=["c"])
    first = a.encoded(json.dumps)
    assert dataclasses.replace(a, headers={"X": "1"}).encoded(json.dumps) is first
    b = dataclasses.replace(a, data={"n": 2}, _memo={})
    assert json.loads(b.encoded(json.dumps))["n"] == 2


async def test_the_logs_never_hold_a_usable_key(sqlite_url, upstream, caplog):
    """The database keeps only digests of keys; the access log and the 500s' error log cut a key
    in the path or ``?key=`` to the prefix the operator's lists show."""
    async def boom(ctx: Any, params: dict) -> Answer:
        raise RuntimeError("boom")

    registry = ToolRegistry([*all_tools(), Tool(name="boom", title="Boom", description="fails",
                                                handler=boom, routes={"earth": "/boom"})])
    c = await start_coordinator(make_settings(sqlite_url, upstream), registry)
    caplog.set_level(logging.INFO)
    try:
        secret, _ = await creds.create_key(c.services.db, "logged", "Free")
        assert (await c.get(f"/public/v1/{secret}/limits")).status == 200
        assert (await c.get(f"/earth/limits?key={secret}")).status == 200
        boom = await c.get(f"/earth/boom?key={secret}")
        assert boom.status == 500
        text = "\n".join(r.getMessage() for r in caplog.records)
        rid = boom.headers["X-Request-Id"]                   # the header, the body and the log name one id
        assert boom.json()["error"]["details"]["requestId"] == rid and f"request {rid} failed" in text
        assert secret not in text and secret[5:] not in text
        assert f"GET /public/v1/{secret[:9]}…/limits" in text and f"/earth/boom?key={secret[:9]}…" in text
        # Served all the same, and written whole before the log read the URI by its structure: a key
        # percent-encoded, one cut short or run on, a node token, a password where a credential goes.
        caplog.clear()
        spelled = secret[:5] + "%" + secret[5].encode().hex().upper() + secret[6:]
        assert (await c.get(f"/public/v1/{spelled}/limits")).status == 200
        assert (await c.get(f"/earth/limits?key={spelled.replace('_', '%5F', 1)}")).status == 200
        for uri in (f"/public/v1/{secret[:-1]}/limits", f"/public/v1/{secret}AAAA/limits",
                    "/node/v1/lease?token=sisn_ZAsVpZS1I_a6A5lSL7yY2qE9oyj9_9OTcSz7DyDWN7w",
                    "/public/v1/mysecretpassword123/limits", f"/earth/limits?note={secret}%0Aforged"):
            await c.get(uri)
        text = "\n".join(r.getMessage() for r in caplog.records)
        for leaked in (secret[9:], secret[9:-1], "ZAsVpZS1I_a6A5lSL7yY2qE9oyj9_9OTcSz7DyDWN7w"[4:], "mysecretpassword"):
            assert leaked not in text, leaked
        assert "\nforged" not in text and f"/public/v1/{secret[:9]}…/limits" in text
        assert "/public/v1/…/limits" in text and "?token=sisn_ZAsV…" in text
    finally:
        await stop_coordinator(c)


def test_a_forked_worker_draws_request_ids_of_its_own():
    """``sis serve --workers`` forks after import: ids kept in the process (a prefix and a
    counter, once) were copied into every worker, each id given to one request in each."""
    import os

    from coordinator.faces import http
    read, write = os.pipe()
    pid = os.fork()
    if pid == 0:                                          # the worker
        os.write(write, http.new_request_id().encode())
        os._exit(0)
    os.waitpid(pid, 0)
    child = os.read(read, 64).decode()
    assert len(child) == 16 and child != http.new_request_id()


async def test_request_ids_do_not_count_the_requests_between_two(coordinator):
    """A sequential id let any caller read how many requests the process answered between two of
    theirs (the counter's difference)."""
    ids = [(await coordinator.get("/earth/limits")).headers["X-Request-Id"] for _ in range(3)]
    assert all(re.fullmatch("[0-9a-f]{16}", i) for i in ids), ids
    assert len({i[:8] for i in ids}) == 3                 # no shared prefix
    assert not any(abs(int(b, 16) - int(a, 16)) < 2 ** 20 for a, b in zip(ids, ids[1:]))


async def test_a_database_that_does_not_answer_is_503_to_retry_in_one_log_line(sqlite_url, upstream, caplog):
    """A tool whose database is down meets the driver's own error (asyncpg: ConnectionRefusedError,
    unwrapped): a 503 with Retry-After, one warning, not a 500 and a traceback per request."""
    from sqlalchemy.ext.asyncio import create_async_engine

    from tests.support import free_port

    async def reads_a_dead_database(ctx: Any, params: dict) -> Answer:
        engine = create_async_engine(f"postgresql+asyncpg://sis@127.0.0.1:{free_port()}/sis")
        try:
            async with engine.connect():
                pass
        finally:
            await engine.dispose()
        return Answer({})

    registry = ToolRegistry([*all_tools(), Tool(name="dead_db", title="Dead", description="its database is down",
                                                handler=reads_a_dead_database, routes={"earth": "/dead-db"})])
    c = await start_coordinator(make_settings(sqlite_url, upstream), registry)
    caplog.set_level(logging.WARNING)
    try:
        r = await c.get("/earth/dead-db")
        assert r.status == 503 and r.headers["Retry-After"] == "5"
        assert_error_shape(r.json(), "unavailable")
        assert r.json()["error"]["details"]["requestId"] == r.headers["X-Request-Id"]
        said = [x for x in caplog.records if "the database is not answering" in x.getMessage()]
        assert len(said) == 1 and said[0].exc_info is None
        assert not [x for x in caplog.records if x.levelno >= logging.ERROR and x.name != "tornado.access"]
    finally:
        await stop_coordinator(c)


async def test_a_connection_error_from_another_socket_is_not_blamed_on_the_database(sqlite_url, upstream, caplog):
    """A bare ConnectionError is the database's only when it came through its driver: one from any
    other socket answered 503 "the database is not answering" and sent an operator to the wrong place."""
    import asyncio

    from tests.support import free_port

    async def reads_a_dead_socket(ctx: Any, params: dict) -> Answer:
        await asyncio.open_connection("127.0.0.1", free_port())     # refused: nobody listens
        return Answer({})

    registry = ToolRegistry([*all_tools(), Tool(name="dead_socket", title="Dead", description="a socket refused",
                                                handler=reads_a_dead_socket, routes={"earth": "/dead-socket"})])
    c = await start_coordinator(make_settings(sqlite_url, upstream), registry)
    caplog.set_level(logging.WARNING)
    try:
        r = await c.get("/earth/dead-socket")
        assert r.status == 500 and "Retry-After" not in r.headers
        assert_error_shape(r.json(), "internal_error")
        assert not [x for x in caplog.records if "the database is not answering" in x.getMessage()]
        assert [x for x in caplog.records if "ConnectionRefusedError" in str(x.exc_info)]
    finally:
        await stop_coordinator(c)
