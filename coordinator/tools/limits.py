"""limits: the limits contract as data (the same objects enforcement reads)."""
from __future__ import annotations

from typing import Any

from ..access import plans
from coordinator.core.context import ToolContext
from coordinator.core.honesty import Answer
from coordinator.core.registry import NUMBER, INTEGER, BBOX, Tool, tool

TOOLS: list[Tool] = []


def operation_bounds(ctx: ToolContext) -> dict[str, dict[str, Any]]:
    """Per-operation bounds, read off the tool declarations themselves."""
    out: dict[str, dict[str, Any]] = {}
    for t in ctx.services.registry:
        b = {}
        for p in t.params:
            if p.kind in (NUMBER, INTEGER) and (p.minimum is not None or p.maximum is not None) \
                    and p.name not in ("lat", "lon"):
                b[p.name] = {"min": p.minimum, "max": p.maximum, "default": p.default}
            elif p.kind == BBOX and p.max_side_deg is not None:
                b[p.name] = {"maxSideDeg": p.max_side_deg}
        if b:
            out[t.name] = b
    return out


@tool(TOOLS, name="limits", title="Limits contract",
      description="The limits contract: per-IP and keyed rates of the direct family, plan quotas and caps of the "
                  "credentialed family, per-endpoint ceilings and per-operation bounds.",
      routes={"earth": "/limits"}, cache_ttl_s=3600, http_max_age_s=300, tags=("meta",))
async def limits(ctx: ToolContext, params: dict[str, Any]) -> Answer:
    data = {
        "version": 1,
        "direct": {
            "anonymousPerMinutePerIp": plans.DIRECT_ANON_PER_MINUTE,
            "keyedPerMinute": plans.DIRECT_KEYED_PER_MINUTE,
            "keyHeader": "X-Api-Key", "keyQueryParameter": "key",
            "note": "Anonymous 120 requests per minute per IP; a free key raises it to 600 per minute.",
        },
        "quotaByPlan": [plans.plan_json(p) for p in plans.PLANS.values()],
        "caps": {
            "byPlan": {name: plans.caps_json(c) for name, c in plans.CAPS.items()},
            "perEndpointBbox": dict(plans.ENDPOINT_BBOX_DEG),
            "radiusM": dict(plans.GENERAL_RADIUS_M),
            "note": "Per-endpoint bbox ceilings bind every plan: a wider plan cannot buy a wider scan.",
        },
        "anonymousScopes": list(plans.ANON_SCOPES),
        "operations": operation_bounds(ctx),
        "cacheNote": "Keyless responses are edge-cacheable, so reads served from a cache do not reach the "
                     "meter: any keyless figure is a floor, not a total.",
    }
    return Answer(data, caveats=["These are the limits as published; the credentialed family's /limits shows "
                                 "the limits of one credential."])
