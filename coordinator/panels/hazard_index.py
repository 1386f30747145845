"""Hazard index at a point: BNPB's InaRISK hazard indices, per hazard and multi-hazard
(UPSTREAMS.md §9).

Each hazard is an ArcGIS ImageServer (``/{SERVICE}/ImageServer/identify``) asked for the pixel
under the point; it answers ``{"objectId": 0, "name": "Pixel", "value": "0.6842", ...}`` with
``value`` a string number 0-1 or ``"NoData"`` (outside the modelled area: unknown, never 0).
ArcGIS reports its own errors with HTTP 200 as ``{"error": {"code", "message"}}``.

Twelve services are read for one point, so a cold point takes a while: the tool is declared
``cold="accepted"``: the first request answers 202 with Retry-After, the same URL answers 200
once every index is in, and concurrent requests for the point share one computation (the
pipeline's cache with single flight). A service that fails adds an unusable source of its own
to ``health``, so the answer is degraded (never cached) and says which hazard is missing.

Classes rendah / sedang / tinggi use the cut-offs 1/3 and 2/3, which no source confirmed
(UNVERIFIED): the caveats say so.

The recorded samples (``samples/inarisk/{SERVICE}/ImageServer/identify.json``, one per
service) are constructed in the ImageServer identify format, made for this project, not real
recordings; the fake serves each whatever point is asked.
"""
from __future__ import annotations

import asyncio
import json
from dataclasses import replace
from typing import Any

from coordinator.core.context import ToolContext
from coordinator.core.honesty import Answer, Confidence, Health, figure
from coordinator.core.registry import COLD_ACCEPTED, Tool, lat, lon, tool
from coordinator.sources.base import Query, Source, SourceError
from coordinator.sources.registry import register

TOOLS: list[Tool] = []

LICENSE = "BNPB InaRISK (terms unstated)"
HAZARDS = {"BANJIR": "flood", "BANJIRBANDANG": "flash flood", "CUACAEKSTRIM": "extreme weather",
           "GEA": "extreme waves and abrasion", "GEMPABUMI": "earthquake", "GUNUNGAPI": "volcano",
           "KEKERINGAN": "drought", "LIKUEFAKSI": "liquefaction", "KARHUTLA": "forest and land fire",
           "TANAHLONGSOR": "landslide", "TSUNAMI": "tsunami"}
MULTI = "INDEKS_MULTI_BAHAYA"
SERVICES = tuple(f"INDEKS_BAHAYA_{h}" for h in HAZARDS) + (MULTI,)


def hazard_class(value: float | None) -> str | None:
    """rendah / sedang / tinggi by the UNVERIFIED cut-offs 1/3 and 2/3; None when unknown."""
    if value is None:
        return None
    return "rendah" if value < 1 / 3 else "sedang" if value < 2 / 3 else "tinggi"


def parse_identify(doc: Any) -> float | None:
    if not isinstance(doc, dict):
        raise SourceError("answer is not an identify result")
    if "error" in doc:
        err = doc["error"] or {}
        raise SourceError(f"ArcGIS error {err.get('code')}: {err.get('message')}")
    raw = doc["value"]
    if str(raw).strip().lower() in ("nodata", "", "none", "null"):
        return None
    value = float(raw)
    if not 0 <= value <= 1:
        raise SourceError(f"index {raw} is outside 0-1")
    return value


@register
class InaRisk(Source[dict]):
    name = "inarisk"
    label = "BNPB InaRISK"
    license = LICENSE
    default_base_url = "https://gis.bnpb.go.id/server/rest/services/inarisk"
    description = "BNPB InaRISK hazard index ImageServers (ArcGIS identify, JSON)"
    default_timeout_s = 15.0

    async def identify(self, service: str, lat_: float, lon_: float) -> dict[str, Any]:
        """One service's index at the point: its value, or the reason it could not be read."""
        geometry = json.dumps({"x": lon_, "y": lat_, "spatialReference": {"wkid": 4326}}, separators=(",", ":"))
        try:
            doc = await self.get_json(f"/{service}/ImageServer/identify",
                                      {"geometry": geometry, "geometryType": "esriGeometryPoint",
                                       "returnGeometry": "false", "returnCatalogItems": "false", "f": "json"})
            return {"service": service, "value": parse_identify(doc), "error": None}
        except SourceError as exc:
            return {"service": service, "value": None, "error": str(exc)}
        except (KeyError, TypeError, ValueError) as exc:
            return {"service": service, "value": None, "error": f"unparseable answer ({type(exc).__name__})"}

    async def fetch(self, query: Query) -> list[dict]:
        lat_, lon_ = query.point
        rows = list(await asyncio.gather(*(self.identify(s, lat_, lon_) for s in SERVICES)))
        if all(r["error"] for r in rows):
            raise SourceError(f"no service answered ({rows[0]['error']})")
        return rows


def _served(row: dict[str, Any]) -> dict[str, Any]:
    v = row["value"]
    index = (figure(v, Confidence.HIGH, scale="0-1") if v is not None
             else figure(None, Confidence.UNKNOWN, scale="0-1",
                         reason=row["error"] or "NoData: outside the area the index covers"))
    return {"service": row["service"], "index": index, "class": hazard_class(v), "license": LICENSE}


@tool(TOOLS, name="hazard_index", title="Hazard index", routes={"public": "/hazard-index"},
      description="BNPB InaRISK hazard indices (0-1) at a point in Indonesia, per hazard (flood, flash flood, "
                  "extreme weather, extreme waves, earthquake, volcano, drought, liquefaction, forest fire, "
                  "landslide, tsunami) and multi-hazard. A cold point answers 202 with Retry-After; the same URL "
                  "answers 200 once ready.",
      params=(lat(), lon()), scopes=("earth.hazard-index",), cache_ttl_s=86400, cold=COLD_ACCEPTED,
      retry_after_s=3, tags=("panels",))
async def hazard_index(ctx: ToolContext, params: dict[str, Any]) -> Answer:
    src = ctx.services.sources["inarisk"]
    read = await src.read(Query(point=(params["lat"], params["lon"])))
    by_service = {r["service"]: r for r in read.records}
    # One report per service asked: counted as one usable source holding all twelve, beside each failed
    # one again, a read with one service down said "1 of 2 sources did not answer".
    health = Health([replace(read.report, name=f"{src.report_name} {r['service']}", ok=not r["error"],
                             error=r["error"] or None, records=None if r["error"] else 1)
                     for r in read.records] if read.records else [read.report])
    hazards = [{"hazard": name, **_served(by_service[f"INDEKS_BAHAYA_{code}"])}
               for code, name in HAZARDS.items() if f"INDEKS_BAHAYA_{code}" in by_service]
    multi = _served(by_service[MULTI]) if MULTI in by_service else None
    caveats = ["Indices are BNPB's modelled hazard (0-1) for the pixel under the point, not risk to a building "
               "and not an observation; NoData (outside the modelled area) is unknown, not zero.",
               "Classes rendah (< 1/3), sedang (< 2/3) and tinggi use cut-offs no source confirmed."]
    return Answer({"point": {"lat": params["lat"], "lon": params["lon"]}, "hazards": hazards,
                   "multiHazard": multi}, caveats=caveats, health=health)
