"""One upstream that hangs does not hold up the others (the upstream-starvation audit: with
Overpass answering after its timeout, 20 clients asking /earth/infrastructure took all ten
of Tornado's shared fetch slots, and every FIRMS read failed "Timeout in request queue").
Fetches to upstreams run on a client of their own with room for many, and each source has
at most ``max_in_flight`` of them at once (Overpass: 2); a fetch waiting for its source's
slot waits within its own timeout and, given none, fails saying so. Real loopback servers:
one that never answers (it counts the requests it holds), and the fake upstream."""
from __future__ import annotations

import asyncio
import time

import pytest
from tornado.httpclient import AsyncHTTPClient

from coordinator.features.overpass import Overpass
from coordinator.panels import fires
from coordinator.sources.base import Query, Source, SourceConfig, fetch
from coordinator.sources.usgs import UsgsSource
from tests.support import make_settings, start_coordinator, stop_coordinator

IN_FLIGHT = "fetches to this source were already in flight"


class Hanging:
    """A loopback upstream that reads each request and never answers; it counts the requests
    it holds now and the most it held at once."""

    def __init__(self, delay_s: float | None = None) -> None:
        self.delay_s = delay_s              # None: never answers; else answers 200 after it
        self.open = 0
        self.most = 0
        self.seen = 0

    async def start(self) -> "Hanging":
        self.server = await asyncio.start_server(self._handle, "127.0.0.1", 0)
        self.url = f"http://127.0.0.1:{self.server.sockets[0].getsockname()[1]}"
        return self

    async def _handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            head = await reader.readuntil(b"\r\n\r\n")
            length = next((int(line.split(b":", 1)[1]) for line in head.split(b"\r\n")
                           if line.lower().startswith(b"content-length:")), 0)
            if length:
                await reader.readexactly(length)
        except (asyncio.IncompleteReadError, ConnectionError):
            writer.close()
            return
        self.seen += 1
        self.open += 1
        self.most = max(self.most, self.open)
        try:
            if self.delay_s is None:
                await reader.read()                  # until the client gives up and closes
            else:
                await asyncio.sleep(self.delay_s)
                writer.write(b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: 2\r\n"
                             b"Connection: close\r\n\r\n{}")
                await writer.drain()
        except ConnectionError:
            pass
        finally:
            self.open -= 1
            writer.close()

    async def holding(self, n: int, within_s: float = 3.0) -> None:
        end = time.monotonic() + within_s
        while self.open < n:
            assert time.monotonic() < end, f"the upstream holds {self.open} requests, not {n}"
            await asyncio.sleep(0.02)

    async def stop(self) -> None:
        self.server.close()


class Plain(Source[dict]):
    """A source read through its own helpers (``get_json``), as most adapters are."""

    name = "test_plain"
    license = "CC0-1.0"

    async def fetch(self, query: Query) -> list[dict]:
        return [await self.get_json("/x")]


class OwnRead(Source[dict]):
    """A source with a ``read`` of its own that calls the module's ``fetch`` with itself (as
    Overpass does)."""

    name = "test_own_read"
    license = "CC0-1.0"
    max_in_flight = 3

    async def fetch(self, query: Query) -> list[dict]:   # pragma: no cover - read is its own
        raise NotImplementedError

    async def read(self, query: Query | None = None):  # noqa: ANN201
        from coordinator.sources.base import SourceError
        try:
            code, _ = await fetch(self.url("/x"), self.timeout_s, source=self)
        except SourceError as exc:
            return self._failed(str(exc))
        return self._failed(f"HTTP {code}")


@pytest.fixture
async def hanging():
    up = await Hanging().start()
    yield up
    await up.stop()


def usgs_at(upstream) -> UsgsSource:  # noqa: ANN001
    return UsgsSource.at(upstream.base_url + "/usgs", timeout_s=5)


async def timed(coro) -> tuple[float, object]:  # noqa: ANN001
    t = time.monotonic()
    out = await coro
    return time.monotonic() - t, out


