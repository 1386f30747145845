"""Credential tools: the credentialed ``/limits`` (the credential object),
``/renew`` (embed token renewal), ``/embed-tokens`` (minting from a key) and
the direct family's ``/earth/usage`` (a keyed caller's usage).

The three credentialed ones are not MCP tools: they are about the credential
in the path, which the MCP face does not take. ``usage`` is, like every tool of
the direct family: an MCP client sends its key in ``X-Api-Key``.

The direct family's ``/earth/limits`` (the limits contract as data, read off the same objects
enforcement reads, and off the tool declarations) is here too.
"""
from __future__ import annotations

from typing import Any

from coordinator.core.access import caps, credentials, plans
from coordinator.core.access.policy import ANON_CREDENTIAL, KIND_ANON, KIND_EMBED, caller_kind
from coordinator.core.context import ToolContext
from coordinator.core.errors import Forbidden
from coordinator.core.honesty import Answer
from coordinator.core.registry import BBOX, INTEGER, NUMBER, STRING, Param, Tool, tool

TOOLS: list[Tool] = []

ANON_NOTE = (f"The anonymous credential is the literal '{ANON_CREDENTIAL}' in the path (/public/v1/{ANON_CREDENTIAL}/...). "
             f"It is limited per client IP ({plans.DIRECT_ANON_PER_MINUTE} requests per minute, one window shared "
             "with keyless direct and legacy routes), is not metered, and holds the anonymous scopes.")
CAPS_NOTE = ("A parameter over a cap is refused with 400 naming the cap; a result list longer than the rows cap "
             "is cut with a caveat. Per-endpoint bbox ceilings bind every plan: a wider plan cannot buy a wider scan.")


def credential_object(ctx: ToolContext, usage: dict[str, Any] | None) -> dict[str, Any]:
    caller = ctx.caller
    kind = caller_kind(caller)
    plan = plans.PLANS[caller.plan]
    own_caps = plans.caps_json(caps.caps_for(caller))
    per_endpoint = {}
    for t in ctx.services.registry:
        if "public" in t.routes and any(p.kind == "bbox" for p in t.params):
            limit, cap = caps.bbox_ceiling(t, caller.plan)
            per_endpoint[caps.endpoint_name(t)] = {"bboxDeg": limit, "setBy": cap}
    quota = None
    if kind != KIND_ANON:
        quota = {"perMinute": plan.per_minute, "perDay": plan.per_day, "perMonth": plan.per_month,
                 "usedToday": usage["publicToday"], "usedThisMonth": usage["publicThisMonth"],
                 "remainingToday": max(0, plan.per_day - usage["publicToday"]),
                 "remainingThisMonth": max(0, plan.per_month - usage["publicThisMonth"]),
                 "embedLoadsPerDay": plan.embed_loads_per_day, "embedLoadsToday": usage["embedLoadsToday"],
                 "maxEmbedKeys": plan.max_embed_keys, "resets": "day and month at 00:00 UTC"}
    return {
        "kind": kind,
        "plan": plan.name,
        "scopes": sorted(caller.scopes),
        "layers": ["*"],
        "metered": kind != KIND_ANON,
        "quota": quota,
        "anonymous": {"perMinute": plans.DIRECT_ANON_PER_MINUTE, "scope": "per client IP",
                      "credential": ANON_CREDENTIAL, "note": ANON_NOTE},
        "caps": {
            "forThisCaller": own_caps,
            "perEndpointBbox": dict(plans.ENDPOINT_BBOX_DEG),
            "perEndpointForThisCaller": per_endpoint,
            "radiusM": dict(plans.GENERAL_RADIUS_M),
            "byPlan": {name: plans.caps_json(c) for name, c in plans.CAPS.items()},
            "note": CAPS_NOTE,
        },
        "quotaByPlan": [plans.plan_json(p) for p in plans.PLANS.values()],
    }


@tool(TOOLS, name="credential_limits", title="This credential's limits",
      description="The credential object: kind, plan, scopes, layers, whether it is metered, its quota and usage, "
                  "the anonymous limits, the caps for this caller and by plan, and the quotas of every plan. "
                  "Counted against the per-minute window only, so it answers when a quota or budget is spent.",
      routes={"public": "/limits"}, scopes=("earth.limits",), http_max_age_s=0, mcp=False, tags=("access",))
async def credential_limits(ctx: ToolContext, params: dict[str, Any]) -> Answer:
    caller = ctx.caller
    usage = None
    if caller_kind(caller) != KIND_ANON:
        usage = await ctx.services.access.key_usage(caller.extra["key"])
    data = credential_object(ctx, usage)
    if caller_kind(caller) == KIND_EMBED:
        token: credentials.EmbedRecord = caller.extra["embed"]
        data["embed"] = {**token.as_json(), "usedByThisVisitor": await ctx.services.access.visitor_used(caller),
                         "visitor": "this client IP, within the token's chain of renewals"}
    caveats = ["This request is not in the usage counts: reading a credential's own limits counts only against "
               "its per-minute window, never against a day or month quota or an embed budget, so it answers when "
               "they are spent. Keyless answers are edge-cacheable, so reads served from a cache never reach the "
               "meter."]
    return Answer(data, caveats=caveats, cacheable=False)


