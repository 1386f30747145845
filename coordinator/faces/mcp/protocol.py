"""The Model Context Protocol wire facts the endpoint keeps: versions, headers,
error codes, and the per-request envelope ladder of protocol 2026-07-28.

Written against the official Python SDK (``mcp`` 2.x), which is a dev
dependency only: the coordinator does not import it at run time, so the few
constants it shares with the SDK are spelled here and a test pins them to the
SDK's own (tests/test_mcp_protocol.py).

Era routing is the SDK's (``StreamableHTTPSessionManager``): a request whose
``MCP-Protocol-Version`` header is absent or names a handshake-era version is
served by the 2025-11-25 rules (``initialize`` handshake, born-ready because
the endpoint is stateless); any other value goes to the 2026-07-28 ladder,
which answers an unknown version with -32022 and the versions it serves.

HTTP statuses differ by era, as in the SDK. At 2026-07-28 a JSON-RPC error
answers with the status ``HTTP_STATUS_BY_RPC_CODE`` gives its code (the SDK's
modern entry). In the handshake era a JSON-RPC error answering a request whose
id was read is HTTP 200, as the SDK's handshake server sends it: the ``mcp``
1.x client raises on any 4xx and tears its whole session down, so a 400 for an
unknown tool ended every later call. Only transport refusals keep their 4xx
there, all answered before an id is read (``id: null``): a body that is not
one readable request, 406, 415, 413 and a foreign ``Origin`` (403).
"""
from __future__ import annotations

import base64
import binascii
import re
from dataclasses import dataclass
from typing import Any, Mapping

HANDSHAKE_VERSIONS = ("2024-11-05", "2025-03-26", "2025-06-18", "2025-11-25")
MODERN_VERSIONS = ("2026-07-28",)
LATEST_HANDSHAKE = HANDSHAKE_VERSIONS[-1]

PROTOCOL_VERSION_HEADER = "MCP-Protocol-Version"
METHOD_HEADER = "Mcp-Method"
NAME_HEADER = "Mcp-Name"
ROUTING_HEADERS = (PROTOCOL_VERSION_HEADER, METHOD_HEADER, NAME_HEADER)

PROTOCOL_VERSION_META = "io.modelcontextprotocol/protocolVersion"
CLIENT_INFO_META = "io.modelcontextprotocol/clientInfo"
CLIENT_CAPABILITIES_META = "io.modelcontextprotocol/clientCapabilities"
SERVER_INFO_META = "io.modelcontextprotocol/serverInfo"

# JSON-RPC 2.0 and MCP error codes.
PARSE_ERROR = -32700
INVALID_REQUEST = -32600
METHOD_NOT_FOUND = -32601
INVALID_PARAMS = -32602
INTERNAL_ERROR = -32603
HEADER_MISMATCH = -32020
MISSING_REQUIRED_CLIENT_CAPABILITY = -32021   # never sent: no tool needs a client capability
UNSUPPORTED_PROTOCOL_VERSION = -32022

# HTTP status of a JSON-RPC error at 2026-07-28, as the SDK's modern entry maps it;
# unlisted codes answer 200. Access errors are not here: they answer the REST status.
# In the handshake era a request whose id was read is answered 200 (``http_status``).
HTTP_STATUS_BY_RPC_CODE: Mapping[int, int] = {
    PARSE_ERROR: 400, INVALID_REQUEST: 400, INVALID_PARAMS: 400, HEADER_MISMATCH: 400,
    MISSING_REQUIRED_CLIENT_CAPABILITY: 400, UNSUPPORTED_PROTOCOL_VERSION: 400, METHOD_NOT_FOUND: 404,
}

# Methods whose name parameter is mirrored into the Mcp-Name header.
NAME_BEARING_METHODS: Mapping[str, str] = {"tools/call": "name", "prompts/get": "name", "resources/read": "uri"}


class RpcError(Exception):
    """A JSON-RPC error to answer with. ``status`` overrides the HTTP status the
    code would get from ``HTTP_STATUS_BY_RPC_CODE``; ``headers`` ride along
    (``Retry-After`` of a rate limit); ``http_status`` says what is sent."""

    def __init__(self, code: int, message: str, data: Any = None, *, status: int | None = None,
                 headers: Mapping[str, str] | None = None, request_id: str | int | None = None) -> None:
        super().__init__(message)
        self.request_id = request_id    # the id of a request refused before it was read whole
        self.code = code
        self.message = message
        self.data = data
        self.status = status if status is not None else HTTP_STATUS_BY_RPC_CODE.get(code, 200)
        self.headers = dict(headers or {})

    def as_json(self) -> dict[str, Any]:
        err: dict[str, Any] = {"code": self.code, "message": self.message}
        if self.data is not None:
            err["data"] = self.data
        return err


def http_status(error: RpcError, *, era: str, request_id: str | int | None) -> int:
    """The HTTP status a JSON-RPC error is sent with. At 2026-07-28, the code's table status
    (or the one the error names: an access error's REST status). In the handshake era, 200
    whenever the answer names the request's id: the SDK's handshake server sends its
    JSON-RPC errors so, and the ``mcp`` 1.x and the TypeScript clients raise on a 4xx
    instead of reading the error (1.x then ends its session). The transport's refusals
    (406, 415, 413, 403, a body that is not one readable request) come before an id is
    read, answer ``id: null`` and keep their 4xx."""
    if era == "handshake" and request_id is not None:
        return 200
    return error.status


