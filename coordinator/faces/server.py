"""The HTTP server in front of the application: Tornado's, bounded.

Tornado's defaults let a connection take an hour to send its request head or body, keep an
idle keep-alive connection as long, and accept connections until the process runs out of
descriptors. Measured (2026-11-29): twenty thousand connections from one machine, each
sending a byte every 20 s, took every descriptor; ``/healthz`` stopped answering anyone, and
the accept loop, failing with EMFILE, logged 422 MB of tracebacks in a minute. Here:

- a request head, a request body and an idle keep-alive connection each get
  ``idle_timeout_s`` (60 s by default), then the connection is closed;
- at most ``max_connections`` connections are open at once (default: the descriptor limit
  less a reserve for the database pool, upstream requests and files), so accepting never
  meets EMFILE; one over it is closed as soon as it is accepted;
- at most ``max_connections_per_ip`` from one address, except from the trusted proxies
  (``SIS_TRUSTED_PROXIES``), whose connections carry everyone's.

A connection refused for a cap is closed without an answer (nothing has been read); the
refusals are logged once a minute, with their count.
"""
from __future__ import annotations

import logging
import resource
import time
from collections import Counter
from typing import Any

from tornado.httpserver import HTTPServer

from coordinator.core.access.clientip import ClientIp

log = logging.getLogger("sis.server")

FD_RESERVE = 256          # descriptors kept for the database pool, upstream requests, files and logs
MAX_CONNECTIONS_CEILING = 10_000
LOG_EVERY_S = 60.0


def default_max_connections() -> int:
    soft, _ = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft == resource.RLIM_INFINITY:
        return MAX_CONNECTIONS_CEILING
    return max(64, min(MAX_CONNECTIONS_CEILING, soft - FD_RESERVE))


class BoundedHTTPServer(HTTPServer):
    def initialize(self, *args: Any, max_connections: int = 0, max_connections_per_ip: int = 0,
                   exempt: str = "", **kwargs: Any) -> None:
        super().initialize(*args, **kwargs)
        self.max_connections = max_connections or default_max_connections()
        self.max_connections_per_ip = max_connections_per_ip
        self._proxies = ClientIp(exempt)
        self._per_ip: Counter[str] = Counter()
        self.refused = 0
        self._refused_since_log = 0
        self._logged_at = -LOG_EVERY_S

    def handle_stream(self, stream: Any, address: Any) -> None:
        ip = address[0] if isinstance(address, tuple) and address else ""
        over = (len(self._connections) >= self.max_connections
                or (self.max_connections_per_ip and self._per_ip[ip] >= self.max_connections_per_ip
                    and not self._proxies.is_proxy(ip)))
        if over:
            stream.close()
            self._refuse(ip)
            return
        self._per_ip[ip] += 1
        stream.sis_ip = ip
        super().handle_stream(stream, address)

    def on_close(self, server_conn: Any) -> None:
        ip = getattr(getattr(server_conn, "stream", None), "sis_ip", None)
        if ip is not None:
            self._per_ip[ip] -= 1
            if self._per_ip[ip] <= 0:
                del self._per_ip[ip]
        super().on_close(server_conn)

    def _refuse(self, ip: str) -> None:
        self.refused += 1
        self._refused_since_log += 1
        now = time.monotonic()
        if now - self._logged_at >= LOG_EVERY_S:
            log.warning("connections refused at the caps (%d open of %d, %d per address): %d since the last "
                        "report, the latest from %s", len(self._connections), self.max_connections,
                        self.max_connections_per_ip, self._refused_since_log, ip or "?")
            self._logged_at, self._refused_since_log = now, 0


def make_server(app: Any, settings: Any) -> BoundedHTTPServer:
    """The server ``sis serve`` runs, and the tests: bounded by the settings (docs/settings.md)."""
    return BoundedHTTPServer(app, xheaders=False, idle_connection_timeout=settings.idle_timeout_s,
                             body_timeout=settings.idle_timeout_s, max_connections=settings.max_connections,
                             max_connections_per_ip=settings.max_connections_per_ip,
                             exempt=settings.trusted_proxies)
