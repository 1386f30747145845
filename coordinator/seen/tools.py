"""seen_layer (GET /earth/seen), street_measure (GET /earth/street-measure) and
seen_areas (GET /public/v1/:cred/seen-areas): the approved results of sweeps."""
from __future__ import annotations

import math

from typing import Any

from coordinator.core.access.plans import CAPS
from coordinator.core.context import ToolContext
from coordinator.core.honesty import Answer
from coordinator.core.registry import Param, Tool, lat, lon, radius, tool, NUMBER
from coordinator.seen import query
from coordinator.seen.reader import reader_of

TOOLS: list[Tool] = []

SEEN_CAVEATS = [
    "Facts come from street photos read in place by volunteer compute nodes, checked against replicas and "
    "approved by a person; the photos are never rehosted, only derived facts are served.",
    "Each fact says whether its value was measured, modelled or assumed (basis); positions are derived from "
    "photo positions and depth, good to a few metres.",
    "Absence of a fact is not absence of the thing: a fact kind missing from covered ground means none was "
    "seen from the street, and unswept ground (covered:false) says nothing about what stands there.",
]


@tool(TOOLS, name="seen_layer", title="Seen layer: swept street facts",
      description="Street-level facts from approved sweeps within radius of a point: roadway, kerbs, gates, "
                  "entrances, fences, poles, wires, signage, drainage and vegetation, each georeferenced with "
                  "value, confidence, source, timestamp, basis (measured|modelled|assumed) and license. covered "
                  "is true only when every H3 cell of the circle is swept and approved; partial coverage is "
                  "given as a fraction.",
      params=(lat(), lon(), radius(100, 1500, 450)), routes={"earth": "/seen"}, http_max_age_s=30,
      open_world=False, tags=("seen",),
      output_schema={"type": "object", "required": ["caveats", "covered", "coverage", "count", "truncated", "facts"],
                     "properties": {"caveats": {"type": "array", "items": {"type": "string"}},
                                    "covered": {"type": "boolean"}, "coverage": {"type": "object"},
                                    "count": {"type": "integer"}, "truncated": {"type": "boolean"},
                                    "facts": {"type": "array", "items": {"type": "object"}}}})
async def seen_layer(ctx: ToolContext, params: dict[str, Any]) -> Answer:
    cap = ctx.services.settings.seen_max_facts
    cov, facts, truncated = await query.seen_facts(reader_of(ctx.services), params["lat"], params["lon"],
                                                   params["radius"], cap)
    caveats = []
    if not cov.complete:
        caveats.append(
            f"Not covered: {cov.covered} of {cov.cells} cells of this circle are swept and approved "
            f"({math.floor(cov.fraction * 100)}%). Facts are served for the covered part only; the rest is "
            "unswept ground, "
            "which says nothing about what stands there. POST /earth/sweep-request asks for a sweep.")
    if truncated:
        caveats.append(f"Truncated: more than {cap} facts lie in this circle; the {cap} nearest the point are "
                       "served. Ask for a smaller radius for the rest.")
    if cov.bare:
        caveats.append(f"{cov.bare} of the {cov.covered} swept cells had no street imagery: the provider listed no "
                       "usable photo there when they were swept, so nothing was seen in them from the street.")
    return Answer({"covered": cov.complete, "coverage": cov.as_json(), "count": len(facts),
                   "truncated": truncated, "maxFacts": cap, "facts": facts},
                  caveats=caveats + SEEN_CAVEATS)


@tool(TOOLS, name="street_measure", title="Street measurements near a point",
      description="Road width (median of the nearest photos, with method and spread), the per-scene calibration "
                  "verdict (scaleTrust) of each photo, and the georeferenced object inventory (label, distance, "
                  "size, bearing, derived coordinates, heightIsLowerBound) within maxM of a point, from approved "
                  "sweeps. measured:false where nothing was measured. Metric depth times angular extent, no lidar.",
      params=(lat(), lon(), Param("maxM", NUMBER, "Artifact search radius in metres", default=150, minimum=50,
                                  maximum=400)),
      routes={"earth": "/street-measure"}, http_max_age_s=30, open_world=False, tags=("seen",))
async def street_measure(ctx: ToolContext, params: dict[str, Any]) -> Answer:
    out = await query.street_measure(reader_of(ctx.services), params["lat"], params["lon"], params["maxM"])
    cov = out.pop("coverage")
    caveats = ["Measured by metric monocular depth times angular extent, calibrated per scene against detected "
               "vehicles and camera geometry; no lidar. scaleTrust says how far each scene's scale can be trusted.",
               "An object's size is that of its visible part: heightIsLowerBound (widthIsLowerBound) is set when "
               "the frame cut it, and the true size is larger.",
               "Objects are those seen from approved photos within maxM; what no photo saw is not listed."]
    if not out["measured"]:
        caveats.insert(0, "Not measured: no approved street measurement lies within maxM of this point. This says "
                          "nothing about what stands there.")
    if out["roadWidth"] is None and out["measured"]:
        caveats.insert(0, "Road width unknown: the photos here gave no road width.")
    if out["truncated"]:
        caveats.insert(0, "Truncated: the nearest photos and objects are served; ask for a smaller maxM.")
    rw = out["roadWidth"] or {"value": None, "unit": "m", "confidence": "unknown", "method": None,
                              "spreadM": None, "photos": 0, "basis": None}
    return Answer({"measured": out["measured"], "covered": cov.complete, "coverage": cov.as_json(),
                   "roadWidth": rw, "scenes": out["scenes"], "objects": out["objects"],
                   "count": {"scenes": len(out["scenes"]), "objects": len(out["objects"])},
                   "truncated": out["truncated"]}, caveats=caveats)


@tool(TOOLS, name="seen_areas", title="Covered (swept) areas",
      description="The swept ground as a GeoJSON FeatureCollection: one polygon per connected group of covered H3 "
                  "cells (approved sweeps, and ground swept with no street imagery to read), with its cell count, "
                  "how many of them had no imagery, its area and when it was covered.",
      routes={"public": "/seen-areas"}, scopes=("earth.seen-areas",), http_max_age_s=60, tags=("seen",))
async def seen_areas(ctx: ToolContext, params: dict[str, Any]) -> Answer:
    cap = CAPS[ctx.caller.plan].rows if ctx.caller.plan in CAPS else 2000
    features, total, truncated = await query.covered_areas(reader_of(ctx.services), cap)
    caveats = ["Covered means swept: street photos read and the results approved by a reviewer, or, for the cells "
               "counted in noImageryCells, a sweep that found no street imagery there to read (nothing was seen "
               "there). Ground outside these areas is unswept, which says nothing about what stands there.",
               "Areas are unions of H3 cells (resolution 10, about 150 m across); a cell counts as covered once, and "
               "a later sweep does not refresh its time here."]
    if truncated:
        caveats.insert(0, f"Truncated: {total} areas, the {cap} largest served (the row cap of this plan).")
    return Answer({"type": "FeatureCollection", "count": len(features), "total": total, "truncated": truncated,
                   "features": features}, caveats=caveats)
