"""``POST /mcp`` and ``POST /legacy/mcp``: streamable HTTP, stateless, plain JSON.

One POST carries one JSON-RPC message and gets one answer: a JSON-RPC
response as ``application/json``, or ``202`` with no body for a notification.
No session id is ever issued and no SSE stream is opened (every tool answers
with one result), so ``GET`` is ``405``.

Both protocol eras are served, routed by the ``MCP-Protocol-Version`` header
as the SDK routes them (see ``protocol``):

- 2026-07-28: ``server/discover``, ``tools/list``, ``tools/call``; every
  request carries its ``_meta`` envelope and the ``Mcp-Method``/``Mcp-Name``
  headers, and results carry ``resultType`` (list results also ``ttlMs`` and
  ``cacheScope``) and the ``serverInfo`` stamp in ``_meta``.
- 2025-11-25 and earlier: ``initialize``, ``ping``, ``tools/list``,
  ``tools/call``; notifications (``notifications/initialized``) are accepted.
  A JSON-RPC error to a request whose id was read is HTTP 200 in this era
  (``protocol.http_status``).

A request carrying an ``Origin`` header that is neither the service's own nor
in ``SIS_MCP_ALLOWED_ORIGINS`` is refused 403 before its body is read (the
transport's MUST against DNS rebinding and cross-site posts); a request without
one, as every client but a browser sends it, is served.
"""
from __future__ import annotations

import logging
from functools import lru_cache
from typing import Any
from urllib.parse import urlsplit

import tornado.web

from coordinator import __version__
from coordinator.core.access.credentials import origin_host
from coordinator.core.errors import BadParameter, PayloadTooLarge, ServiceError
from coordinator.core.pipeline import RequestFacts
from coordinator.faces.http import MAX_JSON_BODY, BaseHandler, JsonRefused, dumps, parse_json
from coordinator.faces.mcp import protocol
from coordinator.faces.mcp import tools as mcp_tools
from coordinator.faces.mcp.protocol import (HANDSHAKE_VERSIONS, INVALID_REQUEST, LATEST_HANDSHAKE, METHOD_NOT_FOUND, PARSE_ERROR, PROTOCOL_VERSION_HEADER, ROUTING_HEADERS, SERVER_INFO_META, HEADER_MISMATCH,
                       INVALID_PARAMS, Message, RpcError, check_modern_envelope, era_of, http_status,
                       parse_message, unsupported_version)

log = logging.getLogger("sis.mcp")

SERVER_NAME = "spatial-intelligence-service"
LIST_TTL_MS = 300_000   # the tool list is fixed for a process's life; a client may reuse it this long
CAPABILITIES = {"tools": {"listChanged": False}}
MODERN_METHODS = ("server/discover", "tools/list", "tools/call")
HANDSHAKE_METHODS = ("initialize", "ping", "tools/list", "tools/call")
INSTRUCTIONS = {
    "earth": ("Geospatial and hazard tools of the Spatial Intelligence Service (direct family). Every result "
              "carries caveats[] first and, where a source was read, health{sourcesQueried, sourcesUsable}: "
              "a result with sourcesUsable < sourcesQueried is degraded and incomplete; retry later. Confidence "
              "'unknown' and a null score mean the service declined to guess: never read them as zero."),
    "legacy": ("Legacy family of the Spatial Intelligence Service: the same tools as the direct family where "
               "they exist, with hazard event bboxes taken from the upstream's extent. Every result carries "
               "caveats[] first and health{}; a degraded result is incomplete; unknown is not zero."),
}


def server_info() -> dict[str, Any]:
    return {"name": SERVER_NAME, "title": "Spatial Intelligence Service", "version": __version__}


DEFAULT_PORTS = {"http": "80", "https": "443"}


def _origin_of(url: str) -> str | None:
    """``scheme://host[:port]`` of a URL or an Origin value, lower-cased, the scheme's default port
    left out; None when it is no http(s) origin (``null``, ``file://``, garbage)."""
    try:
        parts = urlsplit(url.strip())
        port = parts.port
    except ValueError:
        return None
    if parts.scheme.lower() not in DEFAULT_PORTS or not parts.hostname:
        return None
    host = parts.hostname.lower()
    if ":" in host:
        host = f"[{host}]"
    try:                      # a Unicode name as browsers send it (xn--), as embed origins are read
        host = origin_host(host)
    except BadParameter:
        return None
    if port is not None and str(port) != DEFAULT_PORTS[parts.scheme.lower()]:
        host = f"{host}:{port}"
    return f"{parts.scheme.lower()}://{host}"


