"""Air quality stations worldwide: the World Air Quality Index project's stations in a box
(UPSTREAMS.md §2.2), the source of the twin's ``air`` layer.

The air-quality panel (``coordinator/panels/air_quality.py``) reads per-station feeds of a few
configured cities and, by design, serves no positions. A twin needs every station with its
position in one call, which is what ``/map/bounds?latlng=lat1,lng1,lat2,lng2&token=`` answers:
``{"status": "ok", "data": [{"lat", "lon", "uid", "aqi": "57", "station": {"name", "time"}}]}``.
``aqi`` is a string, ``"-"`` when the station is offline (read by the panel's own ``_index``:
unknown, never zero). Errors come with HTTP 200 as ``{"status": "error", "data": "..."}``. The
values are US EPA AQI, not concentrations. It takes the same WAQI token as the panel, set for
this source (``SIS_SOURCES__WAQI_MAP__API_KEY``); without it the layer is unavailable naming
that setting. The path is asked without its trailing slash (unverified that WAQI takes both).

The recorded sample (``samples/waqi_map/map/bounds.json``) is constructed for this project in
that format, not a real recording.
"""
from __future__ import annotations

from typing import Any

from coordinator.panels.air_quality import LICENSE, _index
from coordinator.sources.base import Query, Source, SourceError
from coordinator.sources.registry import register
from coordinator.sources.values import utc_z

from .records import point

WORLD = "-85,-180,85,180"
ATTRIBUTION = [{"name": "World Air Quality Index Project", "url": "https://waqi.info/"}]


def parse_station(s: dict[str, Any]) -> dict[str, Any]:
    station = s.get("station") or {}
    return point(f"waqi:{s['uid']}", float(s["lon"]), float(s["lat"]), LICENSE, station=station.get("name"),
                 time=utc_z(station["time"]) if isinstance(station.get("time"), str) else None, aqi={"value": _index(s.get("aqi")), "scale": "US EPA AQI (0-500)"},
                 measured=True, attributions=ATTRIBUTION)


@register
class WaqiMap(Source[dict]):
    name = "waqi_map"
    label = "WAQI map"
    license = LICENSE
    default_base_url = "https://api.waqi.info"
    description = "World Air Quality Index stations in a box (JSON, needs a token)"
    needs_key = True
    demo_api_key = "demo"        # --demo: its recorded sample answers

    async def fetch(self, query: Query) -> list[dict]:
        doc = await self.get_json("/map/bounds", {"latlng": WORLD, "token": self.api_key})
        if not isinstance(doc, dict) or doc.get("status") != "ok" or not isinstance(doc.get("data"), list):
            why = doc.get("data") if isinstance(doc, dict) and isinstance(doc.get("data"), str) else None
            raise SourceError("WAQI said " + (str(doc.get("status")) if isinstance(doc, dict) else "?")
                              + (f" ({why})" if why else ""))
        return [parse_station(s) for s in doc["data"]]
