"""What a client sends cannot inflate the log (coordinator/faces/logflood.py), against a real
coordinator on loopback.

The audit's case: Tornado logs "Malformed HTTP message from ...: Invalid header name '<the
whole name, escaped>'" on ``tornado.general``, and heads are read up to 1 MB, so one request
put about 2.4 MB in one line (the log grew 2.7 times what was sent). Tornado's lines are now
cut to a few hundred characters, saying how long they were; the access log's to the longest
URI served (8 KB) and the rest of its line;
and one kind of line on ``tornado.general`` is written at most so many times a minute, then
one line says how many were left out. Ordinary lines are written as before."""
from __future__ import annotations

import asyncio
import io
import logging
import re
import socket

import pytest

from tests.support import make_settings, start_coordinator, stop_coordinator

FORMAT = "%(asctime)s %(levelname)s %(name)s: %(message)s"      # sis serve's (coordinator/cli.py)


@pytest.fixture
def log():
    """What the root logger's handler would write, as ``sis serve`` sets it up."""
    buf = io.StringIO()
    handler = logging.StreamHandler(buf)
    handler.setFormatter(logging.Formatter(FORMAT))
    root = logging.getLogger()
    loggers = [logging.getLogger(n) for n in ("tornado.general", "tornado.access")]
    levels = [lg.level for lg in loggers]
    root.addHandler(handler)
    for lg in loggers:
        lg.setLevel(logging.INFO)
    try:
        yield buf
    finally:
        root.removeHandler(handler)
        for lg, level in zip(loggers, levels):
            lg.setLevel(level)


def raw(port: int, data: bytes) -> bytes:
    with socket.create_connection(("127.0.0.1", port), timeout=10) as s:
        s.sendall(data)
        out = b""
        while True:
            try:
                got = s.recv(65536)
            except (ConnectionResetError, socket.timeout):
                return out
            if not got:
                return out
            out += got


async def send(port: int, data: bytes) -> bytes:
    return await asyncio.get_running_loop().run_in_executor(None, raw, port, data)


def fresh_bounds() -> None:
    """The filters' windows start empty (another test's lines do not count here)."""
    from coordinator.faces import logflood
    for name in logflood.CUT_AT:
        for f in logging.getLogger(name).filters:
            if isinstance(f, logflood.LogBound):
                f.reset()


async def test_a_500_kB_invalid_header_name_adds_a_short_line_and_ordinary_lines_are_unchanged(
        sqlite_url, upstream, log):
    c = await start_coordinator(make_settings(sqlite_url, upstream))
    port = int(c.base_url.rsplit(":", 1)[1])
    fresh_bounds()
    try:
        name = bytes(0x80 + (j % 100) for j in range(500_000))          # not a token: an invalid name
        before = len(log.getvalue())
        answered = await send(port, b"GET / HTTP/1.1\r\nHost: x\r\n" + name + b": v\r\n\r\n")
        assert answered.startswith(b"HTTP/1.1 400")
        await asyncio.sleep(0.2)
        added = log.getvalue()[before:]
        assert len(added) < 2000, f"the log grew by {len(added)} characters"
        line = next(line for line in added.splitlines() if "Malformed HTTP message" in line)
        assert re.search(r"INFO tornado\.general: Malformed HTTP message from 127\.0\.0\.1: "
                         r"Invalid header name '\\x80\\x81", line)
        assert re.search(r"\[cut: \d{6,} characters in all\]$", line)

        before = len(log.getvalue())
        assert (await send(port, b"GET /openapi.json HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
                ).startswith(b"HTTP/1.1 200")
        assert (await send(port, b"GET / HTTP/1.1\r\nHost: x\r\nBad Name: v\r\n\r\n")).startswith(b"HTTP/1.1 400")
        await asyncio.sleep(0.2)
        lines = log.getvalue()[before:].splitlines()
        assert any(re.fullmatch(r"\S+ \S+ INFO tornado\.access: 200 GET /openapi\.json \(127\.0\.0\.1\) \d+\.\d\dms [0-9a-f]{16}", x)
                   for x in lines), lines
        assert any(x.endswith("INFO tornado.general: Malformed HTTP message from 127.0.0.1: "
                              "Invalid header name 'Bad Name'") for x in lines), lines
    finally:
        await stop_coordinator(c)


async def test_an_over_long_uri_adds_a_short_access_line_and_a_long_one_served_is_logged_whole(
        sqlite_url, upstream, log):
    c = await start_coordinator(make_settings(sqlite_url, upstream))
    port = int(c.base_url.rsplit(":", 1)[1])
    fresh_bounds()
    try:
        before = len(log.getvalue())
        answered = await send(port, b"GET /healthz?x=" + b"a" * 900_000 + b" HTTP/1.1\r\nHost: x\r\n"
                                    b"Connection: close\r\n\r\n")
        assert answered.startswith(b"HTTP/1.1 414")
        await asyncio.sleep(0.2)
        added = log.getvalue()[before:]
        assert len(added) < 9000, f"the log grew by {len(added)} characters"   # the longest URI served, 8 KB
        line = next(x for x in added.splitlines() if "tornado.access" in x)
        assert "414 GET /healthz?x=aaaa" in line and re.search(r"\[cut: \d{6,} characters in all\]$", line)

        uri = "/openapi.json?x=" + "b" * 8000                # under MAX_URI: served, and logged whole
        before = len(log.getvalue())
        assert (await send(port, f"GET {uri} HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n".encode())
                ).startswith(b"HTTP/1.1 200")
        await asyncio.sleep(0.2)
        assert f"INFO tornado.access: 200 GET {uri} (127.0.0.1) " in log.getvalue()[before:]
    finally:
        await stop_coordinator(c)


async def test_repeated_malformed_heads_are_logged_a_few_times_a_minute_then_counted(
        sqlite_url, upstream, log, monkeypatch):
    from coordinator.faces import logflood

    c = await start_coordinator(make_settings(sqlite_url, upstream))
    port = int(c.base_url.rsplit(":", 1)[1])
    fresh_bounds()
    bound = next(f for f in logging.getLogger("tornado.general").filters if isinstance(f, logflood.LogBound))
    monkeypatch.setattr(bound, "window_s", 1.5)             # a minute, shortened for the test
    try:
        before = len(log.getvalue())
        for _ in range(bound.per_window + 15):
            assert (await send(port, b"GET / HTTP/1.1\r\nHost: x\r\nBad\x80: v\r\n\r\n")).startswith(b"HTTP/1.1 400")
        written = [x for x in log.getvalue()[before:].splitlines() if "Malformed HTTP message" in x]
        assert len(written) == bound.per_window
        await asyncio.sleep(2)                               # the window ends: one line counts the rest
        summary = [x for x in log.getvalue()[before:].splitlines() if "not logged" in x]
        assert len(summary) == 1 and "15 more lines like 'Malformed HTTP message from %s: %s'" in summary[0], summary
        assert (await send(port, b"GET / HTTP/1.1\r\nHost: x\r\nBad\x80: v\r\n\r\n")).startswith(b"HTTP/1.1 400")
        written = [x for x in log.getvalue()[before:].splitlines() if "Malformed HTTP message from 127" in x]
        assert len(written) == bound.per_window + 1            # a new window lets lines through again
    finally:
        await stop_coordinator(c)