@lru_cache(maxsize=8)
def allowed_origins(setting: str, public_base_url: str) -> frozenset[str]:
    """The origins an operator lets call the endpoint (``SIS_MCP_ALLOWED_ORIGINS``), with the
    service's public one (``SIS_PUBLIC_BASE_URL``) where it is set."""
    given = [o for o in (part.strip() for part in setting.split(",")) if o]
    if public_base_url:
        given.append(public_base_url)
    out = {o: _origin_of(o) for o in given}
    for entry in (o for o, origin in out.items() if origin is None):     # once per setting (cached)
        log.warning("SIS_MCP_ALLOWED_ORIGINS: %r is no origin (scheme://host[:port], http or https) and allows "
                    "nothing", entry)
    return frozenset(o for o in out.values() if o is not None)


def origin_allowed(origin: str, host: str, allowed: frozenset[str]) -> bool:
    """Whether a browser page at ``origin`` may call the endpoint: one of ``allowed``, or the request's
    own host (the Host header) over http or https. Either scheme is taken for the own host because TLS
    is often ended at a proxy, so the scheme the coordinator sees is not the one the browser used."""
    seen = _origin_of(origin)
    if seen is None:
        return False
    if seen in allowed:
        return True
    scheme = seen.partition("://")[0]
    own = _origin_of(f"{scheme}://{host}") if host else None
    return own is not None and own == seen


def _accepts_json(accept: str | None) -> bool:
    if accept is None or not accept.strip():
        return True
    types = [part.split(";")[0].strip().lower() for part in accept.split(",")]
    return any(t in ("application/json", "application/*", "*/*") for t in types)


def body_too_large() -> RpcError:
    """A body over the limit: 413, as the SDK's server answers one (``RequestBodyLimitMiddleware``),
    with -32600 and the limit in ``data``; the JSON in it may be valid, so it is no parse error."""
    return RpcError(INVALID_REQUEST, f"the request body is over {MAX_JSON_BODY} bytes", {"maxBytes": MAX_JSON_BODY},
                    status=413)


