"""The OpenAPI 3.1 document, generated from the tool registry."""
from __future__ import annotations

from typing import Any

from coordinator import __version__
from coordinator.core.families import FAMILIES
from coordinator.core.registry import ToolRegistry
from coordinator.faces.operations import SECURITY_SCHEMES

ERROR_SCHEMA = {
    "type": "object",
    "required": ["error"],
    "properties": {"error": {"type": "object", "required": ["code", "message", "details"], "properties": {
        "code": {"type": "string"}, "message": {"type": "string"}, "details": {"type": "object"}}}},
}

ANSWER_SCHEMA = {
    "type": "object",
    "required": ["caveats"],
    "properties": {
        "caveats": {"type": "array", "items": {"type": "string"}},
        "health": {"$ref": "#/components/schemas/Health"},
    },
}

HEALTH_SCHEMA = {
    "type": "object",
    "required": ["sourcesQueried", "sourcesUsable", "sources"],
    "properties": {
        "sourcesQueried": {"type": "integer"}, "sourcesUsable": {"type": "integer"},
        "degraded": {"type": "boolean"},
        "sources": {"type": "array", "items": {"type": "object", "required": ["name", "ok", "license"]}},
    },
}

STATUS_TEXT = {"400": "Bad parameter (details.parameter names it)", "401": "Invalid credential",
               "403": "Missing scope, or over a cap of the plan", "404": "Not found",
               "409": "Conflict with the state of what is asked of (details say what)",
               "410": "Gone: only withdrawn items were asked for (details say which, and why)",
               "413": "Request body too large", "429": "Rate limited (Retry-After)", "500": "Internal error",
               "503": "A store the service needs is unreachable (Retry-After)"}


def openapi_document(registry: ToolRegistry, extra_paths: dict[str, Any] | None = None) -> dict[str, Any]:
    paths: dict[str, Any] = {}
    for tool in registry:
        for fam in tool.families:
            family = FAMILIES[fam]
            path = family.path(tool.routes[fam])
            params = []
            if family.credential_in_path:
                params.append({"name": "cred", "in": "path", "required": True,
                               "description": "The credential ('anon' for the anonymous credential)",
                               "schema": {"type": "string"}})
            for p in tool.params:
                params.append({"name": p.name, "in": p.location, "required": p.required or p.location == "path",
                               "description": p.description + p.bound_text(), "schema": p.json_schema()})
            schema = tool.output_schema or {"$ref": "#/components/schemas/Answer"}
            responses: dict[str, Any] = {
                str(tool.ok_status): {"description": tool.title,
                                      "content": {"application/json": {"schema": schema}}},
            }
            if tool.cold == "accepted":
                responses["202"] = {"description": "Accepted: being computed; the same request answers 200 once "
                                                   "ready (Retry-After)",
                                    "content": {"application/json": {"schema": {"type": "object"}}}}
            # Every answer the route can give: a bad parameter, a credential (the key is optional
            # in the direct family but checked when sent), a cap, the rate limits, a body too large.
            codes = ["400", "401", "403", "404", "429", "500", "503"] + (["413"] if tool.method == "POST" else [])
            codes += [str(s) for s in tool.statuses]
            for code in sorted(codes):
                responses[code] = {"description": STATUS_TEXT[code],
                                   "content": {"application/json": {"schema": {"$ref": "#/components/schemas/Error"}}}}
            op = {
                "operationId": f"{fam}_{tool.name}",
                "summary": tool.title,
                "description": tool.description_for(fam),
                "tags": [fam],
                "parameters": params,
                "responses": responses,
                "x-tool": tool.name,
            }
            if family.credential_in_path and tool.scopes:
                op["x-scopes"] = list(tool.scopes)
            paths.setdefault(path, {})[tool.method.lower()] = op
    for path, item in (extra_paths or {}).items():
        paths.setdefault(path, {}).update(item)
    return {
        "openapi": "3.1.0",
        "info": {"title": "Spatial Intelligence Service", "version": __version__,
                 "description": "Geospatial, hazard, street-level and data-panel information. Every brief and "
                                "score carries confidence and caveats; health says which sources answered."},
        "paths": paths,
        "components": {"schemas": {"Error": ERROR_SCHEMA, "Answer": ANSWER_SCHEMA, "Health": HEALTH_SCHEMA},
                       "securitySchemes": SECURITY_SCHEMES},
    }
