"""The tool declarations. Each module appends its tools to a list; the default
registry is built from the modules listed here, in order."""
from __future__ import annotations

from coordinator.core.registry import Tool, ToolRegistry
from . import access, events, limits, node_app, seen, sweeps

MODULES = (events, limits, node_app, sweeps, seen, access)


def all_tools() -> list[Tool]:
    return [t for m in MODULES for t in m.TOOLS]


def default_registry() -> ToolRegistry:
    return ToolRegistry(all_tools())