class McpHandler(BaseHandler):
    SUPPORTED_METHODS = ("GET", "HEAD", "POST", "DELETE", "PATCH", "PUT", "OPTIONS")

    def initialize(self, family: str) -> None:
        self.family = family
        self.arguments_refused_as_results = False
        self.era = "handshake"

    async def prepare(self) -> None:
        try:
            await super().prepare()
        except PayloadTooLarge:
            # Answered before the body is read: 413, as the SDK's server answers a body over its limit,
            # with a JSON-RPC error (the JSON may be valid: it is no parse error).
            self.send_rpc(None, error=body_too_large())

    def set_default_headers(self) -> None:
        super().set_default_headers()
        origin = self.cors_origin()
        if origin is not None:
            self.set_header("Access-Control-Allow-Origin", origin)
            self.set_header("Vary", "Origin")

    async def admit(self) -> None:
        refusal = self.origin_refusal()
        if refusal is not None:
            raise refusal

    def cors_origin(self) -> str | None:
        """The request's ``Origin`` where a page there may call the endpoint and read its answers
        (``origin_refusal`` lets it): without ``Access-Control-Allow-Origin`` a page at an origin the
        operator allows (SIS_MCP_ALLOWED_ORIGINS) could send a message and never read the answer."""
        origins = self.request.headers.get_list("Origin")
        return origins[0] if len(origins) == 1 and self.origin_refusal() is None else None

    def options(self) -> None:
        """The CORS preflight of a page at an allowed origin (``application/json`` and the MCP headers
        need one); a preflight from any other origin is refused in ``admit``, one with no Origin is 405."""
        if self.cors_origin() is None:
            raise tornado.web.HTTPError(405)
        self.set_header("Access-Control-Allow-Methods", "POST")
        self.set_header("Access-Control-Allow-Headers", ", ".join(("Content-Type", "Accept", "X-Api-Key",
                                                                   *ROUTING_HEADERS)))
        self.set_header("Access-Control-Max-Age", "600")
        self.set_status(204)
        self.finish()

    def origin_refusal(self) -> RpcError | None:
        """403 for a request whose Origin is present and neither the service's own nor allowed by the
        operator (the transport's MUST). No Origin: a client that is not a browser, served as ever."""
        origins = self.request.headers.get_list("Origin")
        if not origins:
            return None
        settings = self.application.services.settings  # type: ignore[attr-defined]
        allowed = allowed_origins(settings.mcp_allowed_origins, settings.public_base_url or "")
        if len(origins) == 1 and origin_allowed(origins[0], self.request.host or "", allowed):
            return None
        shown = origins[0][:200]
        return RpcError(INVALID_REQUEST, f"Origin {shown} may not call this endpoint: a browser page may call it only "
                                         "from the service's own origin or one the operator allows "
                                         "(SIS_MCP_ALLOWED_ORIGINS)", {"origin": shown}, status=403)

    def write_error(self, status_code: int, **kwargs: Any) -> None:
        exc = kwargs.get("exc_info", (None, None, None))[1]
        if isinstance(exc, RpcError):             # refused before the message was read (``admit``)
            self.send_rpc(None, error=exc)
            return
        if isinstance(exc, ServiceError) and exc.status < 500:
            # The request's head refused before its message was read (an encoded body 415, a URI 414,
            # headers 431): a JSON-RPC error as every other answer here, the status kept.
            self.send_rpc(None, error=RpcError(INVALID_REQUEST, exc.message, exc.details or None,
                                               status=exc.status, headers=exc.headers))
            return
        if status_code == 405:
            self.set_header("Allow", "POST")
        super().write_error(status_code, **kwargs)

    def log_exception(self, typ, value, tb) -> None:  # noqa: ANN001
        if not isinstance(value, RpcError):       # a refusal answered in-band
            super().log_exception(typ, value, tb)

    # ---- writing back ---------------------------------------------------------

    def send_rpc(self, rid: str | int | None, *, result: dict[str, Any] | None = None,
                 error: RpcError | None = None) -> None:
        self.set_status(http_status(error, era=self.era, request_id=rid) if error is not None else 200)
        self.set_header("Content-Type", "application/json")
        self.set_header("Cache-Control", "no-store")
        if error is not None:
            for k, v in error.headers.items():
                self.set_header(k, v)
            msg = {"jsonrpc": "2.0", "id": rid, "error": error.as_json()}
        else:
            msg = {"jsonrpc": "2.0", "id": rid, "result": result}
        self.finish(dumps(msg))

    def accept_notification(self) -> None:
        self.set_status(202)
        self.clear_header("Content-Type")   # no body, so no type (Tornado's default is text/html)
        self.finish()

    # ---- the request ----------------------------------------------------------

    async def post(self) -> None:
        msg: Message | None = None
        try:
            headers = self.routing_headers()
            version_header = headers.get(PROTOCOL_VERSION_HEADER)
            self.era = era_of(version_header)
            if not _accepts_json(self.request.headers.get("Accept")):
                raise RpcError(INVALID_REQUEST, "the client must accept application/json", status=406)
            ctype = self.request.headers.get("Content-Type", "application/json").split(";")[0].strip().lower()
            if ctype != "application/json":
                raise RpcError(INVALID_REQUEST, "Content-Type must be application/json", status=415)
            msg = parse_message(self.decode_body())
            self.arguments_refused_as_results = mcp_tools.arguments_refused_as_results(version_header)
            if self.era == "modern":
                await self.serve_modern(msg, headers)
            else:
                await self.serve_handshake(msg)
        except RpcError as err:
            self.send_rpc(msg.id if msg is not None else err.request_id, error=err)

    def routing_headers(self) -> dict[str, str]:
        """The routing headers, refusing any given twice (first- and last-copy readers would disagree)."""
        out: dict[str, str] = {}
        for name in ROUTING_HEADERS:
            values = self.request.headers.get_list(name)
            if len(values) > 1:
                raise RpcError(HEADER_MISMATCH, f"{name.lower()} header appears more than once")
            if values:
                out[name] = values[0]
        return out

    def decode_body(self) -> Any:
        try:
            body = self.body_bytes()
        except PayloadTooLarge:
            raise body_too_large() from None
        try:
            return parse_json(body)
        except JsonRefused as exc:
            raise RpcError(PARSE_ERROR, f"Parse error: the body {exc}") from None

    async def serve_modern(self, msg: Message, headers: dict[str, str]) -> None:
        if msg.kind == "response":
            raise RpcError(INVALID_REQUEST, "the body must be one JSON-RPC 2.0 request or notification object")
        if msg.kind == "notification":
            # No client-to-server notification means anything at 2026-07-28: acknowledge and drop,
            # after telling a client at a version not served so, as a request would be told.
            requested = headers.get(PROTOCOL_VERSION_HEADER, "")
            if requested not in protocol.MODERN_VERSIONS:
                raise unsupported_version(requested)
            self.accept_notification()
            return
        check_modern_envelope(msg, headers)
        if msg.method == "server/discover":
            result = {"supportedVersions": list(protocol.MODERN_VERSIONS), "capabilities": CAPABILITIES,
                      "instructions": INSTRUCTIONS[self.family], "ttlMs": LIST_TTL_MS, "cacheScope": "public"}
        elif msg.method == "tools/list":
            result = self.list_result(msg.params, modern=True)
        elif msg.method == "tools/call":
            result = await self.call_result(msg)
        else:
            raise RpcError(METHOD_NOT_FOUND, "Method not found", msg.method)
        result["resultType"] = "complete"
        result["_meta"] = {SERVER_INFO_META: server_info()}
        self.send_rpc(msg.id, result=result)

    async def serve_handshake(self, msg: Message) -> None:
        if msg.kind != "request":
            self.accept_notification()   # notifications/initialized, cancellations, stray responses
            return
        if msg.method == "initialize":
            requested = msg.params.get("protocolVersion")
            if not isinstance(requested, str):
                raise RpcError(INVALID_PARAMS, "initialize needs a protocolVersion")
            version = requested if requested in HANDSHAKE_VERSIONS else LATEST_HANDSHAKE
            result = {"protocolVersion": version, "capabilities": CAPABILITIES, "serverInfo": server_info(),
                      "instructions": INSTRUCTIONS[self.family]}
        elif msg.method == "ping":
            result = {}
        elif msg.method == "tools/list":
            result = self.list_result(msg.params, modern=False)
        elif msg.method == "tools/call":
            result = await self.call_result(msg)
        else:
            raise RpcError(METHOD_NOT_FOUND, "Method not found", msg.method)
        self.send_rpc(msg.id, result=result)

    # ---- the methods ----------------------------------------------------------

    def list_result(self, params: dict[str, Any], *, modern: bool) -> dict[str, Any]:
        if params.get("cursor") is not None:
            # One page holds every tool, so no cursor this server issued can exist.
            raise RpcError(INVALID_PARAMS, "unknown cursor: this server lists every tool on one page")
        registry = self.application.services.registry  # type: ignore[attr-defined]
        result: dict[str, Any] = {"tools": [mcp_tools.descriptor(t, self.family)
                                            for t in mcp_tools.mcp_tools(registry, self.family)]}
        if modern:
            result.update({"ttlMs": LIST_TTL_MS, "cacheScope": "public"})
        return result

    async def call_result(self, msg: Message) -> dict[str, Any]:
        services = self.application.services  # type: ignore[attr-defined]
        return await mcp_tools.call(services, services.registry, self.family, msg.params, self.request_facts(),
                                    self.request_id, arguments_as_results=self.arguments_refused_as_results)

    def request_facts(self) -> RequestFacts:
        """MCP has no path credential: the key travels in X-Api-Key or ?key=, and the family's rules apply."""
        try:
            key = self.api_key()
        except BadParameter as exc:
            raise RpcError(INVALID_PARAMS, exc.message, mcp_tools.service_error_data(exc)) from None
        return RequestFacts(remote_ip=self.request.remote_ip, credential=None, api_key=key,
                            headers=self.request.headers,
                            base_url=f"{self.request.protocol}://{self.request.host}")
