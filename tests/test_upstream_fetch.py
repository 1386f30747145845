"""An upstream that vanishes mid-answer or never answers is unreachable (SourceError), for
the hazard sources and the photo provider alike, never an unhandled error."""
from __future__ import annotations

import asyncio

import pytest

from coordinator.sources.base import SourceError, fetch
from coordinator.sources.panoramax import PhotoProvider


async def _server(handle) -> tuple[asyncio.AbstractServer, str]:
    server = await asyncio.start_server(handle, "127.0.0.1", 0)
    return server, f"http://127.0.0.1:{server.sockets[0].getsockname()[1]}"


async def _close_after_request(reader, writer):
    await reader.readuntil(b"\r\n\r\n")
    writer.close()


async def _never_answer(reader, writer):
    await reader.readuntil(b"\r\n\r\n")
    await asyncio.sleep(30)


@pytest.mark.parametrize("handle", [_close_after_request, _never_answer], ids=["closed", "timeout"])
async def test_fetch_turns_a_vanished_upstream_into_source_error(handle):
    server, url = await _server(handle)
    try:
        with pytest.raises(SourceError, match="unreachable"):
            await fetch(url + "/x", timeout_s=0.5)
    finally:
        server.close()


async def test_photo_search_against_a_vanished_provider_raises_source_error():
    server, url = await _server(_close_after_request)
    try:
        with pytest.raises(SourceError, match="unreachable"):
            await PhotoProvider.at(url + "/api", timeout_s=2).search((2.0, 48.0, 2.01, 48.01), 10)
    finally:
        server.close()
