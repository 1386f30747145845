"""Slow clients cannot lock others out (coordinator/faces/server.py), against a real coordinator
on loopback.

The audit's case: the connection cap full of connections that each send one header byte every
few seconds, from a few addresses each under the per-address cap; ``/healthz`` from another
client answered 1 probe in 76 over 75 s, since the server refused every newcomer at the cap and
a head had the idle timeout (60 s) to arrive. Now a head has a timeout of its own
(``SIS_HEAD_TIMEOUT_S``), a newcomer at the cap closes the connection that has waited longest
on its head (else the longest idle keep-alive one) and is served, and only a server busy
answering every connection refuses; an IPv6 /64 counts as one address, as in the rate limits."""
from __future__ import annotations

import asyncio
import socket
import time

import tornado.web
from tornado.iostream import IOStream

from tests.support import make_settings, start_coordinator, stop_coordinator

REQUEST = b"GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n"
CLOSING = b"GET /healthz HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n"


def port_of(c) -> int:  # noqa: ANN001
    return int(c.base_url.rsplit(":", 1)[1])


def slow_head(port: int) -> socket.socket:
    """A connection that starts a head and never ends it."""
    s = socket.create_connection(("127.0.0.1", port))
    s.sendall(b"GET /healthz HTTP/1.1\r\nHost: x\r\n")
    s.setblocking(False)
    return s


def sent(port: int, data: bytes) -> socket.socket:
    s = socket.create_connection(("127.0.0.1", port))
    s.sendall(data)
    s.setblocking(False)
    return s


async def answer(s: socket.socket, within_s: float = 5) -> bytes:
    """One whole answer (its head and its Content-Length of body), or what came before the close."""
    loop = asyncio.get_running_loop()
    data = b""
    deadline = time.monotonic() + within_s
    while True:
        head, sep, body = data.partition(b"\r\n\r\n")
        if sep:
            length = next((int(line.split(b":", 1)[1]) for line in head.split(b"\r\n")
                           if line.lower().startswith(b"content-length:")), 0)
            if len(body) >= length:
                return data
        try:
            got = await asyncio.wait_for(loop.sock_recv(s, 65536), max(0.01, deadline - time.monotonic()))
        except (asyncio.TimeoutError, ConnectionResetError):
            return data
        if not got:
            return data
        data += got


async def closed_by_server(s: socket.socket, within_s: float) -> bool:
    """Whether the server closes ``s`` within ``within_s`` (a read ends with b"" or a reset)."""
    loop = asyncio.get_running_loop()
    try:
        while True:
            if not await asyncio.wait_for(loop.sock_recv(s, 65536), within_s):
                return True
    except ConnectionResetError:
        return True
    except asyncio.TimeoutError:
        return False


def still_open(s: socket.socket) -> bool:
    try:
        return s.recv(1) != b""           # data would be a surprise, but not a close
    except BlockingIOError:
        return True
    except OSError:
        return False


async def test_at_the_cap_of_slow_heads_a_newcomer_is_served_and_the_longest_waiting_head_closed(
        sqlite_url, upstream):
    c = await start_coordinator(make_settings(sqlite_url, upstream, max_connections=8))
    port = port_of(c)
    slow = []
    try:
        for _ in range(8):
            slow.append(slow_head(port))
            await asyncio.sleep(0.02)
        await asyncio.sleep(0.2)
        for i in range(3):                  # sustained: every newcomer gets a place
            t0 = time.monotonic()
            r = await c.get("/healthz", timeout=3)
            assert r.status == 200 and time.monotonic() - t0 < 2
            assert await closed_by_server(slow[i], 1)          # the oldest slow head made room
            slow.append(slow_head(port))                       # and another slow one fills the cap again
            await asyncio.sleep(0.1)
        assert all(still_open(s) for s in slow[3:])
        assert c.server.evicted == 3 and c.server.refused == 0
    finally:
        for s in slow:
            s.close()
        await stop_coordinator(c)


