"""The HTTP server in front of the application: Tornado's, bounded.

Tornado's defaults let a connection take an hour to send its request head or body, keep an
idle keep-alive connection as long, and accept connections until the process runs out of
descriptors. Measured (2026-11-29): twenty thousand connections from one machine, each
sending a byte every 20 s, took every descriptor; ``/healthz`` stopped answering anyone, and
the accept loop, failing with EMFILE, logged 422 MB of tracebacks in a minute. Then
(2026-12-02, the resource audit): with the cap full of 768 connections from a few addresses,
each under the per-address cap and sending one header byte every 5 s, ``/healthz`` answered
1 probe in 76 over 75 s, since every newcomer was refused at the cap and a head had the idle
timeout to arrive. Here:

- a request head gets ``head_timeout_s`` (10 s by default) from its first byte (for the
  first request on a connection, from the connection's opening; for a later one, from when
  the sweep below first sees its bytes, within a second), then the connection is closed; a
  request body, and an idle keep-alive connection waiting for its next request,
  get ``idle_timeout_s`` (60 s);
- at most ``max_connections`` connections are open at once (default: the descriptor limit
  less a reserve for the database pool, upstream requests and files), so accepting never
  meets EMFILE. A newcomer at that cap is accepted by closing another: the one that has
  waited longest on its head, else the longest idle keep-alive one, else the one longest
  sending its body; only when every connection is being answered is the newcomer refused.
  So slow clients cannot hold the cap against others: each newcomer displaces the slowest;
- at most ``max_connections_per_ip`` from one address, an IPv6 /64 counting as one (as the
  rate limits count it, ``ip_bucket``), except from the trusted proxies
  (``SIS_TRUSTED_PROXIES``), whose connections carry everyone's.

A connection refused for a cap, closed to make room or past its head timeout is closed
without an answer; refusals and closures at the cap are logged once a minute, with counts.

What a connection is doing comes from the request delegate each request gets
(``start_request``, wrapped in ``_Watch``): Tornado's connection loop calls ``start_request``
before it reads each head, then ``headers_received`` once the head is in and ``finish`` once
the body is. Tornado's own ``header_timeout`` runs from the start of that read, so it covers
the idle wait of a keep-alive connection and its next head together: it is left at the idle
timeout, and the head timeout is kept here, by a sweep every second or less.
"""
from __future__ import annotations

import asyncio
import logging
import resource
import time
from collections import Counter
from typing import Any

from tornado.httpserver import HTTPServer
from tornado.httputil import HTTPMessageDelegate
from tornado.ioloop import PeriodicCallback

from coordinator.core.access.clientip import ClientIp
from coordinator.core.access.credentials import redacted
from coordinator.core.access.policy import ip_bucket
from coordinator.faces import logflood

log = logging.getLogger("sis.server")

FD_RESERVE = 256          # descriptors kept for the database pool, upstream requests, files and logs
MAX_CONNECTIONS_CEILING = 10_000
LOG_EVERY_S = 60.0
SWEEP_EVERY_S = 1.0       # at most; a quarter of the head timeout where that is shorter
DRAIN_POLL_S = 0.05       # how often a stop looks whether the requests in flight have finished
CUT_OFF_GRACE_S = 1.0     # how long requests cancelled at the stop's deadline get to write their answer

# What a connection is doing. The first three may be closed to make room at the cap, in this order.
HEAD = "head"             # sending a request head (for a first request, from its opening)
IDLE = "idle"             # a keep-alive connection between requests, silent
BODY = "body"             # head in, sending the request body
BUSY = "busy"             # being answered: never closed to make room
CLOSABLE = (HEAD, IDLE, BODY)


def default_max_connections() -> int:
    soft, _ = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft == resource.RLIM_INFINITY:
        return MAX_CONNECTIONS_CEILING
    return max(64, min(MAX_CONNECTIONS_CEILING, soft - FD_RESERVE))


class _Conn:
    """One open connection: its stream, what it is doing, since when, how many requests it began,
    and how far its answer's writing had got when the sweep last looked (``_stalled``)."""
    __slots__ = ("stream", "state", "since", "requests", "closing", "written", "written_at", "request", "start_line")

    def __init__(self, stream: Any) -> None:
        self.stream, self.state, self.since, self.requests, self.closing = stream, BUSY, 0.0, 0, False
        self.written, self.written_at = -1, 0.0
        self.request: Any = None            # the request's HTTP1Connection (``close_after_answer``)
        self.start_line: Any = None         # the request's first line, for the log of a stop (``running``)


