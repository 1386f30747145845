"""The one call path every face uses (REST of each family, MCP):
identify the caller, validate the parameters, apply the caps, count the
request, run the tool.

Faces differ only in how raw parameters and the request's facts reach
``call_tool`` and in how the ``Answer`` or ``ServiceError`` is written back, so a
tool cannot drift between its REST route and its MCP face. Access runs before
the tool and so before any server cache lookup inside it: a revoked caller
never reaches a cached answer.
"""
from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Mapping

from .access import caps
from .access.policy import embed_headers
from .context import ToolContext
from .errors import ServiceError
from .honesty import Answer
from .registry import Tool

if TYPE_CHECKING:  # pragma: no cover
    from .services import Services


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


async def call_tool(services: "Services", tool: Tool, family: str, raw: Mapping[str, Any],
                    facts: RequestFacts) -> tuple[Answer, ToolContext]:
    access = services.access
    caller = await access.identify(tool, family, facts)
    browser = embed_headers(caller)
    try:
        params = tool.validate(raw)
        caveats = caps.check_params(tool, caller, params, raw) if family == "public" else []
        limit_headers = await access.admit(family, caller)
        ctx = ToolContext(services, family, caller, base_url=facts.base_url)
        answer = await tool.handler(ctx, params)
    except ServiceError as exc:
        exc.headers = {**browser, **exc.headers}
        raise
    if family == "public":
        answer = caps.cap_rows(answer, caller, caveats)
    return dataclasses.replace(answer, headers={**limit_headers, **browser, **answer.headers}), ctx
