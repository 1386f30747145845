"""The MCP face of the tool registry (``POST /mcp``, ``POST /legacy/mcp``) and the
tool contract documents (``/earth/tools.json``, ``/legacy/tools.json``)."""
from __future__ import annotations

from typing import Any

from coordinator.core.families import MCP_FAMILIES
from coordinator.faces.mcp.contract import ToolContractHandler
from coordinator.faces.mcp.endpoint import McpHandler


def mcp_routes() -> list[tuple[str, type, dict]]:
    routes: list[tuple[str, type, dict]] = []
    for fam in MCP_FAMILIES:
        routes.append((f"{fam.mcp_path}/?", McpHandler, {"family": fam.name}))
        routes.append((fam.contract_path, ToolContractHandler, {"family": fam.name}))
    return routes


def _error(description: str) -> dict[str, Any]:
    return {"description": description, "content": {"application/json": {"schema": {"type": "object"}}}}


def openapi_paths() -> dict[str, Any]:
    """The OpenAPI entries of these routes (the MCP endpoints speak JSON-RPC, described, not schematised)."""
    paths: dict[str, Any] = {}
    for family in MCP_FAMILIES:
        fam = family.name
        paths[family.contract_path] = {"get": {
            "operationId": f"{fam}_tool_contract", "summary": "Tool contract document (version 1)",
            "tags": [fam], "responses": {"200": {"description": "The family's tools, parameters and schemas",
                                                 "content": {"application/json": {"schema": {"type": "object"}}}}}}}
        paths[family.mcp_path] = {"post": {
            "operationId": f"{fam}_mcp", "summary": "Model Context Protocol endpoint (streamable HTTP, stateless)",
            "description": "One JSON-RPC message per POST. Protocol 2026-07-28 (server/discover) and the "
                           "2025-11-25 initialize handshake, routed by the MCP-Protocol-Version header. Tools are "
                           f"those of {family.contract_path} marked mcp.",
            "tags": [fam, "mcp"],
            "requestBody": {"required": True, "content": {"application/json": {"schema": {"type": "object"}}}},
            "responses": {"200": _error("JSON-RPC response; in the 2025-11-25 handshake era (or with no "
                                        "MCP-Protocol-Version header) also every JSON-RPC error to a request whose "
                                        "id was read, as the SDK's own server answers"),
                          "202": {"description": "Notification accepted"},
                          "400": _error("JSON-RPC error: not JSON or not one request (id null), a routing header "
                                        "given twice, an unsupported protocol version; at 2026-07-28 also invalid "
                                        "params"),
                          "401": _error("JSON-RPC error, at 2026-07-28: an API key given and not valid"),
                          "403": _error("JSON-RPC error: a foreign Origin (any protocol); at 2026-07-28 also a key "
                                        "lacking the tool's scope"),
                          "404": _error("JSON-RPC error, at 2026-07-28: method not found"),
                          "405": _error("Only POST is served"),
                          "406": _error("JSON-RPC error: the client does not accept application/json"),
                          "413": _error("JSON-RPC error: the body is over 64 KiB"),
                          "415": _error("JSON-RPC error: the body is not application/json"),
                          "429": _error("JSON-RPC error, at 2026-07-28: rate limited")}}}
    return paths
