"""The server's bounds on connections (coordinator/faces/server.py), measured against a real
coordinator on loopback: a connection that sends nothing, or a head it never ends, is closed
after the idle timeout; one address past its cap is closed as it is accepted, and served again
once one of its connections ends; a trusted proxy's address is not capped."""
from __future__ import annotations

import asyncio
import socket
import time

from tests.support import make_settings, start_coordinator, stop_coordinator


def held(port: int) -> socket.socket:
    s = socket.create_connection(("127.0.0.1", port))
    s.sendall(b"GET /healthz HTTP/1.1\r\nHost: x\r\n")           # a head that never ends
    return s


async def closed_by_server(s: socket.socket, within_s: float) -> bool:
    """Whether the server closes ``s`` within ``within_s`` (reads end with b"")."""
    s.setblocking(False)
    loop = asyncio.get_running_loop()
    try:
        return await asyncio.wait_for(loop.sock_recv(s, 1024), within_s) == b""
    except (asyncio.TimeoutError, ConnectionResetError):
        return False


async def test_a_silent_or_unfinished_connection_is_closed_after_the_idle_timeout(sqlite_url, upstream):
    c = await start_coordinator(make_settings(sqlite_url, upstream, idle_timeout_s=1))
    port = int(c.base_url.rsplit(":", 1)[1])
    try:
        silent, slow = socket.create_connection(("127.0.0.1", port)), held(port)
        t0 = time.monotonic()
        assert await closed_by_server(silent, 5) and await closed_by_server(slow, 5)
        assert time.monotonic() - t0 < 4
        assert (await c.get("/healthz")).status == 200
    finally:
        await stop_coordinator(c)


async def test_one_address_past_its_cap_is_refused_and_served_again_when_one_closes(sqlite_url, upstream):
    c = await start_coordinator(make_settings(sqlite_url, upstream, max_connections_per_ip=4))
    port = int(c.base_url.rsplit(":", 1)[1])
    socks = [held(port) for _ in range(4)]
    try:
        await asyncio.sleep(0.2)
        extra = socket.create_connection(("127.0.0.1", port))
        assert await closed_by_server(extra, 2)                       # the fifth, closed unanswered
        server = c.server
        assert server.refused >= 1 and server._per_ip["127.0.0.1"] == 4
        socks.pop().close()
        await asyncio.sleep(0.2)
        assert (await c.get("/healthz")).status == 200              # a place again
    finally:
        for s in socks:
            s.close()
        await stop_coordinator(c)


async def test_a_trusted_proxy_is_not_capped_per_address(sqlite_url, upstream):
    c = await start_coordinator(make_settings(sqlite_url, upstream, max_connections_per_ip=2,
                                              trusted_proxies="127.0.0.1/32"))
    port = int(c.base_url.rsplit(":", 1)[1])
    socks = [held(port) for _ in range(4)]
    try:
        await asyncio.sleep(0.2)
        assert (await c.get("/healthz")).status == 200 and c.server.refused == 0
    finally:
        for s in socks:
            s.close()
        await stop_coordinator(c)
