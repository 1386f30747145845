"""What a tool is handed: the shared services, the family it is called in, and
who is calling; and what a face knows of a request. Tools know nothing of HTTP
or MCP.

This module sits at the bottom of the core and imports nothing of the
coordinator: the services are typed loosely here (they are built above,
by ``coordinator.services``, which imports the tools), so no arrow runs back up.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Mapping


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
class RequestFacts:
    """What a face knows of the request, for access decisions. ``headers`` are
    advisory only (Origin, Referer... are never trusted for authorisation); the
    only header read is the client-IP header of a configured trusted proxy."""

    remote_ip: str | None
    credential: str | None = None          # the :cred path segment on the public family
    api_key: str | None = None             # X-Api-Key header or key query parameter
    headers: Mapping[str, str] = field(default_factory=dict)
    base_url: str = ""


@dataclass
class ToolContext:
    services: Any            # coordinator.services.Services
    family: str
    caller: Caller
    base_url: str = ""
