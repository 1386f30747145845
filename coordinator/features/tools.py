"""Map-data tools (SPEC.md: Places and infrastructure, Environment features, Road
geometry, Place trends; brand exposure of the credentialed family).

Every answer names the source that answered (``answeredBy`` and ``health``): the newest
loaded dataset version covering the whole request, else, for OpenStreetMap classes, the
live Overpass API. Each record carries its own license, and ``licenses`` counts them, so
share-alike (ODbL) and permissive (CDLA, CC0, Apache) records stay separable. An empty
list from a source that answered means none mapped, never none there.
"""
from __future__ import annotations

import math
from collections import Counter
from typing import Any, Sequence

import shapely

from coordinator.core.access.plans import CAPS
from coordinator.core.context import ToolContext
from coordinator.core.errors import BadParameter, Unavailable
from coordinator.core.honesty import Answer, Health, SourceReport
from coordinator.core.registry import LONLAT_LIST, STRING, Param, Tool, bbox, lat, lon, radius, tool
from coordinator.datasets import versions
from coordinator.sources.base import Query
from . import geojson, grid, store
from .classes import ENVIRONMENT, INFRASTRUCTURE, PLACES, ROADS
from .widths import MODEL

TOOLS: list[Tool] = []
TREND_SAMPLES = 20

NONE_MAPPED = ("An empty list means none mapped in the source that answered, never none there: open map data "
               "is incomplete, most of all outside cities.")
SAMPLING = ("a uniform sample, the same on every call: the features with the lowest hash of their id among those "
            "whose hash has at least k trailing zero bits (1 in 2^k), k the smallest level holding the sample size; "
            "'matched' counts every feature in the bbox, exactly when k is 0, else estimated as the count at level k "
            "times 2^k, with a margin of about two standard errors")


def _limit(ctx: ToolContext) -> int:
    return CAPS[ctx.caller.plan].rows if ctx.caller.plan in CAPS else CAPS["anon"].rows


def _no_dataset(kind: str) -> SourceReport:
    return SourceReport(f"dataset:{kind}", "n/a", ok=False, absent=True,
                        error=f"no loaded {kind} dataset covers this request: sis ingest {kind} FILE")


def _partly(v, box: grid.BBox) -> list[str]:  # noqa: ANN001
    """The caveat of a version that meets the request but does not hold all of it."""
    if store.holds(v, box):
        return []
    ext = ",".join(f"{x:g}" for x in versions.extent_of(v) or ())
    return [f"The request reaches beyond the loaded {v.kind} dataset (version {v.id}, extent {ext}): outside it "
            "nothing is known, not nothing is there."]


async def _find(ctx: ToolContext, kind: str, classes: Sequence[str], box: grid.BBox,
                query) -> tuple[store.Found, SourceReport, list[str]]:  # noqa: ANN001
    """The features from the newest loaded version covering ``box``; else, for the map
    extract kind, from Overpass; ``query(version_id, None)`` asks the store, and
    ``query(None, rows)`` selects from live rows. Places have no live source, so a
    version meeting part of the box answers, saying so (the third item: caveats)."""
    cover = await store.covering(ctx.services.db, kind, box, partial=kind != store.OSM_KIND)
    if cover:
        return await query(cover[0].id, None), versions.report(cover[0]), _partly(cover[0], box)
    if kind != store.OSM_KIND:
        return store.Found(0, []), _no_dataset(kind), []
    read = await ctx.services.sources["overpass"].read(Query(bbox=box, params={"classes": tuple(classes)}))
    return await query(None, read.records), read.report, []


async def _near(ctx: ToolContext, params: dict[str, Any],
                classes: Sequence[str]) -> tuple[store.Found, SourceReport, list[str]]:
    """OSM features of ``classes`` within the radius of a point, nearest first, from the
    loaded extract covering the circle or from Overpass, and the caveats of the search: a
    circle across the antimeridian is searched on the point's side only (the store's and
    Overpass's boxes run west to east)."""
    la, lo, r, limit = params["lat"], params["lon"], params["radius"], _limit(ctx)

    async def query(version_id, rows):  # noqa: ANN001, ANN202
        if rows is not None:
            return store.select_near(rows, la, lo, r, limit)
        return await store.near(ctx.services.db, version_id, classes, la, lo, r, limit)

    found, report, _ = await _find(ctx, store.OSM_KIND, classes, grid.circle_box(la, lo, r), query)
    return found, report, grid.antimeridian_caveats(la, lo, r)


