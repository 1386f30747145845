"""Declarations of the routes that are not tools: the node protocol and the review API.

A tool's parameters, routes and OpenAPI entry come from its declaration
(``core/registry.py``); these routes are not tools (no MCP, no families, no
caps), but they deserve the same: one declaration that the handler validates
its input by and that the OpenAPI document is generated from, so neither can
drift from the other. An ``Operation`` names its method and path, its typed path
and query parameters (``Param`` of the registry, so the rules and messages are
the tools' own), its JSON body's fields, who may call it, and every answer it
can give. ``OperationHandler`` parses a request by it: a bad value is 400 in the
one error shape naming the parameter, before the handler's own code runs.
"""
from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any, Mapping

from coordinator.core.access.policy import ip_bucket
from coordinator.core.errors import BadParameter, RateLimited, ServiceError
from coordinator.core.registry import Param
from coordinator.faces.http import BaseHandler, read_json_object

# Who may call an operation.
AUTH_NONE, AUTH_NODE, AUTH_REVIEWER = "none", "node", "reviewer"

ERROR_REF = {"$ref": "#/components/schemas/Error"}
_PATH_PARAM = re.compile(r"\{([A-Za-z_][A-Za-z0-9_]*)\}")

# What each status means when an operation gives no words of its own.
STATUS_TEXT = {
    "400": "Bad parameter or body: details.parameter names it",
    "401": "No credential, or one not known",
    "403": "Credential revoked or without the needed scope",
    "404": "Not found",
    "405": "Method not allowed (the Allow header lists the methods served)",
    "409": "Conflict",
    "413": "Request body too large",
    "414": "Request URI too long",
    "422": "Rejected, with every reason",
    "429": "Rate limited (Retry-After says when to try again)",
    "431": "Request headers too large",
    "500": "Internal error",
}


@dataclass(frozen=True)
class Body:
    """A JSON object body. ``fields``: its members as ``Param`` (a member not declared is
    400 naming it). ``schema`` instead of fields: a body the route reads whole itself (a
    node's result, checked by ``sweep_engine.schema``), published as that schema."""

    fields: tuple[Param, ...] = ()
    required: bool = False
    description: str = ""
    schema: Mapping[str, Any] | None = None
    max_bytes: int = 16 * 1024

    def json_schema(self) -> dict[str, Any]:
        if self.schema is not None:
            return dict(self.schema)
        props = {p.name: p.json_schema() for p in self.fields}
        s: dict[str, Any] = {"type": "object", "properties": props, "additionalProperties": False}
        req = [p.name for p in self.fields if p.required]
        if req:
            s["required"] = req
        return s

    def parse(self, doc: dict[str, Any]) -> dict[str, Any]:
        """Typed values of a body's members, defaults for those left out; 400 naming a
        member that is not declared, missing, or not of its declared type and bounds."""
        known = [p.name for p in self.fields]
        unknown = sorted(k for k in doc if k not in known)
        if unknown:
            raise BadParameter(f"unknown field '{unknown[0]}'", {"parameter": unknown[0], "allowed": known})
        out: dict[str, Any] = {}
        for p in self.fields:
            value = doc.get(p.name)
            if value is None:
                if p.required:
                    raise BadParameter(f"'{p.name}' is required", {"parameter": p.name})
                out[p.name] = p.default
                continue
            out[p.name] = p.parse(value)
        return out


