"""Traffic flow tiles from a keyed provider: TomTom's raster flow tiles v4 (UPSTREAMS.md §2.6).

No keyless global traffic source was found, so traffic comes from a configured TomTom key
(``SIS_SOURCES__TOMTOM_TRAFFIC__API_KEY``); without it the ``overlay:traffic`` layer and
``GET /traffic-tiles`` say so, naming that setting. The template is
``{base}/{style}/{z}/{x}/{y}.png?key=&tileSize=256&thickness=``: clients fetch the tiles from
TomTom, so the key travels in the template (use a key restricted to this purpose). Building
the template asks TomTom nothing; whether the key is accepted shows when a client asks for a
tile, and the answer says so.
"""
from __future__ import annotations

import math

from coordinator.sources.base import Query, Source, SourceError
from coordinator.sources.registry import register

LICENSE = "TomTom terms (proprietary, keyed)"
STYLES = ("absolute", "relative", "relative0", "relative0-dark", "relative-delay", "reduced-sensitivity")
MAX_ZOOM = 22


def tile_range(bbox: tuple[float, float, float, float], z: int) -> dict[str, list[int]]:
    """The slippy-map tile columns and rows (Web Mercator) covering ``bbox`` at zoom ``z``."""
    w, s, e, n = bbox
    last = 2 ** z - 1

    def col(lon: float) -> int:
        return min(last, max(0, int((lon + 180) / 360 * 2 ** z)))

    def row(lat: float) -> int:
        lat = max(-85.0511, min(85.0511, lat))
        y = (1 - math.asinh(math.tan(math.radians(lat))) / math.pi) / 2
        return min(last, max(0, int(y * 2 ** z)))

    return {"x": [col(w), col(e)], "y": [row(n), row(s)]}


@register
class TomTomTraffic(Source[dict]):
    name = "tomtom_traffic"
    label = "TomTom traffic"
    license = LICENSE
    default_base_url = "https://api.tomtom.com/traffic/map/4/tile/flow"
    description = "TomTom raster traffic flow tiles v4 (a template; needs a key)"
    needs_key = True
    options = {"style": "relative0", "thickness": "10"}

    async def fetch(self, query: Query) -> list[dict]:
        style = str(self.option("style"))
        if style not in STYLES:
            raise SourceError(f"style {style!r} (SIS_SOURCES__TOMTOM_TRAFFIC__STYLE) is not one of {', '.join(STYLES)}")
        return [{"tiles": f"{self.base_url}/{style}/{{z}}/{{x}}/{{y}}.png?key={self.api_key}&tileSize=256"
                          f"&thickness={self.option('thickness')}",
                 "format": "png", "tileSize": 256, "minZoom": 0, "maxZoom": MAX_ZOOM, "style": style,
                 "attribution": "Traffic © TomTom", "license": LICENSE}]