def _licenses(rows: list[dict]) -> dict[str, int]:
    return dict(sorted(Counter(r["license"] for r in rows).items()))


NOT_ANSWERED = ("The source did not answer in full (health says why): 'matched' is unknown (null), and what is "
                "listed, if anything, is not all that is mapped; an empty list here means nothing was read, not "
                "none mapped.")


def _answer(found: store.Found, report: SourceReport, features: list[dict], extra: dict[str, Any],
            caveats: list[str]) -> Answer:
    """The features and their counts; where the source did not answer in full, the full count
    is unknown (null, never the zero of a list nobody read) and no source is named as the
    one that answered unless it gave some of them."""
    body = {"answeredBy": report.name if report.ok or features else None, **extra,
            "matched": found.total if report.ok else None, "count": len(features),
            "truncated": found.truncated, "licenses": _licenses(found.rows), "features": features}
    if not features and report.ok:
        body["empty"] = "none mapped"
    return Answer(body, caveats=caveats + [NONE_MAPPED if report.ok else NOT_ANSWERED], health=Health([report]))


@tool(TOOLS, name="places_bbox", title="Places in a bbox (sampled)",
      description="Places from an open places dataset (Overture places, each record under its own sources' "
                  "license, commonly CDLA-Permissive-2.0) inside a bbox. The result is sampled: 'sampling' says how, "
                  "'matched' how many matched in all.",
      params=(bbox(max_side=2),), routes={"earth": "/places", "legacy": "/places", "public": "/places"},
      scopes=("earth.places",), bbox_ceiling_deg=0.6, cache_ttl_s=600, per_plan=True, tags=("features",))
async def places_bbox(ctx: ToolContext, params: dict[str, Any]) -> Answer:
    box, limit = params["bbox"], _limit(ctx)

    async def query(version_id, rows):  # noqa: ANN001, ANN202
        return await store.sample_box(ctx.services.db, version_id, PLACES, box, limit, docs=True)

    found, report, partly = await _find(ctx, store.PLACES_KIND, PLACES, box, query)
    feats = [geojson.bbox_feature(r) for r in found.rows]
    return _answer(found, report, feats,
                   {"sampled": found.truncated, "matchedEstimated": found.total_estimated,
                    "sampling": {"method": SAMPLING, "returned": len(feats),
                                 "matched": found.total if report.ok else None,
                                 "matchedMargin": found.margin, "limit": limit}},
                   ["Places are a sample of those mapped in the bbox, not all of them; 'matched' is the full count.",
                    "Each place carries the license of its own sources; keep them with the records."] + partly)


@tool(TOOLS, name="infrastructure_bbox", title="Communication and power structures in a bbox",
      description="Communication towers and masts, power towers, poles, lines and substations inside a bbox, at "
                  "their surveyed positions in OpenStreetMap (ODbL-1.0). Coverage is very incomplete.",
      params=(bbox(max_side=2),), routes={"earth": "/infrastructure", "legacy": "/infrastructure",
                                          "public": "/infrastructure"},
      scopes=("earth.infrastructure",), bbox_ceiling_deg=2, cache_ttl_s=600, per_plan=True, tags=("features",))
async def infrastructure_bbox(ctx: ToolContext, params: dict[str, Any]) -> Answer:
    box, limit = params["bbox"], _limit(ctx)

    async def query(version_id, rows):  # noqa: ANN001, ANN202
        if rows is not None:
            return store.select_box(rows, box, limit)
        return await store.sample_box(ctx.services.db, version_id, INFRASTRUCTURE, box, limit, docs=True)

    found, report, _ = await _find(ctx, store.OSM_KIND, INFRASTRUCTURE, box, query)
    return _answer(found, report, [geojson.bbox_feature(r) for r in found.rows], {"sampled": found.truncated},
                   ["Coverage of towers and power structures in open map data is very incomplete: what is listed "
                    "was surveyed by mappers, and much that stands is not mapped."])


@tool(TOOLS, name="environment_features", title="Mapped environment features near a point",
      description="Mapped trees and tree rows, gates, communication towers, power structures and power lines "
                  "within radius of a point (OpenStreetMap, ODbL-1.0). Positions only: heights are not mapped; "
                  "each feature names the class prior a renderer should use. health names the source that answered.",
      params=(lat(), lon(), radius(100, 800, 400)), routes={"earth": "/environment"}, cache_ttl_s=600,
      per_plan=True, tags=("features",))
