"""A coordinator that vanishes mid-request is unreachable, never a fault of the agent."""
from __future__ import annotations

import asyncio

import pytest

from node_agent.protocol import Client, Unreachable


async def _server(handle) -> tuple[asyncio.AbstractServer, str]:
    server = await asyncio.start_server(handle, "127.0.0.1", 0)
    port = server.sockets[0].getsockname()[1]
    return server, f"http://127.0.0.1:{port}"


async def test_connection_closed_mid_request_is_unreachable():
    async def close_after_request(reader, writer):
        await reader.readuntil(b"\r\n\r\n")    # the request arrived; the coordinator goes down
        writer.close()

    server, url = await _server(close_after_request)
    try:
        with pytest.raises(Unreachable, match="unreachable"):
            async with Client(url, token="t", timeout_s=5) as client:
                await client.heartbeat("ls_1")
    finally:
        server.close()


async def test_no_answer_within_the_timeout_is_unreachable():
    async def never_answer(reader, writer):
        await reader.readuntil(b"\r\n\r\n")
        await asyncio.sleep(30)

    server, url = await _server(never_answer)
    try:
        with pytest.raises(Unreachable, match="unreachable"):
            async with Client(url, token="t", timeout_s=0.5) as client:
                await client.heartbeat("ls_1")
    finally:
        server.close()
