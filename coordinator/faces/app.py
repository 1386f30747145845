"""The Tornado application: routes from the registry plus a few operator routes."""
from __future__ import annotations

import time
import weakref

from typing import Any

import tornado.web
from tornado.log import access_log

from coordinator.core.access.credentials import redacted
from coordinator.core.times import iso_epoch
from coordinator.faces.mcp import mcp_routes, openapi_paths as mcp_openapi_paths
from coordinator.faces.node_protocol import NODE_PATHS, node_routes
from coordinator.faces.openapi import openapi_document
from coordinator.faces.review_api import REVIEW_PATHS, review_routes
from coordinator.faces.http import HEADER_READ_CEILING, BaseHandler, NotFoundHandler
from coordinator.faces.rest import tool_routes
from coordinator.services import Services

OPERATOR_PATHS = {
    "/": {"get": {"operationId": "index", "summary": "Where the API's documents are", "tags": ["operator"],
                  "responses": {"200": {"description": "Links to the OpenAPI document, the tool contracts, MCP, "
                                                       "the review page and the probe"}}}},
    "/healthz": {"get": {"operationId": "healthz", "summary": "Liveness and readiness for operators",
                         "tags": ["operator"], "responses": {"200": {"description": "Up"},
                                                             "503": {"description": "Database unreachable, its last write failed "
                                                                            "(disk full, read-only), or its SQLite file "
                                                                            "gone or replaced"}}}},
    "/openapi.json": {"get": {"operationId": "openapi", "summary": "This document", "tags": ["operator"],
                              "responses": {"200": {"description": "OpenAPI 3.1 document"}}}},
}


def tool_counts(registry) -> dict:  # noqa: ANN001
    """How many tools each face serves, so that the probe's count can be checked against
    what a client sees (an MCP client lists fewer tools than REST routes exist: the
    credential tools have no MCP face, and the credentialed family has no MCP endpoint)."""
    from coordinator.core.families import FAMILIES, MCP_FAMILIES

    return {"declared": len(registry),
            "rest": {name: len(registry.in_family(name)) for name in FAMILIES},
            "mcp": {fam.name: sum(1 for t in registry.in_family(fam.name) if t.mcp) for fam in MCP_FAMILIES}}


class IndexHandler(BaseHandler):
    """``GET /``: a client that starts at the root is told where the documents are, rather
    than given a bare 404."""

    readable_anywhere = True

    def get(self) -> None:
        from coordinator import __version__
        from coordinator.core.families import MCP_FAMILIES

        self.send_json({
            "service": "Spatial Intelligence Service", "version": __version__,
            "openapi": "/openapi.json",
            "toolContracts": {f.name: f.contract_path for f in MCP_FAMILIES},
            "mcp": {f.name: f.mcp_path for f in MCP_FAMILIES},
            "families": {"earth": "/earth/...", "legacy": "/legacy/...", "public": "/public/v1/{credential}/..."},
            "review": "/review/", "healthz": "/healthz",
        }, cache_control="public, max-age=300")


class HealthzHandler(BaseHandler):
    """The operator's probe: 503 when the database does not answer a read, when its last write
    failed for the host (a full disk, a read-only file: said until a write succeeds: while
    such a failure is on record the probe tries a write that changes nothing, at most every
    ``db.WRITE_RETRY_S``), or when the SQLite file it opened is gone or replaced."""

    async def get(self) -> None:
        svc: Services = self.application.services  # type: ignore[attr-defined]
        from sqlalchemy import text
        database = "ok"
        try:
            async with svc.db.read() as s:
                await s.execute(text("SELECT 1"))
        except Exception:  # report, do not raise: this is the operator's probe
            database = "unreachable"
        extra = {}
        if database == "ok":
            await svc.db.retry_write()
        failure, gone = svc.db.write_failure, svc.db.file_problem()
        if gone is not None:
            database = gone
        elif database == "ok" and failure is not None:
            database = f"cannot write: {failure.words}"
            extra = {"databaseWriteFailedSince": iso_epoch(failure.since), "databaseWriteFailedLast": iso_epoch(failure.last)}
        ok = database == "ok"
        # Said, not failed on: with Redis down each process counts the limits itself (a client gets the
        # limit from each), which serves everyone; a monitor sees it here.
        limiter = svc.access.limiter
        redis = await limiter.state()
        if redis == "unreachable":
            extra["redisUnreachableSince"] = iso_epoch(limiter.down_since or time.time())
        body = {"status": "ok" if ok else "degraded", "database": database, "redis": redis, **extra,
                "poller": "running" if svc.poller.running else "stopped", "demo": svc.settings.demo,
                "tools": tool_counts(svc.registry)}
        self.send_json(body, 200 if ok else 503)