async def environment_features(ctx: ToolContext, params: dict[str, Any]) -> Answer:
    found, report, cut = await _near(ctx, params, ENVIRONMENT)
    return _answer(found, report, [geojson.feature(f, geojson.mapped_properties(f)) for f in found.rows],
                   {"radiusM": params["radius"]},
                   ["Positions only: heights are absent; heightPrior is a class prior for rendering, not a "
                    "measurement.", *cut])


@tool(TOOLS, name="road_geometry", title="Road centerlines near a point",
      description="Road centerlines (GeoJSON) within radius of a point, each with ruasWidthM: the width of one "
                  "direction of carriageway from a per-class model (PP 34/2006 minimum road-body widths), a model "
                  "and not a measurement, null where the class is outside the model. Two-way roads are about 2 ruas.",
      params=(lat(), lon(), radius(100, 1000, 400)), routes={"earth": "/road-geometry"}, cache_ttl_s=600,
      per_plan=True, tags=("features",))
async def road_geometry(ctx: ToolContext, params: dict[str, Any]) -> Answer:
    found, report, cut = await _near(ctx, params, ROADS)
    feats = [geojson.feature(f, store.road_props(f)) for f in found.rows]
    return _answer(found, report, feats, {"radiusM": params["radius"], "widthModel": MODEL},
                   ["ruasWidthM is one direction of carriageway from a per-class model (PP 34/2006 minimum "
                    "road-body widths, halved per direction), not a measurement; a two-way road is about 2 ruas. "
                    "null means the class is outside the model.",
                    "Geometry is clipped to the pieces of each road within the radius.", *cut])


@tool(TOOLS, name="place_trends", title="Place churn between the two newest archived snapshots",
      description="Places that appeared and disappeared (by id, with named samples) inside a bbox between the two "
                  "newest loaded snapshots of the places archive covering it. Map churn mixes real change with "
                  "mapping activity.",
      params=(bbox(max_side=1),), routes={"earth": "/place-trends", "legacy": "/place-trends"}, cache_ttl_s=3600,
      tags=("features",))
async def place_trends(ctx: ToolContext, params: dict[str, Any], attempt: int = 0) -> Answer:
    box = params["bbox"]
    db = ctx.services.db
    caveats = ["Map churn conflates real change with mapping activity (imports, clean-ups, re-identified places): "
               "an id that disappeared may stand yet, and one that appeared may be old."]
    snaps = await store.covering(db, store.PLACES_KIND, box, n=2, partial=True)
    if len(snaps) < 2:
        held = len(snaps)
        reason = (f"the archive holds {held} snapshot{'s' if held != 1 else ''} covering this bbox; trends need two "
                  f"(sis ingest places FILE loads one)")
        reports = [versions.report(v) for v in snaps] or [_no_dataset(store.PLACES_KIND)]
        # Not kept: the next `sis ingest places` answers it, and a kept copy went on asking for that load
        # for the hour of its TTL after it was done.
        return Answer({"covered": False, "reason": reason, "appeared": None, "disappeared": None},
                      caveats=caveats, health=Health(reports), cacheable=False)
    new, old = snaps
    now = await store.fids_in_box(db, new.id, PLACES, box)
    before = await store.fids_in_box(db, old.id, PLACES, box)
    if not await versions.all_ready(db, snaps):
        # A snapshot was dropped while it was read: its rows went under the reads. Read the two newest again.
        if attempt < 2:
            return await place_trends(ctx, params, attempt + 1)
        raise Unavailable("the places archive changed while this was read; ask again", {"retryAfterS": 5},
                          headers={"Retry-After": "5"})

    def side(ids: set[str], names: dict[str, str | None]) -> dict:
        picked = sorted(ids, key=lambda i: (store.sample_key(i), i))[:TREND_SAMPLES]   # ties: not a set's order
        return {"count": len(ids), "samples": [{"id": i, "name": names[i]} for i in picked]}

    return Answer({"covered": True, "from": versions.provenance(old), "to": versions.provenance(new),
                   "appeared": side(set(now) - set(before), now),
                   "disappeared": side(set(before) - set(now), before),
                   "unchanged": len(set(now) & set(before))},
                  caveats=caveats + _partly(new, box) + _partly(old, box), health=Health([versions.report(new), versions.report(old)]))