def era_of(version_header: str | None) -> str:
    """``handshake`` or ``modern``, from the MCP-Protocol-Version header alone (the SDK's rule)."""
    if version_header is None or version_header in HANDSHAKE_VERSIONS:
        return "handshake"
    return "modern"


@dataclass(frozen=True)
class Message:
    """One decoded JSON-RPC message: a request (has ``id``), a notification, or a posted response."""

    kind: str                  # "request", "notification" or "response"
    method: str | None
    id: str | int | None
    params: dict[str, Any]


def parse_message(body: Any) -> Message:
    """Classify a decoded POST body. Batches are refused at every version: protocol 2025-06-18
    removed them, and the SDK's own server refuses them at 2025-03-26 too (docs/mcp.md)."""
    if isinstance(body, list):
        raise RpcError(INVALID_REQUEST, "JSON-RPC batches are not served: send one request or notification "
                                        "object per POST (protocol 2025-06-18 removed batches)")
    if not isinstance(body, dict) or body.get("jsonrpc") != "2.0":
        raise RpcError(INVALID_REQUEST, "the body must be one JSON-RPC 2.0 request or notification object")
    method = body.get("method")
    params = body.get("params", {})
    if params is None:
        params = {}
    if "id" in body:
        rid = body["id"]
        if isinstance(rid, bool) or not isinstance(rid, (str, int)):
            raise RpcError(INVALID_REQUEST, "a request id must be a string or an integer")
        if method is None and ("result" in body or "error" in body):
            return Message("response", None, rid, {})
        if not isinstance(method, str):
            raise RpcError(INVALID_REQUEST, "a request must name its method", request_id=rid)
        if not isinstance(params, dict):
            raise RpcError(INVALID_PARAMS, "params must be an object", request_id=rid)
        return Message("request", method, rid, params)
    if not isinstance(method, str) or not isinstance(params, dict):
        raise RpcError(INVALID_REQUEST, "a notification must name its method and carry object params")
    return Message("notification", method, None, params)


def decode_header_value(value: str | None) -> str | None:
    """Undo the SDK's ``=?base64?...?=`` wrapping of a header value that is not plain ASCII."""
    if value is None:
        return None
    m = re.fullmatch(r"=\?base64\?(.*)\?=", value)
    if m is None:
        return value
    try:
        raw = base64.b64decode(m.group(1), validate=True)
        if base64.b64encode(raw).decode("ascii") != m.group(1):
            return None
        return raw.decode("utf-8")
    except (binascii.Error, UnicodeDecodeError):
        return None


def unsupported_version(requested: str) -> RpcError:
    """-32022, naming every version served. The handshake versions are listed too because
    this endpoint serves them: an auto-negotiating SDK client that shares no modern
    version then falls back to ``initialize`` instead of giving up."""
    return RpcError(UNSUPPORTED_PROTOCOL_VERSION, "Unsupported protocol version",
                    {"supported": [*MODERN_VERSIONS, *HANDSHAKE_VERSIONS], "requested": requested})


def check_modern_envelope(msg: Message, headers: Mapping[str, str]) -> str:
    """The 2026-07-28 request ladder, first failure wins: the ``_meta`` envelope
    pair, the routing headers agreeing with the body, then a served version.
    Returns the protocol version the request speaks.

    One step before the SDK's ladder: a request with no envelope at all whose
    ``MCP-Protocol-Version`` header names a version not served (``banana``, a
    date of no revision) is no 2026-07-28 request missing its ``_meta``; it is
    told its version is unsupported (-32022, HTTP 400, the versions served in
    ``data``), as the 2025-11-25 transport asks for an invalid version header."""
    meta = msg.params.get("_meta")
    header_version = headers.get(PROTOCOL_VERSION_HEADER)
    if not isinstance(meta, dict) and header_version is not None and header_version not in MODERN_VERSIONS:
        raise unsupported_version(header_version)
    if not isinstance(meta, dict):
        raise RpcError(INVALID_PARAMS, f"params._meta must be an object carrying the required "
                                       f"'{PROTOCOL_VERSION_META}' and '{CLIENT_CAPABILITIES_META}' envelope keys")
    missing = [k for k in (PROTOCOL_VERSION_META, CLIENT_CAPABILITIES_META) if k not in meta]
    if missing:
        raise RpcError(INVALID_PARAMS, f"params._meta is missing the required envelope key(s): {', '.join(missing)}")
    version = meta[PROTOCOL_VERSION_META]
    if header_version is None or header_version != version:
        raise RpcError(HEADER_MISMATCH, f"{PROTOCOL_VERSION_HEADER} header does not match the request envelope's "
                                        "protocol version")
    if headers.get(METHOD_HEADER) != msg.method:
        raise RpcError(HEADER_MISMATCH, f"{METHOD_HEADER} header does not match the request body's method")
    name_key = NAME_BEARING_METHODS.get(msg.method or "")
    if name_key is not None:
        body_name = msg.params.get(name_key)
        if body_name is not None and decode_header_value(headers.get(NAME_HEADER)) != body_name:
            raise RpcError(HEADER_MISMATCH, f"{NAME_HEADER} header does not match the request body's "
                                            f"'{name_key}' parameter")
    if not isinstance(version, str):
        raise RpcError(INVALID_PARAMS, "the protocol-version envelope value must be a string")
    if version not in MODERN_VERSIONS:
        raise unsupported_version(version)
    return version