@dataclass(frozen=True)
class Operation:
    """One non-tool route: everything its handler validates and its OpenAPI entry says."""

    method: str
    path: str                                    # OpenAPI form: /node/v1/leases/{leaseId}/result
    operation_id: str
    summary: str
    tag: str
    auth: str = AUTH_NONE
    responses: Mapping[str, str] = field(default_factory=dict)   # status -> what it means here
    description: str = ""
    path_params: tuple[Param, ...] = ()
    query: tuple[Param, ...] = ()
    body: Body | None = None
    max_body_bytes: int = 16 * 1024              # bodyless routes too: nothing larger is read
    rate_limited: bool = True
    documented: bool = True

    def __post_init__(self) -> None:
        named = _PATH_PARAM.findall(self.path)
        declared = [p.name for p in self.path_params]
        if named != declared:
            raise ValueError(f"{self.operation_id}: path parameters {named} but declared {declared}")
        if any(p.location != "path" for p in self.path_params):
            raise ValueError(f"{self.operation_id}: a path parameter must be declared with location='path'")

    @property
    def body_limit(self) -> int:
        return self.body.max_bytes if self.body is not None else self.max_body_bytes

    def route(self) -> str:
        """The Tornado pattern: each path parameter one segment, checked by its ``Param``
        (so a malformed id is 400 naming it, not a 404 of the router)."""
        return _PATH_PARAM.sub(r"([^/]+)", self.path)

    def parse_path(self, args: tuple[str, ...]) -> dict[str, Any]:
        return {p.name: p.parse(raw) for p, raw in zip(self.path_params, args)}

    def parse_query(self, arguments: Mapping[str, list[bytes]]) -> dict[str, Any]:
        known = [p.name for p in self.query]
        raw: dict[str, str] = {}
        for name, values in arguments.items():
            if name not in known:
                raise BadParameter(f"unknown parameter '{name}'", {"parameter": name, "allowed": known})
            if len(values) > 1:
                raise BadParameter(f"'{name}' is given more than once", {"parameter": name})
            raw[name] = values[0].decode("utf-8", errors="replace")
        out: dict[str, Any] = {}
        for p in self.query:
            if p.name not in raw:
                if p.required:
                    raise BadParameter(f"'{p.name}' is required", {"parameter": p.name})
                out[p.name] = p.default
                continue
            if raw[p.name] == "" and not p.takes_empty:
                raise BadParameter(f"'{p.name}' is empty: give a value, or leave the parameter out",
                                   {"parameter": p.name, "value": ""})
            out[p.name] = p.parse(raw[p.name])
        return out

    def statuses(self) -> dict[str, str]:
        """Every answer the route can give: its own, and those every route of its kind gives."""
        codes: dict[str, str] = dict(self.responses)
        if self.path_params or self.query or (self.body is not None and self.body.fields):
            codes.setdefault("400", STATUS_TEXT["400"])
        if self.body is not None or self.method == "POST":
            codes.setdefault("400", STATUS_TEXT["400"])
            codes.setdefault("413", STATUS_TEXT["413"])
        if self.auth != AUTH_NONE:
            codes.setdefault("401", STATUS_TEXT["401"])
            codes.setdefault("403", STATUS_TEXT["403"])
        if self.rate_limited:
            codes.setdefault("429", STATUS_TEXT["429"])
        return codes

    def openapi(self) -> dict[str, Any]:
        """This route's OpenAPI 3.1 operation, generated from the declaration."""
        description = self.description
        if self.auth == AUTH_NODE:
            description += " Needs Authorization: Bearer <node token>."
        elif self.auth == AUTH_REVIEWER:
            description += " Needs a reviewer key: Authorization: Bearer <key> or X-Api-Key."
        responses: dict[str, Any] = {}
        for code, text in sorted(self.statuses().items()):
            if code in ("204", "202"):
                responses[code] = {"description": text}
            elif code.startswith("2"):
                responses[code] = {"description": text, "content": {"application/json": {"schema": {
                    "type": "object"}}}}
            else:
                responses[code] = {"description": text, "content": {"application/json": {"schema": ERROR_REF}}}
        op: dict[str, Any] = {"operationId": self.operation_id, "summary": self.summary, "tags": [self.tag],
                              "description": description.strip(), "responses": responses}
        params = [{"name": p.name, "in": "path", "required": True, "description": p.description + p.bound_text(),
                   "schema": p.json_schema()} for p in self.path_params]
        params += [{"name": p.name, "in": "query", "required": p.required,
                    "description": p.description + p.bound_text(), "schema": p.json_schema()} for p in self.query]
        if params:
            op["parameters"] = params
        if self.body is not None:
            op["requestBody"] = {"required": self.body.required, "description": self.body.description,
                                 "content": {"application/json": {"schema": self.body.json_schema()}}}
        if self.auth == AUTH_NODE:
            op["security"] = [{"nodeToken": []}]
        elif self.auth == AUTH_REVIEWER:
            op["security"] = [{"reviewerKey": []}, {"reviewerKeyHeader": []}]
        return op


