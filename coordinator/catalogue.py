"""Which tools this coordinator serves: each capability's ``tools`` module, then every
panel module (``coordinator.panels``), found by walking that package, so that a new
panel is its module and nothing else. The default registry is built from them, in
this order (the order of the OpenAPI document and of the MCP tool lists)."""
from __future__ import annotations

import importlib
import pkgutil
from types import ModuleType

from coordinator.core.registry import Tool, ToolRegistry

CAPABILITIES = ("coordinator.hazards", "coordinator.core.access", "coordinator.sweeps", "coordinator.seen",
                "coordinator.twin", "coordinator.features", "coordinator.fingerprint", "coordinator.grids",
                "coordinator.sites", "coordinator.briefs", "coordinator.widgets")
PANELS = "coordinator.panels"


def tool_modules(panel_package: str = PANELS) -> list[ModuleType]:
    mods = [importlib.import_module(f"{cap}.tools") for cap in CAPABILITIES]
    panels = importlib.import_module(panel_package)
    for info in sorted(pkgutil.iter_modules(panels.__path__), key=lambda m: m.name):
        if not info.ispkg:
            mods.append(importlib.import_module(f"{panel_package}.{info.name}"))
    return mods


def all_tools(panel_package: str = PANELS) -> list[Tool]:
    return [t for m in tool_modules(panel_package) for t in getattr(m, "TOOLS", ())]


def default_registry(panel_package: str = PANELS) -> ToolRegistry:
    return ToolRegistry(all_tools(panel_package))
