"""sweep_request (POST /earth/sweep-request) and the public sweep queue (GET /earth/sweep-queue).

``sweep_request`` takes ``lat``, ``lon`` and ``radius`` either as query
parameters or as a JSON object body (``Content-Type: application/json``); both
may be used at once if they do not contradict each other.

``node_app`` (GET /earth/node-app), the signed download manifest of the node agent, is here too.
"""
from __future__ import annotations

from pathlib import Path
from typing import Any

from coordinator.core.context import ToolContext
from coordinator.core.honesty import Answer
from coordinator.core.registry import INTEGER, STRING, Param, Tool, lat, lon, radius, tool
from coordinator.manifests import load_published
from coordinator.sweeps import requests
from coordinator.sweeps.service import sweeps_of

TOOLS: list[Tool] = []

REQUEST_CAVEATS = [
    "A sweep is done by volunteer compute nodes reading street photos in place; it typically takes minutes to "
    "hours, and its facts go live in the seen layer only after validation and review.",
    "Ground is counted in H3 cells (resolution 10, about 150 m across); covered means approved results cover "
    "every cell of it that has street photos.",
]


@tool(TOOLS, name="sweep_request", title="Request a sweep of unswept ground",
      description="Ask for the ground within radius of a point to be swept from street photos. Covered ground "
                  "answers queued:false with a reason; ground already queued merges into the earlier request; "
                  "otherwise the request is queued and appears in the public sweep queue. Parameters travel as "
                  "query parameters or as a JSON object body.",
      params=(lat(), lon(), radius(200, 1000, 450)), routes={"earth": "/sweep-request"}, method="POST",
      http_max_age_s=0, tags=("sweeps",),
      # It adds a queue entry or merges into the one covering that ground: nothing is deleted or
      # overwritten. Not idempotent: a repeat counts another ask and goes on with the ground not yet
      # listed, which can queue more jobs. Open world: it asks the photo provider what ground has photos.
      destructive=False,
      output_schema={"type": "object", "required": ["caveats", "queued", "merged", "request", "ground"],
                     "properties": {"caveats": {"type": "array", "items": {"type": "string"}},
                                    "queued": {"type": "boolean"}, "reason": {"type": "string"},
                                    "reasonCode": {"type": "string",
                                                   "enum": ["covered", "no_photos", "provider_unavailable"]},
                                    "merged": {"type": "boolean"},
                                    "request": {"type": ["object", "null"]}, "ground": {"type": "object"},
                                    "health": {"type": "object"}}})
async def sweep_request(ctx: ToolContext, params: dict[str, Any]) -> Answer:
    out = await requests.submit(sweeps_of(ctx.services), params["lat"], params["lon"], params["radius"],
                                ctx.caller.ip)
    return Answer(out.as_json(), caveats=list(out.caveats) + REQUEST_CAVEATS, health=out.health, cacheable=False)


@tool(TOOLS, name="sweep_queue", title="Public sweep queue",
      description="Sweep requests, oldest first: id, centre, radius, state (queued, covered, or parked: ground "
                  "rejected in review and not swept again, with its reason), requested and updated times, and "
                  "progress in jobs done / total. Never who asked.",
      params=(Param("state", STRING, "Which requests to list", default="queued",
                    enum=("queued", "covered", "parked", "all")),
              Param("limit", INTEGER, "Most requests listed", default=100, minimum=1, maximum=500)),
      routes={"earth": "/sweep-queue"}, http_max_age_s=10, open_world=False, tags=("sweeps",))
async def sweep_queue(ctx: ToolContext, params: dict[str, Any]) -> Answer:
    rows, total = await requests.queue(ctx.services.db, params["state"], params["limit"])
    return Answer({"state": params["state"], "count": len(rows), "total": total, "requests": rows},
                  caveats=["The queue shows the ground asked for, never who asked.",
                           "Progress counts the jobs each request made; ground shared with an earlier request is "
                           "swept by that request's jobs."])

CAVEATS = [
    "The node agent needs an NVIDIA GPU (see each build's requirements); it runs on Windows and Linux.",
    "The sweep engine and its weights are compiled into each build: a running node never downloads or executes "
    "code. Check a download against its sha256 here, and the manifest against the published public keys "
    "(sis-node verify-manifest FILE).",
    "Contributed sweeps are validated and reviewed before they are served.",
]


@tool(TOOLS, name="node_app", title="Node app download manifest",
      description="The signed download manifest of the volunteer node agent (Windows, Linux; NVIDIA GPU): "
                  "builds with sha256 and download size and what each carries (its engine weights and compute "
                  "backends), engine version, weights sha256, signatures.",
      routes={"earth": "/node-app"}, http_max_age_s=300, open_world=False, tags=("sweeps",))
async def node_app(ctx: ToolContext, params: dict[str, Any]) -> Answer:
    folder = Path(ctx.services.settings.manifests_dir)
    good, refused = load_published(folder)
    caveats = list(CAVEATS)
    if refused:
        caveats.append(f"{len(refused)} manifest file(s) failed verification and are not served.")
    if not good:
        caveats.insert(0, "No signed node-app build has been published on this coordinator yet: there is "
                          "nothing to download.")
        return Answer({"published": False, "manifest": None}, caveats=caveats)
    newest = good[0]
    s = newest.verified.signed
    return Answer({
        "published": True,
        "version": s["version"],
        "expires": s["expires"],
        "engine": s.get("engine"),
        "weights": s.get("weights"),
        "builds": s.get("builds", []),
        "signedBy": sorted(newest.verified.signers),
        "manifest": newest.envelope,
    }, caveats=caveats)