def openapi_paths(operations: list[Operation]) -> dict[str, Any]:
    paths: dict[str, Any] = {}
    for op in operations:
        if op.documented:
            paths.setdefault(op.path, {})[op.method.lower()] = op.openapi()
    return paths


SECURITY_SCHEMES = {
    "nodeToken": {"type": "http", "scheme": "bearer", "description": "A node's token (POST /node/v1/enrol)"},
    "reviewerKey": {"type": "http", "scheme": "bearer", "description": "A reviewer key (sis reviewers create)"},
    "reviewerKeyHeader": {"type": "apiKey", "in": "header", "name": "X-Api-Key",
                          "description": "A reviewer key, in a header"},
}


class OperationHandler(BaseHandler):
    """A route served by its ``Operation``: ``prepare`` checks the caller and parses the
    path and query into ``self.args`` before the handler runs; ``self.body_values()`` reads
    the body by its declaration. Subclasses implement the one method the operation names
    and ``authenticate`` for their kind of caller."""

    operation: Operation

    def initialize(self, operation: Operation) -> None:
        self.operation = operation
        self.methods = (operation.method, "HEAD") if operation.method == "GET" else (operation.method,)

    def check_xsrf_cookie(self) -> None:  # credentials travel in headers, never cookies
        return None

    def body_limit(self) -> int:
        return self.operation.body_limit

    async def authenticate(self) -> Any:
        """Check the caller as the operation's ``auth`` says (401/403); None for open routes."""
        return None

    async def admit(self) -> None:
        await self.prepare_request()

    async def prepare_request(self) -> None:
        """Who calls, their limit, and the path and query, before any of the body is read."""
        if self.operation.rate_limited:
            await self.limit_ip()
        self.caller = await self.authenticate()
        if self.operation.rate_limited and self.caller is not None:
            await self.limit_caller(self.caller)
        self.args = self.operation.parse_path(tuple(self.path_args))
        self.args.update(self.operation.parse_query(self.request.query_arguments))

    # The per-minute ceilings of a kind of route: (setting of the client IP's, setting of the caller's).
    LIMITS: tuple[str, str] | None = None

    async def limit_ip(self) -> None:
        """The client IP's window for this kind of route, counted before the credential is
        looked at, so guessing keys or tokens costs the guesser its window."""
        if self.LIMITS is None:
            return
        access = self.application.services.access  # type: ignore[attr-defined]
        ip = access.client_ip.resolve(self.request.remote_ip, self.request.headers)
        await self.hit(self.LIMITS[0], f"{self.operation.tag}-ip", ip_bucket(ip))

    async def limit_caller(self, caller: Any) -> None:
        """The caller's own window (a node's token, a reviewer's key), once it is known."""
        if self.LIMITS is not None:
            await self.hit(self.LIMITS[1], self.operation.tag, self.caller_id(caller))

    def caller_id(self, caller: Any) -> str:
        return str(getattr(caller, "id", None) or getattr(caller, "digest", ""))

    async def hit(self, setting: str, *ident: str) -> None:
        services = self.application.services  # type: ignore[attr-defined]
        per_minute = getattr(services.settings, setting)
        w = await services.access.limiter.hit(per_minute, *ident)
        if not w.allowed:
            retry = max(1, w.reset_s)
            name = "".join(p.capitalize() if i else p for i, p in enumerate(setting.split("_")))
            raise RateLimited(f"too many requests: the limit is {w.limit} per minute ({'SIS_' + setting.upper()})",
                              {"limit": name, "perMinute": w.limit, "retryAfterS": retry},
                              headers={"Retry-After": str(retry), **w.headers()})

    def body_values(self) -> dict[str, Any]:
        body = self.operation.body
        if body is None:
            raise ServiceError("an operation without a body asked for one")
        raw = self.body_bytes()
        if not raw.strip():
            if body.required:
                raise BadParameter("a JSON object body is required")
            return body.parse({})
        return body.parse(read_json_object(self.json_body(raw)))