def _polygon(points: list[tuple[float, float]]) -> shapely.Polygon:
    if len(points) < 3:
        raise BadParameter("'poly' needs at least 3 lon,lat points", {"parameter": "poly"})
    poly = shapely.Polygon(points)
    if not poly.is_valid or poly.area == 0:
        raise BadParameter("'poly' must be a simple ring (its edges may not cross) with an area",
                           {"parameter": "poly", "reason": shapely.is_valid_reason(poly)})
    return poly


def _brand_shape(params: dict[str, Any], caller: Any) -> None:
    """The ring is a simple polygon within the caller's plan's bbox cap, checked before the call is
    admitted (a refusal is not counted against the quota)."""
    poly = _polygon(params["poly"])
    w, s, e, n = poly.bounds
    plan_cap = CAPS[caller.plan].bbox_deg if caller.plan in CAPS else CAPS["anon"].bbox_deg
    if e - w > 180:
        raise BadParameter("'poly' spans more than 180 deg of longitude: a ring across the antimeridian is not "
                           "taken; ask for each side of 180 apart", {"parameter": "poly"})
    if max(e - w, n - s) > plan_cap + 1e-9:
        raise BadParameter(f"'poly' must fit in {plan_cap:g} deg per side (bboxDeg of the {caller.plan} plan)",
                           {"parameter": "poly", "cap": "bboxDeg", "limit": plan_cap, "plan": caller.plan})


@tool(TOOLS, name="brand_exposure", title="A chain's outlets inside a shape (a count)",
      description="How many outlets of a brand (its Wikidata id, Q...) lie inside a polygon, counted from the "
                  "loaded OpenStreetMap extract (brand:wikidata) and the loaded places dataset, each count on its "
                  "own (they overlap and are never summed). Counts only: outlets are never served as rows. poly is "
                  "semicolon-separated lon,lat pairs of a ring (closed or not).",
      params=(Param("brand", STRING, "Wikidata id of the brand, Q followed by digits", required=True,
                    pattern=r"^Q[1-9][0-9]{0,11}$", max_length=13),
              Param("poly", LONLAT_LIST, "Ring of lon,lat pairs separated by ';'", required=True, max_points=500)),
      routes={"public": "/brand-exposure"}, scopes=("earth.brand-exposure",), cache_ttl_s=600, per_plan=True,
      mcp=True, tags=("features",), check=_brand_shape)
async def brand_exposure(ctx: ToolContext, params: dict[str, Any]) -> Answer:
    poly = _polygon(params["poly"])           # checked before admission (``_brand_shape``)
    w, s, e, n = poly.bounds
    counts: dict[str, Any] = {}
    reports: list[SourceReport] = []
    partly: list[str] = []
    for kind in (store.OSM_KIND, store.PLACES_KIND):
        cover = await store.covering(ctx.services.db, kind, (w, s, e, n), partial=True)
        if not cover:
            counts[kind] = None
            reports.append(_no_dataset(kind))
            continue
        pts = await store.brand_points(ctx.services.db, cover[0].id, params["brand"], (w, s, e, n))
        inside = shapely.contains_xy(poly, [p[1] for p in pts], [p[2] for p in pts]) if pts else []
        counts[kind] = int(sum(bool(x) for x in inside))
        reports.append(versions.report(cover[0]))
        partly += _partly(cover[0], (w, s, e, n))
    return Answer({"brand": params["brand"], "counts": counts, "polygonAreaKm2": round(_area_km2(poly), 3),
                   "rows": "never served: counts only"},
                  caveats=["Counts are of outlets tagged with this brand's Wikidata id; untagged or unmapped outlets "
                           "are not counted, so a count is a floor.",
                           "The two counts come from different datasets that overlap: they are never summed.",
                           "null means no loaded dataset covers the shape (unknown), not zero."] + partly
                          + (["A count of 0 means no outlet tagged with this brand is mapped in the shape: how many "
                              "there are is unknown, not none (absence of mapped features is not zero)."]
                             if 0 in counts.values() else []),
                  health=Health(reports))


def _area_km2(poly: shapely.Polygon) -> float:
    """Area on a local equirectangular projection: enough for a shape a degree or two wide."""
    k = math.cos(math.radians(poly.centroid.y))
    m_per_deg = math.radians(1) * grid.EARTH_R
    return poly.area * k * m_per_deg * m_per_deg / 1e6
