"""The pipeline: the one call path every face uses (REST of each family, MCP).
It runs everything a tool's declaration says, in order: identify the caller,
validate the parameters, apply the caps, count the request, then the server
cache with single flight and the declared cold behaviour, then the handler.

Faces differ only in how raw parameters and the request's facts reach
``call_tool`` and in how the ``Answer`` or ``ServiceError`` is written back, so a
tool cannot drift between its REST route and its MCP face. Access runs before
the cache: a revoked caller never reaches a cached answer. No tool touches the
cache itself; a tool that declares a TTL computes from its family and
parameters alone (the cache key), never from who is calling: its handler is
handed no caller (``NoCaller``), so one that reads it fails in every test
that calls it. A tool whose answer follows the caller's plan (a rows or bbox
cap) declares ``per_plan``: the plan joins the key and is all its handler sees.

``services`` is ``coordinator.services.Services``, built above the core, typed
loosely here so that no import runs back up.
"""
from __future__ import annotations

import dataclasses
from typing import Any, Mapping

from coordinator.core.access import caps
from coordinator.core.access.policy import embed_headers
from coordinator.core.cache import Pending, cache_key
from coordinator.core.context import Caller, RequestFacts, ToolContext
from coordinator.core.errors import ServiceError
from coordinator.core.families import FAMILIES
from coordinator.core.honesty import Answer, Health, SourceReport
from coordinator.core.registry import COLD_ACCEPTED, Tool


async def call_tool(services: Any, tool: Tool, family: str, raw: Mapping[str, Any],
                    facts: RequestFacts) -> tuple[Answer, ToolContext]:
    access = services.access
    capped = FAMILIES[family].capped
    caller = await access.identify(tool, family, facts)
    browser = embed_headers(caller)
    failed: ServiceError | None = None
    try:
        # A capped caller's bbox sides are checked once, against the tightest bound that binds them.
        params = tool.validate(raw, bbox_sides=not capped)
        caveats = caps.check_params(tool, caller, params, raw) if capped else []
        if tool.check is not None:
            tool.check(params, caller)
        limit_headers = await access.admit(family, caller)
        ctx = ToolContext(services, family, caller, base_url=facts.base_url)
        answer = await (run_cached(services, tool, ctx, params) if tool.cached else tool.handler(ctx, params))
    except ServiceError as exc:
        if not browser:
            raise
        failed = exc
    if failed is not None:      # raised out here, so that the copy keeps the original's cause and context
        raise failed.with_headers(browser)
    if capped:
        answer = caps.cap_rows(answer, caller, caveats)
    if services.settings.demo and not answer.demo:
        # Under --demo every answer says so: the sweep layer's facts come from the fake
        # provider's synthetic photos, though no source's health names it.
        answer = dataclasses.replace(answer, demo=True, _memo={})
    return answer.with_headers({**limit_headers, **browser}), ctx


async def run_cached(services: Any, tool: Tool, ctx: ToolContext, params: dict[str, Any]) -> Answer:
    """The declared cache policy: a hit within the TTL, else the one computation for this
    key, met as the tool's cold behaviour says."""
    accepted = tool.cold == COLD_ACCEPTED
    bound = None if accepted else tool.cold_bound_for(ctx.family)
    plan = ctx.caller.plan if tool.per_plan else None
    shared = ToolContext(services, ctx.family, Caller(ip="", plan=plan) if tool.per_plan else NoCaller(tool.name),
                         base_url=ctx.base_url)
    outcome = await services.cache.run(cache_key(tool.name, ctx.family, params, plan),
                                       tool.ttl_for(services.settings), lambda: tool.handler(shared, params),
                                       bound_s=bound, accepted=accepted)
    if isinstance(outcome, Pending):
        return accepted_answer(tool, outcome) if accepted else cut_short_answer(tool, params, bound, outcome)
    return outcome


class NoCaller:
    """The caller as a cached tool's handler sees it: nothing. Its answer is shared by
    every caller who asks the same, so reading who asked is a bug, said at once."""

    def __init__(self, tool: str):
        self._tool = tool

    def __getattr__(self, name: str) -> Any:
        raise RuntimeError(f"tool {self._tool} is cached for every caller, so its handler may not read the "
                           f"caller ({name}); declare per_plan=True if its answer follows the caller's plan")


def accepted_answer(tool: Tool, pending: Pending) -> Answer:
    wait = tool.retry_after_s
    return Answer({"accepted": True, "retryAfterS": wait, "computingForS": round(pending.started_s, 1)},
                  caveats=[f"Accepted: this answer is being computed. Ask the same request again after {wait} s: "
                           "it answers 200 with the result once it is ready."],
                  status=202, cacheable=False, headers={"Retry-After": str(wait)})


def cut_short_answer(tool: Tool, params: dict[str, Any], bound: float | None, pending: Pending) -> Answer:
    """The answer when the cold bound passed: degraded (never cached), saying why, with the
    tool's declared empty body; the computation goes on and the same request is answered
    from the cache once it is done."""
    wait = tool.retry_after_s
    data = {**(tool.cold_fallback(params) if tool.cold_fallback else {}), "pending": True, "retryAfterS": wait}
    health = Health([SourceReport(tool.name, "n/a", ok=False,
                                  error=f"not ready within the cold bound of {bound:g} s")])
    return Answer(data, caveats=[f"Not ready: computing this answer took longer than {bound:g} s. It goes on; ask "
                                 f"the same request again after {wait} s to get it from the cache."],
                  health=health, cacheable=False, headers={"Retry-After": str(wait)})