class OpenApiHandler(BaseHandler):
    readable_anywhere = True

    def get(self) -> None:
        svc: Services = self.application.services  # type: ignore[attr-defined]
        self.send_json(openapi_document(svc.registry, {**OPERATOR_PATHS, **mcp_openapi_paths(), **NODE_PATHS,
                                                       **REVIEW_PATHS}), cache_control="public, max-age=300")


def accepts_gzip(header: str) -> bool:
    """Whether an ``Accept-Encoding`` value takes gzip: named with a weight over 0, or ``*`` so
    (RFC 9110 section 12.5.3). Tornado looks for the word: ``gzip;q=0``, a client's "never
    gzip", was answered gzipped."""
    weights: dict[str, float] = {}
    for part in header.lower().split(","):
        coding, _, params = part.strip().partition(";")
        q = 1.0
        for param in params.split(";"):
            name, _, value = param.strip().partition("=")
            if name == "q":
                try:
                    q = float(value)
                except ValueError:
                    q = 0.0
        if coding:
            weights[coding.strip()] = q
    return weights.get("gzip", weights.get("x-gzip", weights.get("*", 0.0))) > 0


class GZip(tornado.web.GZipContentEncoding):
    """Tornado's gzip of answers, taken only where the client's ``Accept-Encoding`` weighs it over 0."""

    def __init__(self, request: Any) -> None:
        super().__init__(request)
        self._gzipping = accepts_gzip(request.headers.get("Accept-Encoding", ""))


class Application(tornado.web.Application):
    def __init__(self, services: Services, **settings: Any) -> None:
        self.services = services
        # The handlers answering now (``BaseHandler.prepare`` to ``on_finish``), for a stop that cuts
        # off those still running at its deadline (``server.cut_off``); weak: a handler whose client
        # left is never finished.
        self.running: weakref.WeakSet = weakref.WeakSet()
        routes: list[Any] = [
            (r"/", IndexHandler),
            (r"/healthz", HealthzHandler),
            (r"/openapi.json", OpenApiHandler),
            *mcp_routes(),
            *tool_routes(services.registry),
            *node_routes(),
            *review_routes(),
        ]
        super().__init__(routes, default_handler_class=NotFoundHandler, transforms=[GZip], **settings)


    def log_request(self, handler: tornado.web.RequestHandler) -> None:
        """Tornado's access log line, with the credential in the path or ``?key=`` cut to its
        prefix (``credentials.redacted``); the client as the limits count it (behind a trusted
        proxy, the address it forwarded, "via" the proxy's: the line named the proxy alone, so an
        operator could not tell who was throttled), and the request's id, which its answer
        carries (``X-Request-Id``), so that a client's 4xx can be found in the log. A ``/healthz``
        that answers well is logged at DEBUG."""
        status, req = handler.get_status(), handler.request
        write = access_log.info if status < 400 else access_log.warning if status < 500 else access_log.error
        if status < 400 and req.path == "/healthz":
            write = access_log.debug     # a balancer's probe every few seconds: tens of thousands of lines a day
        client = self.services.access.client_ip.resolve(req.remote_ip, req.headers)
        seen = client if client == req.remote_ip else f"{client} via {req.remote_ip}"
        gone = " (the client left before the answer)" if getattr(handler, "client_gone", False) else ""
        write("%d %s %s (%s) %.2fms %s%s", status, req.method, redacted(req.uri or ""), seen,
              1000.0 * req.request_time(), getattr(handler, "request_id", None) or "-", gone)

    def start_request(self, server_conn: Any, request_conn: Any) -> Any:
        """Read request heads up to ``HEADER_READ_CEILING`` (Tornado's 64 KB default closes
        the connection, unanswered, on a long query string), so that the handlers answer
        an over-long URI 414 and over-large headers 431 in the one error shape; the
        ceiling is the same for every connection, however the server was made."""
        params = getattr(request_conn, "params", None)
        if params is not None and (params.max_header_size or 0) < HEADER_READ_CEILING:
            params.max_header_size = HEADER_READ_CEILING
        return super().start_request(server_conn, request_conn)


def make_app(services: Services) -> Application:
    return Application(services)