def close_after_answer(conn: _Conn) -> None:
    """Has the connection closed once the answer being written on it is: Tornado decides it
    from the request's head, read before the stop, and says ``Connection: close`` in the answer
    when it is set. The flag is private (Tornado has no public way); without it the connection
    is closed when its next request begins (``start_request``), the client told nothing."""
    request = conn.request
    if request is not None and hasattr(request, "_disconnect_on_finish"):
        request._disconnect_on_finish = True


def _stalled(conn: _Conn, now: float, limit: float) -> bool:
    """Whether the answer being written on ``conn`` has moved no byte for ``limit`` seconds: a
    client that asked for a large answer and never reads it. Tornado has no write timeout, and
    such a connection is being answered, so never closed to make room: enough of them held the
    cap for ever. IOStream's count of bytes written is private; without it nothing is closed."""
    stream = conn.stream
    done = getattr(stream, "_total_write_done_index", None)
    if done is None or not stream.writing():
        conn.written = -1
        return False
    if done != conn.written:
        conn.written, conn.written_at = done, now
        return False
    return now - conn.written_at >= limit


class _Watch(HTTPMessageDelegate):
    """The application's delegate for one request, telling the server when its head and body are in."""

    def __init__(self, delegate: HTTPMessageDelegate, server: "BoundedHTTPServer", conn: _Conn) -> None:
        self.delegate, self.server, self.conn = delegate, server, conn

    def headers_received(self, start_line: Any, headers: Any) -> Any:
        # A request with a body is still sending until finish(); one without is being answered now.
        has_body = headers.get("Content-Length", "0").strip() not in ("", "0") or "Transfer-Encoding" in headers
        self.server._enter(self.conn, BODY if has_body else BUSY)
        self.conn.start_line = start_line
        return self.delegate.headers_received(start_line, headers)

    def data_received(self, chunk: bytes) -> Any:
        return self.delegate.data_received(chunk)

    def finish(self) -> None:
        self.server._enter(self.conn, BUSY)
        self.delegate.finish()

    def on_connection_close(self) -> None:
        self.delegate.on_connection_close()


# IOStream's private counters the two sweeps above read; Tornado documents neither.
STREAM_INTERNALS = ("_total_write_done_index", "_read_buffer_size")


def missing_internals(stream: Any) -> list[str]:
    """Which of ``STREAM_INTERNALS`` this Tornado's streams lack: a release that renamed one
    would silently take away the write timeout or the later heads' timeout, so the server says
    so once, at its first connection (``BoundedHTTPServer.handle_stream``)."""
    return [name for name in STREAM_INTERNALS if not hasattr(stream, name)]


def _head_begun(stream: Any) -> bool:
    """Whether bytes of the next head wait in the stream's buffer (read, not yet a whole head).
    IOStream has no public accessor for it; without the attribute, a keep-alive connection's
    later heads have the idle timeout only (a first head's timeout does not need it)."""
    return getattr(stream, "_read_buffer_size", 0) > 0


