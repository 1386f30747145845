"""The route families of the contract, in one table.

Every face reads a family's facts from here: the REST routes (``pattern``), the
OpenAPI document (``template``), the MCP endpoint and tool contract document
(``mcp_path``, ``contract_path``), whether the credential travels in the path
and whether the credentialed plans' caps apply. Before this table the same
facts lived in four modules, and a family could drift between its faces.

The legacy family's paths are fixed by the contract (SPEC.md, Legacy family),
and the sweep-side tools are absent from it; ``ToolRegistry.add`` refuses a
declaration that breaks either rule.
"""
from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Family:
    name: str
    prefix: str                       # the path prefix as published: /earth, /legacy, /public/v1/{cred}
    pattern: str                      # the same as a Tornado route pattern (path parameters as groups)
    mcp_path: str | None = None       # its MCP endpoint, if it has one
    credential_in_path: bool = False  # the credential is the first path segment (/public/v1/:cred)
    capped: bool = False              # the plans' caps (bbox, radius, rows) apply
    paths: tuple[str, ...] | None = None        # the only paths a tool may take here (None: any)
    absent_tools: tuple[str, ...] = ()          # tools the contract leaves out of this family

    @property
    def contract_path(self) -> str | None:
        """Its tool contract document (``tools.json``), served beside its MCP endpoint."""
        return f"{self.prefix}/tools.json" if self.mcp_path else None

    def path(self, route: str) -> str:
        return self.prefix + route


EARTH = Family("earth", "/earth", "/earth", mcp_path="/mcp")
LEGACY = Family(
    "legacy", "/legacy", "/legacy", mcp_path="/legacy/mcp",
    paths=("/events", "/event-brief", "/event-changes", "/site-intel", "/site-scan", "/places",
           "/infrastructure", "/w/twin_earth", "/place-trends", "/fingerprint"),
    absent_tools=("street_measure", "sweep_request", "node_app", "seen_layer", "environment_features",
                  "road_geometry"))
PUBLIC = Family("public", "/public/v1/{cred}", r"/public/v1/([^/]+)", credential_in_path=True, capped=True)

FAMILIES: dict[str, Family] = {f.name: f for f in (EARTH, LEGACY, PUBLIC)}
NAMES: tuple[str, ...] = tuple(FAMILIES)
MCP_FAMILIES: tuple[Family, ...] = tuple(f for f in FAMILIES.values() if f.mcp_path)

# The legacy family's facts under the names older code and tests know.
LEGACY_PATHS: tuple[str, ...] = LEGACY.paths or ()
LEGACY_ABSENT_TOOLS: tuple[str, ...] = LEGACY.absent_tools
