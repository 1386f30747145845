"""site_intel (a score of one site) and site_scan (the ranked cells of a small bbox).

``site_intel`` is declared twice over one handler: the direct and legacy routes are keyless
like every route of those families (SPEC.md, Authentication 1), while the credentialed
``/site-intel`` needs the scope ``earth.site-intel`` and is not open to the anonymous
credential (Authentication 5), which a declaration states with ``keyless=False`` for all of
its routes at once.
"""
from __future__ import annotations

import math
from typing import Any

from coordinator.core.context import ToolContext
from coordinator.core.honesty import Answer, Health
from coordinator.core.registry import STRING, Param, Tool, bbox, lat, lon, radius, tool
from coordinator.features import grid
from . import ground as ground_mod
from . import model, scan

TOOLS: list[Tool] = []

CATEGORY = Param("category", STRING, "A place category (as the places dataset names it, e.g. restaurant, "
                 "pharmacy): adds a saturation factor from the same-category places nearby",
                 pattern=r"^[a-z][a-z0-9_]{1,59}$", max_length=60)

MODEL = {"version": 1, "documentation": "docs/scoring.md", "evidenceThreshold": model.EVIDENCE_THRESHOLD,
         "minFeatures": model.MIN_FEATURES,
         "weights": {f.name: f.weight for f in model.FEATURES}}

CAVEATS = [
    "The score is a model over open data, not a forecast of success: each contribution says what was read, its "
    "weight, its confidence and the geometry it was read from; docs/scoring.md gives each one's rationale.",
    "A null score means the model declined to guess (too little is known here); do not impute one.",
    "Mapped features that are absent are unknown, not zero: open map data is incomplete, most of all outside cities.",
    "Population is spread evenly over each grid cell; places and structures are those mapped in the loaded datasets.",
]


def _site_caveats(sc: model.Score) -> list[str]:
    out = list(CAVEATS)
    if sc.declined:
        out.insert(0, f"No score: {sc.declined}.")
    unknown = [f.name for f, r in sc.readings if r.signal is None]
    if unknown and not sc.declined:
        out.insert(0, f"Scored from the known features only; unknown here: {', '.join(unknown)}.")
    return out


async def site_intel(ctx: ToolContext, params: dict[str, Any]) -> Answer:
    la, lo, r, category = params["lat"], params["lon"], params["radius"], params.get("category")
    ground = await ground_mod.load(ctx.services, grid.circle_box(la, lo, r))
    sites = model.Sites.at(ground, [la], [lo], r, evidence=True)
    sc = model.evaluate(ground, sites, category)[0]
    body: dict[str, Any] = {
        "site": {"lat": la, "lon": lo, "radiusM": r, "category": category},
        "score": sc.value, "confidence": sc.confidence.value, "declined": sc.declined,
        "evidence": {"knownWeightShare": round(sc.known_weight / model.TOTAL_WEIGHT, 3),
                     "threshold": model.EVIDENCE_THRESHOLD, "minFeatures": model.MIN_FEATURES},
        "contributions": [model.contribution(f, rd) for f, rd in sc.readings],
    }
    if category:
        body["saturation"] = sc.saturation.as_json(category)
    body["model"] = MODEL
    return Answer(body, caveats=_site_caveats(sc) + grid.antimeridian_caveats(la, lo, r),
                  health=Health(ground.reports))


def pending_site(params: dict[str, Any]) -> dict[str, Any]:
    """The answer while a cold score goes on past its bound: no score, declined, nothing read."""
    return {"site": {"lat": params["lat"], "lon": params["lon"], "radiusM": params["radius"],
                     "category": params.get("category")},
            "score": None, "confidence": "unknown", "declined": "not computed yet: ask again after retryAfterS",
            "contributions": []}


def pending_scan(params: dict[str, Any]) -> dict[str, Any]:
    """The answer while a cold scan goes on past its bound: no cell is computed yet, so how
    many there are and how many have a score is unknown (null), not zero."""
    return {"bbox": list(params["bbox"]), "category": params.get("category"), "count": None, "scored": None,
            "cells": []}


SITE_PARAMS = (lat(), lon(), radius(100, 3000, 1000), CATEGORY)
SITE_DESCRIPTION = ("Site score of a point: signed contributions (road access, arterial reach, activity, population, "
                    "utilities, hazard), each with feature, weight, value, confidence and evidence geometry; score "
                    "(0-100) null when the known features carry less than half the weight; with category, a "
                    "saturation factor from the same-category places nearby.")

tool(TOOLS, name="site_intel", title="Site score", description=SITE_DESCRIPTION, params=SITE_PARAMS,
     routes={"earth": "/site-intel", "legacy": "/site-intel"}, cache_ttl_s=600, cold_bound_s=60,
     cold_fallback=pending_site, tags=("sites",))(site_intel)
tool(TOOLS, name="site_intel_credentialed", title="Site score (credentialed)",
     description=SITE_DESCRIPTION + " Needs the scope earth.site-intel; not open to the anonymous credential.",
     params=SITE_PARAMS, routes={"public": "/site-intel"}, scopes=("earth.site-intel",), keyless=False,
     cache_ttl_s=600, cold_bound_s=60, cold_fallback=pending_site, mcp=False, tags=("sites",))(site_intel)


@tool(TOOLS, name="site_scan", title="Site scan: ranked cells of a bbox",
      description="The H3 cells (resolution 9) of a bbox of at most 0.05 degrees a side, ranked by the site "
                  "model's score at each centre (read over 300 m), each with score, confidence and the distance "
                  "to the nearest mapped road from the road geometry; cells the model declines to score come last.",
      params=(bbox(max_side=0.05), CATEGORY), routes={"earth": "/site-scan", "legacy": "/site-scan"},
      cache_ttl_s=600, cold_bound_s=60, cold_fallback=pending_scan, tags=("sites",))
async def site_scan(ctx: ToolContext, params: dict[str, Any]) -> Answer:
    box, category = params["bbox"], params.get("category")
    ground = await ground_mod.load(ctx.services, scan.load_box(box))
    cells = scan.scan(ground, box, category)
    scored = sum(1 for c in cells if c["score"] is not None)
    caveats = list(CAVEATS)
    caveats.insert(0, f"Each cell is scored as a site of {scan.RADIUS_M:g} m around its centre; ranks compare "
                      "cells of this scan only.")
    if cells and not scored:
        caveats.insert(0, "No cell has a score: too little is known of this ground (see health).")
    w, s, e, n = box
    area = (e - w) * (n - s) * (grid.EARTH_R * math.pi / 180) ** 2 * math.cos(math.radians((s + n) / 2)) / 1e6
    return Answer({"bbox": list(box), "category": category, "h3Resolution": scan.RESOLUTION,
                   "cellRadiusM": scan.RADIUS_M, "areaKm2": round(area, 3), "count": len(cells), "scored": scored,
                   "cells": cells, "model": MODEL},
                  caveats=caveats, health=Health(ground.reports))