async def test_a_head_has_its_own_timeout_and_an_idle_keep_alive_connection_the_idle_one(sqlite_url, upstream):
    c = await start_coordinator(make_settings(sqlite_url, upstream, head_timeout_s=1, idle_timeout_s=10))
    port = port_of(c)
    kept = sent(port, REQUEST)
    try:
        assert (await answer(kept)).startswith(b"HTTP/1.1 200")
        t0 = time.monotonic()
        slow, dribbling = slow_head(port), slow_head(port)
        closed = asyncio.ensure_future(closed_by_server(slow, 3))
        for _ in range(5):                                   # a byte now and then does not extend it
            await asyncio.sleep(0.3)
            try:
                dribbling.send(b"X")
            except OSError:
                break
        assert await closed and await closed_by_server(dribbling, 2)
        assert 0.7 < time.monotonic() - t0 < 3
        await asyncio.sleep(2.5 - (time.monotonic() - t0))
        assert still_open(kept)                              # idle past the head timeout, not closed
        kept.sendall(b"GET /healthz HTTP/1.1\r\nHo")         # its next head begins, and stalls
        t1 = time.monotonic()
        assert await closed_by_server(kept, 3)
        assert time.monotonic() - t1 < 2.5                   # the head timeout, not the 10 s idle one
        assert (await c.get("/healthz")).status == 200
        assert c.server.head_timeouts == 3
    finally:
        kept.close()
        await stop_coordinator(c)


async def test_at_the_cap_heads_go_first_then_idle_connections_and_busy_ones_never(sqlite_url, upstream):
    release = asyncio.Event()

    class Hold(tornado.web.RequestHandler):
        async def get(self) -> None:
            await release.wait()
            self.write("done")

    c = await start_coordinator(make_settings(sqlite_url, upstream, max_connections=4))
    c.server.request_callback.add_handlers(r".*", [(r"/test-hold", Hold)])
    port = port_of(c)
    hold = b"GET /test-hold HTTP/1.1\r\nHost: x\r\n\r\n"
    socks = []
    try:
        idle = sent(port, REQUEST)
        socks.append(idle)
        assert (await answer(idle)).startswith(b"HTTP/1.1 200")
        await asyncio.sleep(0.05)
        head = slow_head(port)                       # newer than the idle one, but a head goes first
        socks += [head, sent(port, hold), sent(port, hold)]
        await asyncio.sleep(0.3)

        a = sent(port, CLOSING)
        socks.append(a)
        assert (await answer(a, 3)).startswith(b"HTTP/1.1 200")
        assert await closed_by_server(head, 1) and still_open(idle)

        socks.append(sent(port, hold))               # at the cap again: idle, three busy
        await asyncio.sleep(0.3)
        b = sent(port, CLOSING)
        socks.append(b)
        assert (await answer(b, 3)).startswith(b"HTTP/1.1 200")
        assert await closed_by_server(idle, 1)

        socks.append(sent(port, hold))               # four busy answering: no one to close
        await asyncio.sleep(0.3)
        refused_before = c.server.refused
        late = sent(port, CLOSING)
        socks.append(late)
        assert await answer(late, 2) == b"" and c.server.refused == refused_before + 1
        assert c.server.evicted == 2
    finally:
        release.set()
        for s in socks:
            s.close()
        await stop_coordinator(c)


async def test_the_per_address_cap_counts_an_ipv6_64_as_one_address(sqlite_url, upstream):
    c = await start_coordinator(make_settings(sqlite_url, upstream, max_connections_per_ip=2))
    server = c.server
    pairs = [socket.socketpair() for _ in range(4)]
    addresses = ["2001:db8::1", "2001:db8::2:3", "2001:db8::ffff", "2001:db8:0:1::1"]
    try:
        for (ours, _), addr in zip(pairs, addresses):
            server.handle_stream(IOStream(ours), (addr, 40000, 0, 0))
        await asyncio.sleep(0.1)
        theirs = [t for _, t in pairs]
        for t in theirs:
            t.setblocking(False)
        assert still_open(theirs[0]) and still_open(theirs[1])
        assert await closed_by_server(theirs[2], 1)           # the third of 2001:db8::/64
        assert still_open(theirs[3])                          # another /64
        assert server._per_ip["2001:db8::/64"] == 2 and server._per_ip["2001:db8:0:1::/64"] == 1
    finally:
        for a, b in pairs:
            a.close()
            b.close()
        await stop_coordinator(c)


