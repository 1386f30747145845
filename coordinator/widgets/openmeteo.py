"""Open-Meteo forecast API at one point (UPSTREAMS.md §2.3): current conditions or a daily
forecast, for the point the caller names. (The twin's ``open_meteo`` adapter reads fixed
cities; this one reads the caller's point, so it is its own adapter.)

``/v1/forecast?latitude=&longitude=&current=...&timezone=GMT`` answers ``{"latitude",
"longitude" (snapped to the model grid), "elevation", "current_units": {...}, "current":
{"time": "2026-11-25T06:00" (no seconds, no offset: GMT as asked), "interval", <variable>:
value}}``; with ``daily=...&forecast_days=N`` it answers ``"daily_units"`` and ``"daily":
{"time": [...], <variable>: [...]}`` as parallel arrays. Errors are HTTP 400 ``{"error": true,
"reason"}``. Values are a model's, not a station's measurement. Data CC BY 4.0.

The recorded sample (``samples/open_meteo_point/v1/forecast.json``) is constructed for this
project in that format (both blocks in one answer), not a recording.
"""
from __future__ import annotations

import json
from typing import Any

from coordinator.sources.base import Query, Source, SourceError
from coordinator.sources.registry import register

from .build import LICENSES


# The answer's point is the model grid's nearest (a few km away); one further than this is
# another point's answer, refused rather than served for the one asked.
GRID_TOLERANCE_DEG = 0.5


@register
class OpenMeteoPoint(Source[dict]):
    name = "open_meteo_point"
    label = "Open-Meteo"
    license = LICENSES["open_meteo_point"]
    default_base_url = "https://api.open-meteo.com"
    description = "Open-Meteo forecast at a caller's point (JSON)"
    cache_ttl_s = 900.0
    caveat = ("Weather values are a forecast model's at the nearest grid point, not a station's measurement. "
              "Weather data by Open-Meteo.com (CC BY 4.0), read from its free tier, which is for non-commercial "
              "use: commercial use needs Open-Meteo's API plan. A daily row is a day of the point's own time zone "
              "(its 'timezone').")

    async def fetch(self, query: Query) -> list[dict]:
        lat, lon = query.point or (None, None)
        ids = dict(query.params.get("_upstream") or {})
        block = "current" if "current" in ids else "daily"
        # Current conditions are stamped in GMT; a daily row is a local day (its max, min and sums
        # over the point's own midnight to midnight, not a UTC day eight hours off in California).
        args: dict[str, Any] = {"latitude": f"{lat:g}", "longitude": f"{lon:g}",
                                "timezone": "GMT" if block == "current" else "auto"}
        args[block] = ids[block]
        if block == "daily":
            args["forecast_days"] = int(query.params.get("days") or 7)
        code, body = await self.get("/v1/forecast", args)
        try:
            doc = json.loads(body)
        except ValueError:
            raise SourceError(f"HTTP {code}: answer is not JSON") from None
        if isinstance(doc, dict) and doc.get("error"):
            raise SourceError(f"Open-Meteo refused (HTTP {code}): {doc.get('reason') or 'no reason given'}")
        if code != 200:
            raise SourceError(f"HTTP {code}")
        if abs(float(doc.get("latitude", lat)) - lat) > GRID_TOLERANCE_DEG or \
                abs((float(doc.get("longitude", lon)) - lon + 180) % 360 - 180) > GRID_TOLERANCE_DEG:
            raise SourceError(f"the answer is for {doc.get('latitude')},{doc.get('longitude')}, not near "
                              f"{lat:g},{lon:g}")
        return parse_forecast(doc, block, ids[block].split(","), self.license)


def parse_forecast(doc: Any, block: str, variables: list[str], license: str) -> list[dict]:
    if not isinstance(doc, dict) or not isinstance(doc.get(block), dict):
        raise SourceError(f"answer has no {block!r} block")
    units = doc.get(f"{block}_units") or {}
    data = doc[block]
    grid = {"lat": doc.get("latitude"), "lon": doc.get("longitude"), "elevationM": doc.get("elevation")}

    def fig(v: Any, var: str) -> dict[str, Any]:
        return {"value": v, "unit": units.get(var), "confidence": "low" if v is not None else "unknown"}

    if block == "current":
        t = data.get("time")
        return [{"time": f"{t}:00Z" if isinstance(t, str) and len(t) == 16 else t, "gridPoint": grid,
                 **{v: fig(data.get(v), v) for v in variables}, "modelled": True, "license": license}]
    times = data.get("time")
    if not isinstance(times, list):
        raise SourceError("daily block has no time array")
    out = []
    zone = doc.get("timezone")
    for n, day in enumerate(times):
        row = {"date": day, "timezone": zone, "gridPoint": grid, "modelled": True, "license": license}
        for v in variables:
            col = data.get(v)
            row[v] = fig(col[n] if isinstance(col, list) and n < len(col) else None, v)
        out.append(row)
    return out
