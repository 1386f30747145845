"""The tool contract document of a family: ``GET /earth/tools.json`` and
``GET /legacy/tools.json``, ``version: 1`` in both (SPEC.md, Versioning).

It is read off the same declarations as the REST routes, the OpenAPI document
and the MCP tool list: every tool routed in the family, with its path, method,
description as that family gives it, input schema (parameters and bounds),
output schema, and whether the family's MCP endpoint offers it. The legacy
document also names the tools the legacy family leaves out.
"""
from __future__ import annotations

from typing import Any

from coordinator.core.families import FAMILIES
from coordinator.core.registry import ToolRegistry
from coordinator.faces.http import BaseHandler
from coordinator.faces.mcp.protocol import HANDSHAKE_VERSIONS, MODERN_VERSIONS
from coordinator.faces.mcp.tools import output_schema

CONTRACT_VERSION = 1


def contract_path(family: str) -> str:
    return FAMILIES[family].contract_path or ""


def tool_contract(registry: ToolRegistry, family: str, settings: Any = None) -> dict[str, Any]:
    table = FAMILIES[family]
    tools = []
    for t in registry.in_family(family):
        entry: dict[str, Any] = {
            "name": t.name,
            "title": t.title,
            "description": t.description_for(family),
            "method": t.method,
            "path": table.path(t.routes[family]),
            "inputSchema": t.input_schema(),
            "outputSchema": output_schema(t),
            "mcp": t.mcp,
            "keyless": t.keyless,
        }
        cold = t.cold_bound_for(family)
        if cold is not None:
            entry["coldBoundS"] = cold
        if t.cached:
            entry["cacheTtlS"] = t.ttl_for(settings) if settings is not None else t.cache_ttl_s
            entry["cold"] = t.cold
        tools.append(entry)
    doc: dict[str, Any] = {
        "version": CONTRACT_VERSION,
        "family": family,
        "basePath": table.prefix,
        "tools": tools,
        "mcp": {
            "endpoint": table.mcp_path,
            "transport": "streamable-http",
            "stateless": True,
            "responses": "application/json",
            "protocolVersions": [*MODERN_VERSIONS, *reversed(HANDSHAKE_VERSIONS)],
            "tools": [t["name"] for t in tools if t["mcp"]],
        },
        "auth": {"keyless": True, "keyHeader": "X-Api-Key", "keyQueryParameter": "key"},
    }
    if table.absent_tools:
        doc["absentTools"] = list(table.absent_tools)
    return doc


class ToolContractHandler(BaseHandler):
    readable_anywhere = True

    def initialize(self, family: str) -> None:
        self.family = family

    def get(self) -> None:
        services = self.application.services  # type: ignore[attr-defined]
        self.send_json(tool_contract(services.registry, self.family, services.settings),
                       cache_control="public, max-age=300")