async def test_at_the_cap_of_slow_bodies_a_newcomer_is_served_and_the_longest_sending_closed(sqlite_url, upstream):
    c = await start_coordinator(make_settings(sqlite_url, upstream, max_connections=3))
    port = port_of(c)
    body = (b"POST /earth/sweep-request?lat=1&lon=1 HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
            b"Content-Length: 5000\r\n\r\n{")                  # a body begun and never ended
    slow = []
    try:
        for _ in range(3):
            slow.append(sent(port, body))
            await asyncio.sleep(0.05)
        await asyncio.sleep(0.3)
        r = await c.get("/healthz", timeout=3)
        assert r.status == 200
        assert await closed_by_server(slow[0], 1) and still_open(slow[1]) and still_open(slow[2])
        assert c.server.evicted == 1 and c.server.refused == 0
    finally:
        for s in slow:
            s.close()
        await stop_coordinator(c)


async def test_an_answer_its_client_never_reads_is_dropped_after_the_idle_timeout():
    """A client asking for a large answer and never reading it held its connection for ever: it
    was being answered, so never closed to make room, and Tornado has no write timeout. Four of
    them held a cap of four, and every newcomer was refused. An answer whose writing moved no
    byte for the idle timeout is dropped now."""
    from types import SimpleNamespace

    import tornado.netutil

    from coordinator.faces.server import make_server

    class Big(tornado.web.RequestHandler):
        def get(self) -> None:
            self.write(b"x" * (16 << 20))

    class Health(tornado.web.RequestHandler):
        def get(self) -> None:
            self.write("ok")

    settings = SimpleNamespace(idle_timeout_s=2.0, head_timeout_s=1.0, max_connections=4, max_connections_per_ip=0,
                               trusted_proxies="")
    server = make_server(tornado.web.Application([(r"/big", Big), (r"/healthz", Health)]), settings)
    socks = tornado.netutil.bind_sockets(0, "127.0.0.1")
    server.add_sockets(socks)
    port = socks[0].getsockname()[1]
    readers = []
    try:
        for _ in range(4):                              # a large answer each, never read
            s = socket.socket()
            s.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
            s.connect(("127.0.0.1", port))
            s.sendall(b"GET /big HTTP/1.1\r\nHost: x\r\n\r\n")
            s.setblocking(False)
            readers.append(s)
        await asyncio.sleep(0.5)
        assert len(server._connections) == 4
        await asyncio.sleep(3.5)                        # the idle timeout and a sweep past it
        assert server.write_timeouts == 4 and not server._connections
        probe = sent(port, CLOSING)
        assert (await answer(probe)).startswith(b"HTTP/1.1 200"), "a newcomer was refused"
        probe.close()
    finally:
        for s in readers:
            s.close()
        server.stop()


async def test_the_stream_counters_the_timeouts_read_exist_and_their_absence_is_said(caplog):
    """The write timeout and a later head's timeout read two counters Tornado keeps private. On
    the Tornado installed they exist and move as the sweeps expect; a release without them
    would take the two timeouts away, so the server says so at its first connection."""
    from coordinator.faces.server import BoundedHTTPServer, missing_internals

    left, right = socket.socketpair()
    stream, peer = IOStream(left), IOStream(right)
    try:
        assert missing_internals(stream) == []
        before = stream._total_write_done_index
        await stream.write(b"x" * 1000)
        assert stream._total_write_done_index == before + 1000
        await peer.read_bytes(1000)
        await stream.write(b"GET /")                     # half a head, waiting in the peer's buffer
        await asyncio.sleep(0.05)
        rest = peer.read_until_close()                   # starts reading: the bytes go into the buffer
        await asyncio.sleep(0.05)
        assert peer._read_buffer_size > 0
        stream.close()
        assert await rest == b"GET /"
    finally:
        stream.close()
        peer.close()
    server = BoundedHTTPServer(tornado.web.Application([]))
    with caplog.at_level("WARNING", logger="sis.server"):
        server._warn_missing_internals(object())
    assert "_total_write_done_index or _read_buffer_size" in caplog.text
    assert missing_internals(object()) == ["_total_write_done_index", "_read_buffer_size"]
