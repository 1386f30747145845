"""Precipitation radar tiles: RainViewer's public weather maps (UPSTREAMS.md §2.3), the source
of the ``overlay:radar`` template.

``/public/weather-maps.json`` answers ``{"version", "generated", "host": "https://tilecache.
rainviewer.com", "radar": {"past": [{"time", "path"}], "nowcast": []}, ...}``; a tile is
``{host}{path}/{256|512}/{z}/{x}/{y}/{color}/{smooth}_{snow}.png``. The newest ``past`` frame is
announced with colour scheme 2 (universal blue), smoothed, snow shown. Since 2026 the tiles stop
at zoom 7 and ``nowcast`` may be empty or absent. The service announces the template; clients
fetch the tiles from RainViewer (never rehosted). RainViewer asks for attribution.

The recorded sample (``samples/rainviewer/public/weather-maps.json``) is the documented example.
"""
from __future__ import annotations

from datetime import datetime, timezone

from coordinator.sources.base import Query, Source, SourceError
from coordinator.sources.registry import register

LICENSE = "RainViewer terms (free, attribution required)"
MAX_ZOOM = 7


@register
class RainViewer(Source[dict]):
    name = "rainviewer"
    label = "RainViewer"
    license = LICENSE
    default_base_url = "https://api.rainviewer.com"
    description = "RainViewer weather maps index (JSON)"

    async def fetch(self, query: Query) -> list[dict]:
        doc = await self.get_json("/public/weather-maps.json")
        past = ((doc or {}).get("radar") or {}).get("past") if isinstance(doc, dict) else None
        if not isinstance(past, list) or not isinstance(doc.get("host"), str):
            raise SourceError("answer is not a RainViewer weather-maps index")
        if not past:
            raise SourceError("RainViewer lists no past radar frame")
        frame = max(past, key=lambda f: int(f["time"]))
        at = datetime.fromtimestamp(int(frame["time"]), tz=timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")
        return [{"tiles": f"{doc['host']}{frame['path']}/256/{{z}}/{{x}}/{{y}}/2/1_1.png", "format": "png",
                 "tileSize": 256, "minZoom": 0, "maxZoom": MAX_ZOOM, "frameTime": at,
                 "attribution": "RainViewer (rainviewer.com)", "license": LICENSE}]