async def test_a_source_hanging_with_24_reads_in_flight_does_not_delay_another(hanging, upstream):
    slow = Plain.at(hanging.url, timeout_s=3)
    t0 = time.monotonic()
    reads = [asyncio.create_task(slow.read()) for _ in range(24)]
    await hanging.holding(8)
    took, quick = await timed(usgs_at(upstream).read())
    assert quick.report.ok and quick.records, quick.report
    assert took < 1.0, f"another source's read took {took:.2f} s while one hung"
    done = await asyncio.gather(*reads)
    assert time.monotonic() - t0 < 3 + 1.5, "the hanging source's reads outlived its timeout"
    errors = [r.report.error or "" for r in done]
    assert not any(r.report.ok for r in done)
    assert hanging.most == Plain.max_in_flight == 8            # never more of its fetches at once
    waited = [e for e in errors if IN_FLIGHT in e]
    # Each read not crowded out was sent: a read that began waiting late (a loaded machine starts
    # the 24 over a while) may get a freed slot with enough of its timeout left to be sent.
    assert hanging.seen + len(waited) == 24 and len(waited) >= 8, (hanging.seen, errors)
    assert waited[0].startswith("not asked: 8 fetches to this source were already in flight") and "3 s" in waited[0]
    assert all("unreachable" in e for e in errors if IN_FLIGHT not in e)


async def test_overpass_is_sent_two_at_once_and_its_others_say_so(hanging, upstream):
    slow = Overpass.at(hanging.url, timeout_s=2)
    t0 = time.monotonic()
    reads = [asyncio.create_task(slow.read(Query(bbox=(10 + i / 100, 50, 10.01 + i / 100, 50.01))))
             for i in range(20)]
    await hanging.holding(2)
    took, quick = await timed(usgs_at(upstream).read())
    assert quick.report.ok and took < 1.0, (took, quick.report)
    done = await asyncio.gather(*reads)
    assert time.monotonic() - t0 < 2 + 1.5
    assert hanging.most == 2                             # never more than two at once
    errors = [r.report.error for r in done]
    crowded = sum(IN_FLIGHT in e for e in errors)        # never sent (a late waiter may still be: above)
    assert hanging.seen + crowded == 20 and crowded >= 10, (hanging.seen, errors)
    assert all(r.report.name == "overpass" and not r.report.ok for r in done)
    assert Overpass.max_in_flight == 2


async def test_a_read_of_its_own_calling_the_module_fetch_takes_its_sources_slots(hanging):
    slow = OwnRead.at(hanging.url, timeout_s=1.5)
    done = await asyncio.gather(*(slow.read() for _ in range(7)))
    assert hanging.most == 3
    assert sum(IN_FLIGHT in r.report.error for r in done) == 4


async def test_a_fetch_given_a_slot_late_has_what_is_left_of_its_timeout():
    """One at a time, 0.6 s each, 1 s timeout: the first answers, the second waits 0.6 s for
    the slot and times out 0.4 s later (at 1 s, not 1.6), the third is never sent."""
    up = await Hanging(delay_s=0.6).start()
    try:
        src = Plain.at(up.url, timeout_s=1.0)
        src.max_in_flight = 1
        t0 = time.monotonic()

        async def one() -> tuple[float, object]:
            r = await src.read()
            return time.monotonic() - t0, r

        outs = await asyncio.gather(one(), one(), one())
        (t1, r1), (t2, r2), (t3, r3) = sorted(outs, key=lambda o: (not o[1].report.ok, o[0]))
        assert r1.report.ok and t1 < 0.95
        assert not r2.report.ok and not r3.report.ok
        assert max(t2, t3) < 1.45, (t2, t3)                  # none waited past its own timeout
        assert up.seen == 2 and up.most == 1
        assert any(IN_FLIGHT in r.report.error for r in (r2, r3))
    finally:
        await up.stop()


async def test_slots_free_again_reads_answer():
    """Slots are given back whatever became of the fetch: after a burst of timeouts, the source
    answers again, and a source given more than its cap of reads that answer in time answers them all."""
    up = await Hanging(delay_s=0.1).start()
    try:
        src = Plain.at(up.url, timeout_s=5)
        done = await asyncio.gather(*(src.read() for _ in range(20)))
        assert all(r.report.ok for r in done) and up.most <= 8 and up.seen == 20
        slots = src._slots()
        assert (slots.in_flight, slots.waiting, slots.free._value) == (0, 0, 8)
    finally:
        await up.stop()


