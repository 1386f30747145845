"""What a tool is handed: the shared services, the family it is called in, and
who is calling. Tools know nothing of HTTP or MCP."""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:  # pragma: no cover
    from .services import Services


@dataclass
class Caller:
    """Who is calling. ``credential`` is the path credential on the public family."""

    ip: str
    key_id: str | None = None
    credential: str | None = None
    plan: str = "anon"
    scopes: frozenset[str] = frozenset()
    extra: dict[str, Any] = field(default_factory=dict)

    @property
    def keyless(self) -> bool:
        return self.key_id is None


@dataclass
class ToolContext:
    services: "Services"
    family: str
    caller: Caller
    base_url: str = ""
