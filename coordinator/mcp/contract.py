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

from ..registry import LEGACY_ABSENT_TOOLS, ToolRegistry
from ..rest import BaseHandler
from .protocol import HANDSHAKE_VERSIONS, MODERN_VERSIONS
from .tools import output_schema

CONTRACT_VERSION = 1
FAMILY_BASE = {"earth": "/earth", "legacy": "/legacy"}
MCP_PATH = {"earth": "/mcp", "legacy": "/legacy/mcp"}


def contract_path(family: str) -> str:
    return f"{FAMILY_BASE[family]}/tools.json"


def tool_contract(registry: ToolRegistry, family: str) -> dict[str, Any]:
    tools = []
    for t in registry.in_family(family):
        entry: dict[str, Any] = {
            "name": t.name,
            "title": t.title,
            "description": t.description_for(family),
            "method": t.method,
            "path": FAMILY_BASE[family] + t.routes[family],
            "inputSchema": t.input_schema(),
            "outputSchema": output_schema(t),
            "mcp": t.mcp,
            "keyless": t.keyless,
        }
        cold = t.cold_bound_for(family)
        if cold is not None:
            entry["coldBoundS"] = cold
        if t.cache_ttl_s:
            entry["cacheTtlS"] = t.cache_ttl_s
        tools.append(entry)
    doc: dict[str, Any] = {
        "version": CONTRACT_VERSION,
        "family": family,
        "basePath": FAMILY_BASE[family],
        "tools": tools,
        "mcp": {
            "endpoint": MCP_PATH[family],
            "transport": "streamable-http",
            "stateless": True,
            "responses": "application/json",
            "protocolVersions": [*MODERN_VERSIONS, *reversed(HANDSHAKE_VERSIONS)],
            "tools": [t["name"] for t in tools if t["mcp"]],
        },
        "auth": {"keyless": True, "keyHeader": "X-Api-Key", "keyQueryParameter": "key"},
    }
    if family == "legacy":
        doc["absentTools"] = list(LEGACY_ABSENT_TOOLS)
    return doc


class ToolContractHandler(BaseHandler):
    def initialize(self, family: str) -> None:
        self.family = family

    def get(self) -> None:
        registry = self.application.services.registry  # type: ignore[attr-defined]
        self.send_json(tool_contract(registry, self.family), cache_control="public, max-age=300")