class BoundedHTTPServer(HTTPServer):
    def initialize(self, *args: Any, max_connections: int = 0, max_connections_per_ip: int = 0,
                   exempt: str = "", head_timeout: float | None = None, write_timeout: float | None = None,
                   **kwargs: Any) -> None:
        super().initialize(*args, **kwargs)
        self.max_connections = max_connections or default_max_connections()
        self.max_connections_per_ip = max_connections_per_ip
        # None: Tornado's header timeout alone (the idle one), as before this bound.
        self.head_timeout = head_timeout
        self.write_timeout = write_timeout      # an answer whose writing moved no byte for this long is dropped
        self._proxies = ClientIp(exempt)
        self._per_ip: Counter[str] = Counter()
        # Per closable state, its connections in the order they entered it, so the first is the
        # one that has been in it longest (a dict keeps insertion order; each entry is stamped
        # with the monotonic clock when it is made, so that order is also the order of ``since``).
        self._waiting: dict[str, dict[_Conn, None]] = {state: {} for state in (*CLOSABLE, BUSY)}
        self._closing = 0          # connections closed here whose on_close has not come yet
        self._sweeper: PeriodicCallback | None = None
        self.refused = self.evicted = self.head_timeouts = self.write_timeouts = 0
        self._counts_logged = (0, 0, 0)   # refused, evicted, head_timeouts at the last report
        self._logged_at = -LOG_EVERY_S
        self._internals_checked = False
        self.stopping = False      # begin_stop was called: no request is begun any more

    # -- accepting ------------------------------------------------------------------------

    def handle_stream(self, stream: Any, address: Any) -> None:
        ip = address[0] if isinstance(address, tuple) and address else ""
        bucket = ip_bucket(ip) if ip else ip
        if (self.max_connections_per_ip and self._per_ip[bucket] >= self.max_connections_per_ip
                and not self._proxies.is_proxy(ip)):
            self._refuse(stream, ip)
            return
        if len(self._connections) - self._closing >= self.max_connections:
            victim = self._victim()
            if victim is None:                    # every connection is being answered
                self._refuse(stream, ip)
                return
            self._close(victim)
            self.evicted += 1
            self._report(ip)
        if not self._internals_checked:
            self._warn_missing_internals(stream)
        self._per_ip[bucket] += 1
        stream.sis_ip = bucket
        conn = stream.sis_conn = _Conn(stream)
        self._enter(conn, HEAD)                  # its first head's time runs from now
        self._start_sweeping()
        super().handle_stream(stream, address)

    def _warn_missing_internals(self, stream: Any) -> None:
        self._internals_checked = True
        missing = missing_internals(stream)
        if missing:
            import tornado
            log.warning("Tornado %s's IOStream has no %s: answers a client never reads are not dropped at "
                        "the write timeout, and a keep-alive connection's later heads get the idle timeout "
                        "only; run the Tornado release this coordinator was tested with (pyproject.toml)",
                        tornado.version, " or ".join(missing))

    def start_request(self, server_conn: Any, request_conn: Any) -> Any:
        """Called by the connection's loop before it reads each request's head."""
        delegate = super().start_request(server_conn, request_conn)
        conn = getattr(getattr(server_conn, "stream", None), "sis_conn", None)
        if conn is None:
            return delegate
        if conn.requests:                        # a keep-alive connection: idle until its next head begins
            self._enter(conn, IDLE)
            if self.stopping:                    # its answer was the last: no next request is read
                self._close(conn)
        conn.requests += 1
        conn.request = request_conn
        return _Watch(delegate, self, conn)

    def on_close(self, server_conn: Any) -> None:
        stream = getattr(server_conn, "stream", None)
        conn = getattr(stream, "sis_conn", None)
        if conn is not None:
            self._leave(conn)
            if conn.closing:
                self._closing -= 1
        self._uncount(stream)
        super().on_close(server_conn)

    def _uncount(self, stream: Any) -> None:
        """Gives back its place under the per-address cap, once: when it is closed here, or at
        Tornado's on_close. (A client whose connection was closed here may connect again before
        on_close comes: it must not meet its own closed connections in the count.)"""
        ip = getattr(stream, "sis_ip", None)
        if ip is not None:
            stream.sis_ip = None
            self._per_ip[ip] -= 1
            if self._per_ip[ip] <= 0:
                del self._per_ip[ip]

    def stop(self) -> None:
        super().stop()
        if self._sweeper is not None:
            self._sweeper.stop()
            self._sweeper = None

    # -- stopping: the requests in flight are let finish ------------------------------------

    def in_flight(self) -> int:
        """The requests begun and not yet answered: sending their body, or being answered
        (until their answer is written and the connection closed or waiting for the next)."""
        return len(self._waiting[BODY]) + len(self._waiting[BUSY])

    def begin_stop(self) -> None:
        """Stops listening and begins no request any more: the connections with none in flight
        (idle keep-alive ones, those still sending a head) are closed now, those being answered
        once their answer is written."""
        self.stopping = True
        self.stop()
        for state in (HEAD, IDLE):
            for conn in list(self._waiting[state]):
                self._close(conn)
        for conn in (*self._waiting[BODY], *self._waiting[BUSY]):
            close_after_answer(conn)

    async def drain(self, timeout: float, hurry: asyncio.Event | None = None) -> int:
        """Waits until no request is in flight, ``timeout`` seconds, or ``hurry`` set; how many
        still are."""
        deadline = time.monotonic() + timeout
        while self.in_flight() and time.monotonic() < deadline and not (hurry is not None and hurry.is_set()):
            await asyncio.sleep(DRAIN_POLL_S)
        return self.in_flight()

    def running(self) -> list[str]:
        """The method and path of each request in flight (not its query, and the path's credential
        cut as the access log cuts it: both may hold a key)."""
        return [f"{getattr(conn.start_line, 'method', '?')} "
                f"{redacted(str(getattr(conn.start_line, 'path', '?')).split('?')[0])}"
                for state in (BODY, BUSY) for conn in self._waiting[state]]

    async def cut_off(self, grace: float = CUT_OFF_GRACE_S) -> None:
        """Ends what is left once the stop's wait is over: the handlers of the requests still in
        flight are cancelled (Tornado then answers each whose connection is still open, through
        ``BaseHandler.write_error``) and given ``grace`` seconds to write that answer; then every
        connection is closed. A handler that has answered and goes on working is not cancelled
        here (its task ends with the event loop, as before)."""
        requests = {conn.request for state in (BODY, BUSY) for conn in self._waiting[state]
                    if conn.request is not None}
        handlers = [h.task for h in list(getattr(self.request_callback, "running", ()))
                    if h.request.connection in requests and getattr(h, "task", None) is not None]
        for task in handlers:
            task.cancel("the service is stopping")
        if handlers:
            await asyncio.wait(handlers, timeout=grace)
            await self.drain(grace)
        for conn in [*self._waiting[BODY], *self._waiting[BUSY]]:
            self._close(conn)
        try:
            await asyncio.wait_for(self.close_all_connections(), grace)
        except asyncio.TimeoutError:
            log.warning("%d connections were still open %.0f s after the stop's wait", len(self._connections), grace)

    # -- what each connection is doing -------------------------------------------------------

    def _enter(self, conn: _Conn, state: str) -> None:
        if conn.closing:
            return
        self._leave(conn)
        conn.state, conn.since = state, time.monotonic()
        if state in self._waiting:
            self._waiting[state][conn] = None

    def _leave(self, conn: _Conn) -> None:
        self._waiting.get(conn.state, {}).pop(conn, None)

    def _victim(self) -> _Conn | None:
        """The connection to close for a newcomer: the longest on its head, else the longest idle,
        else the longest sending its body."""
        for state in CLOSABLE:
            if self._waiting[state]:
                return next(iter(self._waiting[state]))
        return None

    def _close(self, conn: _Conn) -> None:
        """Closes ``conn`` now (its descriptor with it); Tornado's on_close follows on a later turn,
        so until then it is counted apart, not as open."""
        self._leave(conn)
        conn.closing = True
        self._closing += 1
        self._uncount(conn.stream)
        conn.stream.close()

    # -- the head timeout ----------------------------------------------------------------------

    def _start_sweeping(self) -> None:
        if self._sweeper is None and (self.head_timeout or self.write_timeout):
            every = min(SWEEP_EVERY_S, self.head_timeout / 4) if self.head_timeout else SWEEP_EVERY_S
            self._sweeper = PeriodicCallback(self._sweep, 1000 * every)
            self._sweeper.start()

    def _sweep(self) -> None:
        """Closes the connections whose head is past its time, starts the head timer of the
        keep-alive connections whose next head has begun arriving, and closes those whose
        answer has not moved for ``write_timeout`` (a client that never reads it)."""
        now = time.monotonic()
        heads = self._waiting[HEAD] if self.head_timeout else {}
        while heads:                             # oldest first: stop at the first still in time
            conn = next(iter(heads))
            if now - conn.since < self.head_timeout:
                break
            self._close(conn)
            self.head_timeouts += 1
        begun = [conn for conn in self._waiting[IDLE] if _head_begun(conn.stream)]
        for conn in begun:
            self._enter(conn, HEAD)
        if self.write_timeout:
            for conn in [c for c in self._waiting[BUSY] if _stalled(c, now, self.write_timeout)]:
                self._close(conn)
                self.write_timeouts += 1

    # -- refusals and the report -------------------------------------------------------------------

    def _refuse(self, stream: Any, ip: str) -> None:
        stream.close()
        self.refused += 1
        self._report(ip)

    def _report(self, ip: str) -> None:
        """At most one line a minute, with the counts since the last one."""
        now = time.monotonic()
        if now - self._logged_at < LOG_EVERY_S:
            return
        counts = (self.refused, self.evicted, self.head_timeouts + self.write_timeouts)
        refused, evicted, timed_out = (a - b for a, b in zip(counts, self._counts_logged))
        log.warning("connections at the caps (%d open of %d, %d per address): since the last report %d refused, "
                    "%d closed to make room (the longest on their heads first, then idle keep-alive ones, then "
                    "slow bodies), %d closed at the head or write timeout; the latest from %s",
                    len(self._connections) - self._closing, self.max_connections, self.max_connections_per_ip,
                    refused, evicted, timed_out, ip or "?")
        self._logged_at, self._counts_logged = now, counts


def make_server(app: Any, settings: Any) -> BoundedHTTPServer:
    """The server ``sis serve`` runs, and the tests: bounded by the settings (docs/settings.md).
    Tornado's log lines are bounded here too (``logflood``): this is where the coordinator's
    Tornado server is made, whoever set up the logging."""
    logflood.install()
    return BoundedHTTPServer(app, xheaders=False, idle_connection_timeout=settings.idle_timeout_s,
                             body_timeout=settings.idle_timeout_s, head_timeout=settings.head_timeout_s,
                             write_timeout=settings.idle_timeout_s,
                             max_connections=settings.max_connections,
                             max_connections_per_ip=settings.max_connections_per_ip,
                             exempt=settings.trusted_proxies)
