"""environmental_fingerprint (GET /earth/fingerprint, GET /legacy/fingerprint): a point's
street read by a vision-language model from the nearest street photos, cross-checked against
the width prior and the seen layer (SPEC.md, Environmental fingerprint v0; Time and cache).

The answer is cached 6 h through the pipeline with single flight, so a point is read once
however many ask at the same time. A cold read is waited for up to 60 s in the direct
family and 20 s in the legacy family; past that the caller gets a degraded "pending"
answer (every figure unknown) while the read goes on into the cache.

Every way of not reading the street says which, and invents no figure: no model configured
(or demo mode), the photo provider not answering, no photo near the point, no photo
readable, and a model answer that could not be used (a timeout, invalid JSON, JSON cut off
at ``finish_reason`` "length", or JSON that does not fit the schema). All but "no photo
near the point" are degraded and so never cached; that one is a full answer about the
provider's photos as they stand, cached like a reading.
"""
from __future__ import annotations

import asyncio
from datetime import datetime, timezone
from typing import Any

from coordinator.core.context import ToolContext
from coordinator.core.honesty import Answer, Health, SourceReport
from coordinator.core.registry import Tool, lat, lon, tool
from coordinator.features import grid
from coordinator.sources.base import Query
from . import crosscheck, reading
from .photos import RADIUS_M, image_urls, nearest_photos
from .vlm import Question, VisionModel

TOOLS: list[Tool] = []

TTL_S = 6 * 3600
COLD_BOUND_S = 60.0
LEGACY_COLD_BOUND_S = 20.0
STATUSES = ("read", "no-model", "no-photos", "photos-unavailable", "photos-unreadable", "model-failed", "pending")

CAVEATS = [
    "Figures are a vision-language model's reading of street photos near the point: estimates, not measurements. "
    "Each names the photos it rests on, the model, and when those photos were taken (timestamp): the street as it "
    "looked then. Lengths in metres rest on the scale anchors listed (objects of an assumed size); a wrong "
    "assumption scales the figure with it, and a length with no anchor in its photos is low confidence at most.",
    "What the photos do not show is unknown, not absent: 'none', 'none visible' and empty lists say only what "
    "these few photos show, from where they were taken; unknown figures carry no value.",
    "Each figure is cross-checked against the street-class width prior (ruasWidthM, a model of the road class) "
    "and, where the ground was swept, the seen layer's measured facts; disagreements are listed with both values "
    "and are never averaged.",
]

STATUS_CAVEAT = {
    "no-model": "Not read: {why}. No figure is given; none is invented.",
    "photos-unavailable": "Not read: the street-photo provider did not answer ({why}), so no photo was looked "
                          "at. No figure is given.",
    "no-photos": "Not read: the photo provider lists no usable street photo within {radius:g} m of the point, so "
                 "there is nothing to read. No figure is given; this says nothing about the street here.",
    "photos-unreadable": "Not read: none of the {n} nearest photos could be fetched for the model ({why}). No "
                         "figure is given.",
    "model-failed": "Not read: the model's answer could not be used: {why}. No figure is taken from it.",
}

_FIGURE = {"type": "object", "required": ["value", "confidence", "basis", "source", "timestamp", "license"],
           "properties": {"confidence": {"type": "string", "enum": ["high", "low", "unknown"]},
                          "unit": {"type": ["string", "null"]}, "basis": {"type": ["string", "null"]},
                          "source": {"type": ["object", "null"]}, "timestamp": {"type": ["string", "null"]},
                          "license": {"type": ["string", "null"]}}}
OUTPUT_SCHEMA = {
    "type": "object",
    "required": ["caveats", "status", "point", "figures", "scaleAnchors", "photos", "model", "crossCheck",
                 "disagreements"],
    "properties": {
        "caveats": {"type": "array", "items": {"type": "string"}},
        "status": {"type": "string", "enum": list(STATUSES)},
        "point": {"type": "object", "required": ["lat", "lon"]},
        "figures": {"type": "object", "required": list(reading.KEYS),
                    "properties": {k: _FIGURE for k in reading.KEYS}},
        "scaleAnchors": {"type": "array", "items": {"type": "object"}},
        "photos": {"type": "array", "items": {"type": "object"}},
        "model": {"type": ["object", "null"]},
        "crossCheck": {"type": "object", "required": ["widthPrior", "seen", "comparisons"]},
        "disagreements": {"type": "array", "items": {"type": "object"}},
        "readAt": {"type": ["string", "null"]},
    },
}


