"""The tool declarations. Each module appends its tools to a list; the default
registry is built from the modules listed here, in order."""
from __future__ import annotations

from ..registry import Tool, ToolRegistry
from . import events, limits, sweeps

MODULES = (events, limits, sweeps)


def all_tools() -> list[Tool]:
    return [t for m in MODULES for t in m.TOOLS]


def default_registry() -> ToolRegistry:
    return ToolRegistry(all_tools())
