"""The agent's protocol calls share kept-alive connections, and a stale one costs nothing."""
from __future__ import annotations

import asyncio
import socket

import tornado.web
from tornado.httpserver import HTTPServer
from tornado.netutil import bind_sockets

from node_agent.protocol import Client


class _Beat(tornado.web.RequestHandler):
    def post(self, lease: str) -> None:
        self.finish({"action": "continue", "lease": lease})


class _CountingServer(HTTPServer):
    """Counts the TCP connections its clients open."""

    connections = 0

    def handle_stream(self, stream, address) -> None:
        type(self).connections += 1
        super().handle_stream(stream, address)


def _listen(**settings) -> tuple[_CountingServer, str]:
    _CountingServer.connections = 0
    server = _CountingServer(tornado.web.Application([(r"/node/v1/leases/([^/]+)/heartbeat", _Beat)]), **settings)
    [sock] = bind_sockets(0, "127.0.0.1", family=socket.AF_INET)
    server.add_sockets([sock])
    return server, f"http://127.0.0.1:{sock.getsockname()[1]}"


async def test_calls_in_turn_share_one_connection():
    server, url = _listen()
    try:
        async with Client(url, token="t") as client:
            for i in range(5):
                assert (await client.heartbeat(f"ls_{i}"))["lease"] == f"ls_{i}"
        assert _CountingServer.connections == 1
    finally:
        server.stop()
        await server.close_all_connections()


async def test_a_connection_the_server_closed_while_idle_is_not_an_error():
    server, url = _listen(idle_connection_timeout=0.2)
    try:
        async with Client(url, token="t") as client:
            await client.heartbeat("ls_1")
            await asyncio.sleep(0.5)          # the server closes the idle connection
            assert (await client.heartbeat("ls_2"))["lease"] == "ls_2"
        assert _CountingServer.connections == 2
    finally:
        server.stop()
        await server.close_all_connections()
