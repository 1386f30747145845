"""The one call path every face uses (REST of each family, MCP):
validate the parameters, authorize the caller, run the tool.

Faces differ only in how raw parameters and the request's facts reach
``call_tool`` and in how the ``Answer`` or ``ServiceError`` is written back, so a
tool cannot drift between its REST route and its MCP face.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Mapping

from .access.policy import authorize
from .context import ToolContext
from .honesty import Answer
from .registry import Tool

if TYPE_CHECKING:  # pragma: no cover
    from .services import Services


@dataclass
class RequestFacts:
    """What a face knows of the request, for access decisions. ``headers`` are
    advisory only (Origin, Referer... are never trusted for authorisation)."""

    remote_ip: str | None
    credential: str | None = None          # the :cred path segment on the public family
    api_key: str | None = None             # X-Api-Key header or key query parameter
    headers: Mapping[str, str] = field(default_factory=dict)
    base_url: str = ""


async def call_tool(services: "Services", tool: Tool, family: str, raw: Mapping[str, Any],
                    facts: RequestFacts) -> tuple[Answer, ToolContext]:
    params = tool.validate(raw)
    caller = authorize(tool, family, facts.remote_ip, facts.credential)
    ctx = ToolContext(services, family, caller, base_url=facts.base_url)
    return await tool.handler(ctx, params), ctx