async def test_a_cancelled_read_keeps_its_slot_while_its_request_runs(hanging):
    """A read cancelled (its client gone) leaves its request running until its timeout: the slot
    stays taken until then, so cancelled reads cannot send a hanging upstream more than its cap."""
    src = Plain.at(hanging.url, timeout_s=1.2)
    src.max_in_flight = 2
    first = [asyncio.create_task(src.read()) for _ in range(2)]
    await hanging.holding(2)
    for t in first:
        t.cancel()
    await asyncio.gather(*first, return_exceptions=True)
    later = [asyncio.create_task(src.read()) for _ in range(4)]
    await asyncio.sleep(0.5)
    assert hanging.seen == 2 and src._slots().in_flight == 2       # the cancelled two still hold them
    done = await asyncio.gather(*later)
    assert hanging.most == 2 and not any(r.report.ok for r in done)
    await asyncio.sleep(0.2)
    slots = src._slots()
    assert (slots.in_flight, slots.waiting, slots.free._value) == (0, 0, 2)


async def test_an_unconfigured_fetch_is_not_limited_by_tornados_shared_clients_ten(hanging):
    """A fetch outside any source's read (a photo's bytes) runs on the upstream client too: twenty
    hanging ones do not queue a twenty-first behind them."""
    fast = await Hanging(delay_s=0).start()
    try:
        hung = [asyncio.create_task(fetch(hanging.url + f"/{i}", 3)) for i in range(20)]
        await hanging.holding(20)
        took, (code, _) = await timed(fetch(fast.url + "/x", 3))
        assert code == 200 and took < 1.0
        for t in hung:
            t.cancel()
        await asyncio.gather(*hung, return_exceptions=True)
    finally:
        await fast.stop()


async def test_the_shared_tornado_client_is_left_as_it_was(hanging):
    """Upstream fetches do not configure or fill Tornado's shared client: a test's own requests
    on it are not queued behind the upstream's."""
    before = AsyncHTTPClient._save_configuration()
    reads = [asyncio.create_task(Plain.at(hanging.url, timeout_s=2).read()) for _ in range(12)]
    await hanging.holding(12)
    assert AsyncHTTPClient._save_configuration() == before
    assert not AsyncHTTPClient().active and not AsyncHTTPClient().queue
    await asyncio.gather(*reads)


async def test_fires_answer_at_once_while_twenty_clients_wait_on_a_hanging_overpass(sqlite_url, upstream):
    """The audit through the coordinator: twenty /earth/infrastructure requests for distinct boxes,
    Overpass answering after its timeout, and a fires read (FIRMS) meanwhile answers in well
    under a second, healthy."""
    upstream.set_json("/overpass/api/interpreter", {"elements": []}, delay_s=6)
    c = await start_coordinator(make_settings(sqlite_url, upstream, sources={
        "firms": {"api_key": "DEMO_MAP_KEY"}, "overpass": {"timeout_s": 2.5}}))
    client = AsyncHTTPClient(force_instance=True, max_clients=64)
    try:
        slow = [asyncio.ensure_future(client.fetch(
            f"{c.base_url}/earth/infrastructure?bbox={10 + i / 50:.3f},50,{10.01 + i / 50:.3f},50.01",
            raise_error=False, request_timeout=20)) for i in range(20)]
        await asyncio.sleep(0.8)
        t = time.monotonic()
        r = await client.fetch(f"{c.base_url}/public/v1/anon/fires?bbox=113.75,-2.5,114,-2.25",
                               raise_error=False, request_timeout=20)
        took = time.monotonic() - t
        body = __import__("json").loads(r.body)
        assert r.code == 200 and body["health"]["sources"][0]["ok"] is True, body.get("health")
        assert took < 1.0, f"fires took {took:.2f} s behind a hanging Overpass"
        answers = await asyncio.gather(*slow)
        assert all(a.code in (200, 202) for a in answers)
    finally:
        client.close()
        await stop_coordinator(c)


def test_every_source_declares_a_cap_of_at_least_one():
    from coordinator.sources.registry import load_adapters
    caps = {name: cls.max_in_flight for name, cls in load_adapters().items()}
    assert all(isinstance(n, int) and n >= 1 for n in caps.values()), caps
    assert caps["overpass"] == 2 and caps["firms"] == Source.max_in_flight


def test_source_config_untouched():
    """The cap is the adapter's declaration, not a setting: a source's settings are as before."""
    assert "max_in_flight" not in Plain.setting_keys()
    assert Plain(SourceConfig("http://x", 1)).max_in_flight == 8
    assert fires.Firms.max_in_flight == 8
