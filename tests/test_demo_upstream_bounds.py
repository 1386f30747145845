"""The fake upstream (``sis serve --demo``'s, and the tests') keeps what it was asked within
bounds: an audit's demo server kept every Overpass body and a count per distinct path (91k
requests: 2,303 bodies, 1.79 MB, and 1,199 paths, growing). It keeps the counts of the paths
asked most recently and the last bodies of the paths last posted to, which is what tests read."""
from __future__ import annotations

import asyncio

from tornado.httpclient import AsyncHTTPClient, HTTPRequest

from coordinator.demo import upstream as fake_upstream
from coordinator.demo.upstream import FakeUpstream

FIRMS = "/firms/DEMO_MAP_KEY/VIIRS_SNPP_NRT/{w},-7,{e},-6.8/2"
OVERPASS = "/overpass/api/interpreter"


async def _ask(base: str, requests: list[tuple[str, bytes | None]]) -> list[int]:
    client = AsyncHTTPClient(force_instance=True, max_clients=16)
    try:
        rs = await asyncio.gather(*(client.fetch(HTTPRequest(base + path, method="GET" if body is None else "POST",
                                                             body=body), raise_error=False)
                                    for path, body in requests))
        return [r.code for r in rs]
    finally:
        client.close()


async def test_many_requests_leave_the_records_bounded(monkeypatch):
    monkeypatch.setattr(fake_upstream, "KEPT_PATHS", 20, raising=False)
    monkeypatch.setattr(fake_upstream, "KEPT_BODY_PATHS", 3, raising=False)
    monkeypatch.setattr(fake_upstream, "KEPT_BODIES", 5, raising=False)
    up = await FakeUpstream().load_recorded().start()
    try:
        areas = [FIRMS.format(w=100 + i / 100, e=100.1 + i / 100) for i in range(60)]
        codes = await _ask(up.base_url, [(p, None) for p in areas])
        assert set(codes) == {200}                               # any area answers the recorded sample
        bodies = [(OVERPASS, f"data=q{i}".encode()) for i in range(40)]
        bodies += [(f"/elsewhere/{i}", b"x") for i in range(10)]
        await _ask(up.base_url, bodies)
        for i in range(3):
            await _ask(up.base_url, [(OVERPASS, f"data=last{i}".encode())])
        assert len(up.hits) <= 20 and len(up.bodies) <= 3
        assert all(len(kept) <= 5 for kept in up.bodies.values())
        # what tests read is still there: the newest body of a path last posted to, its count
        # (every request of a path kept), and the paths asked most recently
        assert [b.decode() for b in up.bodies[OVERPASS]][-3:] == ["data=last0", "data=last1", "data=last2"]
        assert up.hits[OVERPASS] == 43
        assert areas[0] not in up.hits
        await _ask(up.base_url, [(areas[-1], None)])
        assert list(up.hits)[-1] == areas[-1]
    finally:
        await up.stop()


def test_the_default_bounds_hold_over_many_paths():
    up = FakeUpstream()
    for i in range(5000):
        up.count(f"/firms/k/VIIRS_SNPP_NRT/{i},0,{i + 1},1/2")
        up.keep_body(f"/post/{i % 40}", b"x" * 100)
    up.count("/gdacs/events")
    up.count("/gdacs/events")
    assert len(up.hits) == fake_upstream.KEPT_PATHS and up.hits["/gdacs/events"] == 2
    assert len(up.bodies) == fake_upstream.KEPT_BODY_PATHS
    assert sum(len(v) for v in up.bodies.values()) <= fake_upstream.KEPT_BODY_PATHS * fake_upstream.KEPT_BODIES