@tool(TOOLS, name="renew_embed", title="Renew an embed token",
      description="Renew the embed token in the path: a new token of the same chain (same origin, budget, "
                  "lifetime and per-visitor counters) with a fresh expiry, its lifetime the ttl the chain was "
                  "minted with. Only an unexpired embed token renews.",
      routes={"public": "/renew"}, keyless=False, http_max_age_s=0, mcp=False, safe=False, tags=("access",))
async def renew_embed(ctx: ToolContext, params: dict[str, Any]) -> Answer:
    if caller_kind(ctx.caller) != KIND_EMBED:
        raise Forbidden("only an embed token can be renewed; keys do not expire",
                        {"reason": "not_renewable", "kind": caller_kind(ctx.caller)})
    token: credentials.EmbedRecord = ctx.caller.extra["embed"]
    secret, new = await credentials.renew_embed(ctx.services.db, token)
    used = await ctx.services.access.visitor_used(ctx.caller)
    return Answer({"token": secret, **new.as_json(), "usedByThisVisitor": used, "renewedFrom": token.id},
                  caveats=["The old token stays valid until its own expiry; the budget is counted per visitor over "
                           "the whole chain, so renewing does not refill it."], cacheable=False)


@tool(TOOLS, name="mint_embed", title="Mint an embed token",
      description="Mint an embed token from the key in the path, for a page on the given framing origin. The "
                  "origin is checked once, here; it only steers browsers (CORS and frame-ancestors).",
      routes={"public": "/embed-tokens"}, method="POST", scopes=("earth.embed",), keyless=False, http_max_age_s=0,
      mcp=False, ok_status=201, statuses=(409,),          # 409: the plan's live tokens per key are all minted
      params=(Param("origin", STRING, "Framing origin of the page, scheme://host[:port]", required=True,
                    max_length=200),
              Param("budget", INTEGER, "Requests per visitor over the token's chain of renewals",
                    minimum=1, maximum=1_000_000),
              Param("ttl", INTEGER, "Lifetime of each token in seconds", minimum=credentials.MIN_EMBED_TTL_S,
                    maximum=credentials.MAX_EMBED_TTL_S)),
      tags=("access",))
async def mint_embed(ctx: ToolContext, params: dict[str, Any]) -> Answer:
    if caller_kind(ctx.caller) != "key":
        raise Forbidden("embed tokens are minted from a key", {"reason": "needs_key", "kind": caller_kind(ctx.caller)})
    settings = ctx.services.settings
    secret, rec = await credentials.mint_embed(ctx.services.db, ctx.caller.extra["key"], params["origin"],
                                               params["budget"] or settings.embed_budget,
                                               params["ttl"] or settings.embed_ttl_s)
    return Answer({"token": secret, **rec.as_json()}, status=201, cacheable=False,
                  caveats=["The token is shown once. The origin is checked only now: it is written into "
                           "Access-Control-Allow-Origin and frame-ancestors, which bind browsers, not other clients."])


@tool(TOOLS, name="usage", title="Usage of a keyed caller",
      description="The usage of the key this request carries (the X-Api-Key header, or ?key= on the URL): the "
                  "direct-family window and the day and month counts of the direct and credentialed families.",
      routes={"earth": "/usage"}, keyless=False, http_max_age_s=0, open_world=False, tags=("access",))
async def usage(ctx: ToolContext, params: dict[str, Any]) -> Answer:
    key: credentials.KeyRecord = ctx.caller.extra["key"]
    counts = await ctx.services.access.key_usage(key)
    window = ctx.caller.extra["window"]
    plan = plans.PLANS[key.plan]
    return Answer({
        "key": {"id": key.id, "prefix": key.prefix, "name": key.name, "plan": key.plan},
        "direct": {"perMinute": plans.DIRECT_KEYED_PER_MINUTE, "remainingThisMinute": window.remaining,
                   "today": counts["directToday"], "thisMonth": counts["directThisMonth"]},
        "credentialed": {"perMinute": plan.per_minute, "perDay": plan.per_day, "perMonth": plan.per_month,
                         "today": counts["publicToday"], "thisMonth": counts["publicThisMonth"],
                         "embedLoadsToday": counts["embedLoadsToday"]},
    }, caveats=["Counts include this request; days and months are UTC. Keyless requests are not counted here."],
        cacheable=False)

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
      routes={"earth": "/limits"}, cache_ttl_s=3600, http_max_age_s=300, open_world=False, tags=("meta",))
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
