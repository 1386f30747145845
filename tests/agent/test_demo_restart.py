"""`sis serve --demo` restarted: the jobs it queued before keep photos a node can fetch."""
from __future__ import annotations

import logging
import socket

from sqlalchemy import select
from tornado.httpclient import AsyncHTTPClient

from coordinator.core.db.models import SweepJob
from coordinator.demo.photos import DEMO_CENTRE, demo_photos_port, start_demo_photos
from tests.support import free_port, make_settings, start_coordinator

from .support import stop_sweep_coordinator


def _port_pair() -> int:
    """A port whose next one is free too (the coordinator's, and its demo photo provider's)."""
    for _ in range(50):
        port = free_port()
        with socket.socket() as s:
            try:
                s.bind(("127.0.0.1", port + 1))
            except OSError:
                continue
        return port
    raise RuntimeError("no two free ports in a row")


async def _photo_status(url: str) -> int:
    """The HTTP status of a GET of ``url``; 0 when nothing answers there."""
    try:
        r = await AsyncHTTPClient().fetch(url, raise_error=False, connect_timeout=2, request_timeout=5)
    except OSError:
        return 0
    return r.code


async def test_a_restarted_demo_serves_the_photos_of_the_jobs_it_queued_before(sqlite_url):
    """The provider took a free port at each start, and the jobs keep their photos' URLs: after a
    restart they pointed at the old process, and a node skipped every photo of every job."""
    port = _port_pair()
    settings = make_settings(sqlite_url, None, demo=True, port=port)
    c = await start_coordinator(settings)
    try:
        r = await c.post("/earth/sweep-request", {"lat": DEMO_CENTRE[0], "lon": DEMO_CENTRE[1], "radius": 300})
        assert r.status == 200 and r.json()["queued"], r.body
        async with c.services.db.read() as s:
            url = (await s.execute(select(SweepJob.photos))).scalars().first()[0]["url"]
        assert url.startswith(f"http://127.0.0.1:{port + 1}/api/pictures/")
        assert await _photo_status(url) == 200
    finally:
        await stop_sweep_coordinator(c)
    assert await _photo_status(url) == 0               # gone with its process
    again = await start_coordinator(settings)
    try:
        assert await _photo_status(url) == 200
    finally:
        await stop_sweep_coordinator(again)


async def test_a_taken_demo_photo_port_falls_back_to_a_free_one_and_says_so(caplog):
    caplog.set_level(logging.WARNING, logger="sis.demo")
    port = _port_pair()
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", port + 1))
        taken.listen()
        fake = await start_demo_photos(port)
        try:
            assert fake.port not in (0, port + 1)
            assert await _photo_status(f"{fake.api_url}/pictures/{fake.photos[0].id}/hd.jpg") == 200
        finally:
            await fake.stop()
    assert f"demo photo provider: port {port + 1} cannot be used" in caplog.text
    assert demo_photos_port(0) == demo_photos_port(65535) == 0 and demo_photos_port(8080) == 8081