def _now() -> str:
    return datetime.now(timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")


def _body(params: dict[str, Any], status: str, *, figures: dict | None = None, anchors: list | None = None,
          photos: list | None = None, model: dict | None = None, cross: dict | None = None,
          read_at: str | None = None) -> dict[str, Any]:
    cross = cross or {"widthPrior": {"available": False, "reason": "not looked up"}, "seen": None, "comparisons": []}
    return {"status": status, "point": {"lat": params["lat"], "lon": params["lon"]},
            "figures": figures or reading.unknown_figures(), "scaleAnchors": anchors or [], "photos": photos or [],
            "model": model, "crossCheck": cross,
            "disagreements": [c for c in cross["comparisons"] if not c["agree"]], "readAt": read_at}


def pending_body(params: dict[str, Any]) -> dict[str, Any]:
    """The answer while a cold read goes on past the family's bound: nothing read yet."""
    return _body(params, "pending", cross={"widthPrior": {"available": False, "reason": "not ready"},
                                           "seen": None, "comparisons": []})


def _cross_caveats(cross: dict[str, Any]) -> list[str]:
    out = []
    bad = [c for c in cross["comparisons"] if not c["agree"]]
    if bad:
        what = "; ".join(f"{c['figure']} {c['fingerprint']['value']} against {c['against']['name']} "
                         f"{c['against']['value']}" for c in bad)
        out.append(f"Disagreements ({len(bad)}): {what}. Both values are given in disagreements; neither is "
                   "averaged or preferred.")
    prior = cross["widthPrior"]
    if not prior.get("available"):
        out.append(f"Width prior unavailable: {prior['reason']}.")
    seen = cross["seen"]
    if seen is not None and not seen["swept"]:
        out.append(f"The seen layer has not swept this ground (no covered cell within {seen['radiusM']:g} m): "
                   "there is no measured fact to hold the fingerprint against.")
    return out


def _answer(params: dict[str, Any], status: str, health: Health, why: str = "", **body: Any) -> Answer:
    data = _body(params, status, **body)
    caveats = []
    if status in STATUS_CAVEAT:
        caveats.append(STATUS_CAVEAT[status].format(why=why, radius=RADIUS_M, n=len(data["photos"])))
    # Within 50 m of 180 degrees the photo search and the road prior's stop at the meridian.
    caveats += _cross_caveats(data["crossCheck"]) + grid.antimeridian_caveats(
        params["lat"], params["lon"], RADIUS_M) + CAVEATS
    return Answer(data, caveats=caveats, health=health)


@tool(TOOLS, name="environmental_fingerprint", title="Environmental fingerprint of a point",
      description="Passable width, sidewalk, surface, obstacles, signage, lighting, overhead clearance and flood "
                  "evidence at a point, read by a vision-language model from the nearest street photos (within "
                  "50 m). Each figure has value, confidence, source (photo ids, model), timestamp and license; the "
                  "scale anchors the model used are listed; the figures are cross-checked against the street-class "
                  "width prior (ruasWidthM) and the seen layer's measured facts, and each disagreement is listed "
                  "with both values, never averaged. Cold 5-60 s, then cached 6 h.",
      family_descriptions={"legacy": "The environmental fingerprint of a point (as on /earth/fingerprint), read by "
                                     "a vision-language model from nearby street photos. Cold 5-20 s: a read not "
                                     "done in 20 s answers pending (degraded) and goes on into the cache; then "
                                     "cached 6 h."},
      params=(lat(), lon()), routes={"earth": "/fingerprint", "legacy": "/fingerprint"},
      cache_ttl_s=TTL_S, cold_bound_s=COLD_BOUND_S, family_cold_bound_s={"legacy": LEGACY_COLD_BOUND_S},
      retry_after_s=10, cold_fallback=pending_body, http_max_age_s=300, output_schema=OUTPUT_SCHEMA,
      tags=("fingerprint",))
async def environmental_fingerprint(ctx: ToolContext, params: dict[str, Any]) -> Answer:
    services = ctx.services
    la, lo = params["lat"], params["lon"]
    vlm: VisionModel = services.sources[VisionModel.name]
    # The cross-check's reads (local database) run while the photos are searched and read.
    local = asyncio.ensure_future(asyncio.gather(crosscheck.width_prior(services.db, la, lo),
                                                 crosscheck.seen_measures(services, la, lo)))
    try:
        return await _read(ctx, params, vlm, local)
    finally:
        if not local.done():
            local.cancel()
        elif not local.cancelled():
            local.exception()          # seen here, whether or not the read got as far as using it


async def _read(ctx: ToolContext, params: dict[str, Any], vlm: VisionModel, local: asyncio.Future) -> Answer:
    services = ctx.services
    la, lo = params["lat"], params["lon"]

    async def cross_check() -> dict[str, Any]:
        prior, seen = await local
        return {"widthPrior": prior, "seen": seen, "comparisons": []}

    why = vlm.unconfigured
    if why:
        return _answer(params, "no-model", Health([SourceReport(vlm.report_name, vlm.license, ok=False, error=why)]),
                       why, cross=await cross_check())
    provider = services.sources["panoramax"]
    near, provider_report = await nearest_photos(provider, la, lo, vlm.max_photos)
    health = Health([provider_report])
    if not provider_report.ok:
        return _answer(params, "photos-unavailable", health, provider_report.error or "", cross=await cross_check())
    refs = [p.reference() for p in near]
    if not near:
        return _answer(params, "no-photos", health, cross=await cross_check())
    shown, images_report = await image_urls(near, vlm.images, provider.timeout_s)
    if images_report is not None:
        health.add(images_report)
    if not shown:
        return _answer(params, "photos-unreadable", health, images_report.error if images_report else "",
                       photos=refs, cross=await cross_check())
    photos = [p for p, _ in shown]
    question = Question(reading.prompt(la, lo, photos), tuple(url for _, url in shown),
                        reading.answer_schema(len(photos)), name="environmental_fingerprint")
    read = await vlm.read(Query(params={"question": question}))
    health.add(read.report)
    model = {"name": vlm.model, "api": "OpenAI-compatible chat completions", "images": vlm.images,
             "photosShown": [p.photo.id for p in photos]}
    cross = await cross_check()
    if not read.report.ok:
        return _answer(params, "model-failed", health, read.report.error or "", photos=refs, model=model,
                       cross=cross)
    answer = read.records[0]
    model.update(name=answer["model"], usage=answer["usage"], elapsedS=answer["elapsedS"])
    figures, anchors = reading.served(answer["content"], photos, answer["model"])
    cross["comparisons"] = crosscheck.comparisons(figures, cross["widthPrior"], cross["seen"])
    return _answer(params, "read", health, figures=figures, anchors=anchors, photos=refs, model=model,
                   cross=cross, read_at=_now())
